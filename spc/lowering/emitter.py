"""The emitter: appends ttnn calls to a program and knows where each device tensor is.

For every device tensor it keeps the layout (:mod:`spc.ttnn.layout`: the conv form
``[1, 1, N*H*W, C]`` or the IR shape itself), the storage format, whether it is in tiles or row
major, and whether it lives in DRAM or L1. Lowerings ask it for a tensor in the form they need
(:meth:`Emitter.to_plain`, :meth:`Emitter.to_nhwc`, :meth:`Emitter.tiled`), and it emits the
conversion once per tensor. Constants an op reads (a per-channel scale, a broadcast operand) go
on the device once, as :class:`~spc.plan.program.DeviceConstant`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from msgspec import Struct, field

from spc.errors import SpcError
from spc.ir.graph import Value
from spc.kernels import KERNELS
from spc.memory.call_specs import result_in_dram
from spc.plan.program import DeviceConstant, TtOp
from spc.ttnn.calls import CALLS
from spc.ttnn.configs import PageLayout
from spc.ttnn.formats import DataFormat
from spc.ttnn.layout import DeviceLayout, Form, Layout, PlainLayout
from spc.ttnn.memory import DRAM_INTERLEAVED

INPUT_DTYPE = DataFormat.BFLOAT16

class Emitter(Struct):
    """The ttnn calls of a program as they are emitted, and what is known of each tensor."""

    ops: list[TtOp] = field(default_factory=list)
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    layouts: dict[str, Layout] = field(default_factory=dict)
    dtypes: dict[str, DataFormat] = field(default_factory=dict)
    in_dram: dict[str, bool] = field(default_factory=dict)  # where each result lives (device inputs: DRAM)
    tiles: dict[str, bool] = field(default_factory=dict)  # in tiles (else row major); device inputs: row major
    constants: list[DeviceConstant] = field(default_factory=list)
    kernels: bool = False  # fused kernels (kernels/) instead of the stock calls they replace
    _converted: dict[tuple[str, str], str] = field(default_factory=dict)

    def emit(self, op: str, inputs: list[str], output: str, out_layout: Layout, source: str,
             weights: dict[str, str] | None = None, store: DataFormat | None = None,
             out_shape: list[int] | None = None, extra_outputs: list[str] | None = None,
             extra_dtypes: list[DataFormat] | None = None, **args: Any) -> str:
        """Append a call; its result is stored as ``store``, by default as its first input is.
        A name is made once (plan/verify.py refuses a program that makes one twice): a lowering
        whose names may meet another's asks :meth:`unused` for them."""
        for name in (output, *(extra_outputs or [])):
            if name in self.layouts:
                raise SpcError(f"spc bug: the lowering of {source} makes tensor {name} a second time; report it "
                               "with the dump from --dump-dir")
        store = store or (self.dtypes.get(inputs[0], INPUT_DTYPE) if inputs else INPUT_DTYPE)
        shape = out_shape or args.get("shape") or out_layout.device_shape  # a 5-D reshape keeps its own shape
        extra_dtypes = list(extra_dtypes or [store] * len(extra_outputs or []))
        self.ops.append(TtOp(op, inputs, output, args, weights or {}, source, store, shape=list(shape),
                             extra_outputs=list(extra_outputs or []), extra_dtypes=extra_dtypes))
        for extra, dtype in zip(extra_outputs or [], extra_dtypes):
            self.layouts[extra], self.dtypes[extra], self.in_dram[extra] = out_layout, dtype, True
            self.tiles[extra] = True
        self.layouts[output] = out_layout
        self.dtypes[output] = store
        if op == "ttnn.to_layout":
            self.tiles[output] = args["layout"] is PageLayout.TILE
        else:
            tiled = CALLS[op].tiled  # the call's result layout, or its input's (ttnn/calls)
            self.tiles[output] = tiled if tiled is not None else self.tiles.get(inputs[0], False) if inputs else False
        # where the call leaves its result: as the memory planner reads it (memory/call_specs.py)
        self.in_dram[output] = result_in_dram(self.ops[-1], self.in_dram.get(inputs[0], True) if inputs else True)
        return output

    def unused(self, name: str) -> str:
        """``name``, or ``name`` with underscores appended until no tensor has it."""
        while name in self.layouts:
            name += "_"
        return name

    def kernel(self, name: str, inputs: list[str], outputs: list[str], out_layout: Layout, source: str,
               store: DataFormat | None = None, **params: Any) -> str:
        """A fused kernel call; it records the stock calls it replaces for runtimes without tt-lang."""
        composed = KERNELS[name].composed(inputs, outputs, params)
        return self.emit("spc.kernel", inputs, outputs[0], out_layout, source, store=store, kernel=name,
                         params=params, composed=composed, extra_outputs=outputs[1:])

    def into_dram(self, name: str, source: str) -> str:
        """The DRAM path of conv2d and max_pool2d reads its input from DRAM (conv2d.cpp:
        "Conv DRAM expects the input tensor to be in DRAM")."""
        if self.in_dram.get(name, True):
            return name
        return self.emit("ttnn.to_memory_config", [name], name + "/dram", self.layouts[name], source,
                         memory_config=DRAM_INTERLEAVED)

    def weight(self, v: Value) -> str:
        """A conv weight or bias for the plan, in float32 whatever the model keeps it in (a float16
        or float64 export): the precision preset decides the device's format (ttnn/precision.py),
        as for a float32 model; float16 to float32 is exact."""
        data = np.asarray(v.data)
        self.weights[v.name] = data.astype(np.float32) if data.dtype.kind == "f" else data
        return v.name

    # -- forms and layouts -----------------------------------------------------------------------
    def form(self, name: str) -> Form:
        return self.layouts[name].form

    def _once(self, name: str, kind: str, make: Any) -> str:
        key = (name, kind)
        if key not in self._converted:
            self._converted[key] = make()
        return self._converted[key]

    def interleaved(self, name: str, source: str) -> str:
        """The tensor in DRAM, interleaved: data-movement calls (permute, concat, pad) take a
        height-sharded conv output only in the shard spec they were built for."""
        return self._once(name, "dram", lambda: self.into_dram(name, source))

    def tiled(self, name: str, source: str) -> str:
        """The tensor in tiles: what ttnn's compute calls (softmax, where, matmul, reductions) read."""
        if self.tiles.get(name, False):
            return name
        return self._once(name, "tile", lambda: self.emit("ttnn.to_layout", [name], name + "/tiled",
                                                          self.layouts[name], source, layout=PageLayout.TILE))

    def stored_as(self, name: str, dtype: DataFormat, source: str) -> str:
        """The tensor stored as ``dtype``: calls that join tensors (concat) take one format
        (mock p150: "All Tensors should have same dtypes"), and a float32 input meets bf16 results."""
        if self.dtypes.get(name, INPUT_DTYPE) is dtype:
            return name
        return self._once(name, f"dtype:{dtype.name}", lambda: self.emit(
            "ttnn.typecast", [name], self.unused(f"{name}/{dtype.name.lower()}"), self.layouts[name], source,
            store=dtype, dtype=dtype))

    def row_major(self, name: str, source: str) -> str:
        if not self.tiles.get(name, False):
            return name
        return self._once(name, "rm", lambda: self.emit("ttnn.to_layout", [name], name + "/row_major",
                                                        self.layouts[name], source, layout=PageLayout.ROW_MAJOR))

    def to_plain(self, name: str, v: Value, source: str) -> str:
        """``name`` (the device tensor of IR value ``v``) in the plain form: [1,1,NHW,C] ->
        [N,H,W,C] -> permute -> [N,C,H,W] (a 3-D or 2-D map only reshapes)."""
        lay = self.layouts[name]
        if lay.form is Form.PLAIN:
            return name
        shape = [int(d) for d in v.type.static_shape]

        def convert() -> str:
            assert isinstance(lay, DeviceLayout)
            t = self.tiled(self.interleaved(name, source), source)
            if len(shape) != 4 or lay.c == 1:
                return self.emit("ttnn.reshape", [t], name + "/plain", PlainLayout(tuple(shape)), source,
                                 shape=PlainLayout(tuple(shape)).device_shape)
            nhwc = [lay.n, lay.h, lay.w, lay.c]
            t = self.emit("ttnn.reshape", [t], name + "/nhwc", PlainLayout(tuple(nhwc)), source, shape=nhwc)
            return self.emit("ttnn.permute", [t], name + "/plain", PlainLayout(tuple(shape)), source, dims=[0, 3, 1, 2])

        return self._once(name, Form.PLAIN, convert)

    def to_nhwc(self, name: str, v: Value, source: str) -> str:
        """``name`` in the conv form [1, 1, N*H*W, C]."""
        lay = self.layouts[name]
        if lay.form is Form.NHWC:
            return name
        shape = [int(d) for d in v.type.static_shape]
        out = DeviceLayout.of(shape)

        def convert() -> str:
            t = self.tiled(self.interleaved(name, source), source)
            if len(shape) == 4 and out.c != 1:
                t = self.emit("ttnn.permute", [t], name + "/nhwc4", PlainLayout((out.n, out.h, out.w, out.c)), source,
                              dims=[0, 2, 3, 1])
            return self.emit("ttnn.reshape", [t], name + "/nhwc", out, source, shape=out.device_shape)

        return self._once(name, Form.NHWC, convert)

    def constant(self, v: Value, data: np.ndarray, device_shape: list[int], source: str,
                 dtype: DataFormat = INPUT_DTYPE) -> str:
        """A constant operand on the device: ``data`` (from IR constant ``v``) as ``device_shape``."""
        key = f"{v.name}@{'x'.join(str(d) for d in device_shape)}"
        for c in self.constants:
            if c.name == key:
                return key
        self.weights[key] = np.ascontiguousarray(np.asarray(data, np.float32).reshape(device_shape))
        self.constants.append(DeviceConstant(key, key, list(device_shape), dtype))
        lay = PlainLayout(tuple(device_shape))
        self.layouts[key], self.dtypes[key], self.in_dram[key], self.tiles[key] = lay, dtype, True, True
        return key
