"""The ``ttnn`` backends: the plan's device program executed by the real ttnn library.

* ``ttnn``: a Tenstorrent device (not validated here: no hardware; no trace capture yet);
* ``ttnn-mock``: a mock Blackhole p150 (runtime/ttnn_mock/harness.py): ttnn's host code validates
  every call, allocates L1 and sizes circular buffers; nothing executes, values come back zero.

Imports only numpy and ttnn (ttnn 0.81.1 exists for Python 3.10/3.12 only; see `make mock-env`).
Each program call maps to one ttnn call spelled as the API spells it; conv weights go up as
float32 host tensors and come back prepared from the first run (return_weights_and_bias), so
later runs reuse them, as the hand-written port does. The device is closed on every exit path.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from spc.errors import SpcError
from spc.lowering.program import Program, TtOp

# Arguments sized for this network at up to 720x1280 on a p150 (measured on the mock device:
# l1_small 8 KiB fails in the encoder, 16 KiB passes).
L1_SMALL_SIZE = 32768


def ttnn_message(exc: BaseException) -> str:
    """ttnn's own error, on one line: TT_FATAL text up to its backtrace."""
    lines = []
    for line in str(exc).splitlines():
        if line.strip().startswith(("backtrace:", "--- ")):
            break
        if line.strip():
            lines.append(line.strip())
    return " | ".join(lines[:3]) or type(exc).__name__


class TtnnProgram:
    def __init__(self, program: Program, weights: dict[str, np.ndarray], mock: bool) -> None:
        if mock:
            from spc.runtime.ttnn_mock.harness import HarnessError, prepare

            try:
                os.environ.update(prepare())
            except HarnessError as exc:
                raise SpcError(f"mock p150: {exc}") from None
        try:
            import ttnn
        except ImportError:
            raise SpcError("ttnn is not installed for this Python; run `make mock-env` (Python 3.12)") from None
        self.ttnn = ttnn
        self.program = program
        self.weights = weights
        self.prepared: dict[str, tuple[Any, Any]] = {}
        self.device = ttnn.open_device(device_id=0, l1_small_size=L1_SMALL_SIZE, trace_region_size=0)
        try:
            self.calls = [(op, self._bind(op)) for op in program.device_ops]
        except Exception:
            self.close()
            raise

    # -- the mapping from program calls to ttnn ------------------------------------------------
    def _enum(self, name: str) -> Any:
        t = self.ttnn
        table = {"bfloat16": t.bfloat16, "float32": t.float32, "bfloat8_b": t.bfloat8_b, "bfloat4_b": t.bfloat4_b,
                 "TILE": t.TILE_LAYOUT, "ROW_MAJOR_LAYOUT": t.ROW_MAJOR_LAYOUT, "TILE_LAYOUT": t.TILE_LAYOUT,
                 "HEIGHT_SHARDED": t.TensorMemoryLayout.HEIGHT_SHARDED,
                 "WIDTH_SHARDED": t.TensorMemoryLayout.WIDTH_SHARDED,
                 "BLOCK_SHARDED": t.TensorMemoryLayout.BLOCK_SHARDED,
                 "DRAM_INTERLEAVED": t.DRAM_MEMORY_CONFIG, "L1_INTERLEAVED": t.L1_MEMORY_CONFIG}
        try:
            return table[name]
        except KeyError:
            raise SpcError(f"the ttnn backend does not know {name!r}") from None

    def _memory(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"memory_config": self._enum(a["memory_config"])} if a.get("memory_config") else {}

    def _conv(self, op: TtOp) -> Callable[[list[Any]], Any]:
        t, a = self.ttnn, op.args
        cc, conv = a["compute_config"], dict(a["conv_config"])
        activation = conv.pop("activation", None)
        conv_config = t.Conv2dConfig(
            weights_dtype=self._enum(conv["weights_dtype"]), shard_layout=self._enum(conv["shard_layout"]),
            output_layout=self._enum(conv["output_layout"]), deallocate_activation=conv["deallocate_activation"],
            **({"activation": t.UnaryWithParam(t.UnaryOpType.RELU)} if activation == "relu" else {}))
        compute_config = t.init_device_compute_kernel_config(
            self.device.arch(), math_fidelity=getattr(t.MathFidelity, cc["math_fidelity"]),
            fp32_dest_acc_en=cc["fp32_dest_acc_en"], packer_l1_acc=cc["packer_l1_acc"])
        w = self.weights[op.weights["weight_tensor"]].astype(np.float32)
        host_w = t.Tensor(w, data_type=t.float32, layout=t.ROW_MAJOR_LAYOUT)
        host_b = None
        if "bias_tensor" in op.weights:
            b = self.weights[op.weights["bias_tensor"]].astype(np.float32).reshape(1, 1, 1, -1)
            host_b = t.Tensor(b, data_type=t.float32, layout=t.ROW_MAJOR_LAYOUT)

        def call(ins: list[Any]) -> Any:
            weight, bias = self.prepared.get(op.output, (host_w, host_b))
            out, (weight, bias) = t.conv2d(
                input_tensor=ins[0], weight_tensor=weight, bias_tensor=bias, device=self.device,
                in_channels=a["in_channels"], out_channels=a["out_channels"], batch_size=a["batch_size"],
                input_height=a["input_height"], input_width=a["input_width"], kernel_size=a["kernel_size"],
                stride=a["stride"], padding=a["padding"], dilation=a["dilation"], groups=a["groups"],
                dtype=self._enum(a["dtype"]), conv_config=conv_config, compute_config=compute_config,
                return_weights_and_bias=True)
            self.prepared[op.output] = (weight, bias)
            return out

        return call

    def _bind(self, op: TtOp) -> Callable[[list[Any]], Any]:
        t, a = self.ttnn, op.args
        name = op.op.removeprefix("ttnn.")
        if name == "conv2d":
            return self._conv(op)
        if name == "max_pool2d":
            keys = ("batch_size", "input_h", "input_w", "channels", "kernel_size", "stride", "padding", "dilation",
                    "ceil_mode")
            kw = {k: a[k] for k in keys} | self._memory(a)
            return lambda ins: t.max_pool2d(ins[0], **kw)
        if name == "softmax":
            return lambda ins: t.softmax(ins[0], dim=a["dim"], numeric_stable=a["numeric_stable"])
        if name == "slice":
            return lambda ins: t.slice(ins[0], starts=a["starts"], ends=a["ends"], steps=a["steps"])
        if name == "to_layout":
            layout = self._enum(a["layout"])
            return lambda ins: t.to_layout(ins[0], layout)
        if name == "reshape":
            mem = self._memory(a)
            return lambda ins: t.reshape(ins[0], a["shape"], **mem)
        if name == "permute":
            return lambda ins: t.permute(ins[0], a["dims"])
        if name in ("eq", "logical_and", "logical_or", "multiply"):
            fn = getattr(t, name)
            return lambda ins: fn(ins[0], ins[1])
        if name in ("gtz", "logical_not", "rsqrt"):
            fn = getattr(t, name)
            return lambda ins: fn(ins[0])
        if name == "sum":
            return lambda ins: t.sum(ins[0], dim=a["dim"], keepdim=a["keepdim"])
        if name == "clamp":
            return lambda ins: t.clamp(ins[0], min=a.get("min"), max=a.get("max"))
        if name == "typecast":
            dtype = self._enum(a["dtype"])
            return lambda ins: t.typecast(ins[0], dtype)
        raise SpcError(f"the ttnn backend cannot run {op.op} (from {op.source})")

    # -- running ---------------------------------------------------------------------------------
    def _last_uses(self, keep: set[str]) -> list[list[str]]:
        """For each call, the tensors nobody reads after it (freed then, as a runtime must)."""
        last: dict[str, int] = {}
        for i, (op, _) in enumerate(self.calls):
            for name in op.inputs:
                last[name] = i
        frees: list[list[str]] = [[] for _ in self.calls]
        for name, i in last.items():
            if name not in keep:
                frees[i].append(name)
        return frees

    def run(self, inputs: dict[str, np.ndarray], read: list[str]) -> dict[str, np.ndarray]:
        t = self.ttnn
        env: dict[str, Any] = {}
        frees = self._last_uses(set(read))
        for spec in self.program.device_inputs:
            host = t.Tensor(np.ascontiguousarray(inputs[spec.name], dtype=np.float32).reshape(spec.device_shape),
                            data_type=t.bfloat16, layout=t.ROW_MAJOR_LAYOUT)
            env[spec.name] = t.to_device(host, self.device)
        for (op, call), dead in zip(self.calls, frees):
            try:
                env[op.output] = call([env[i] for i in op.inputs])
                for name in dead:
                    t.deallocate(env.pop(name))
            except SpcError:
                raise
            except Exception as exc:
                block = op.block or op.source
                raise SpcError(f"ttnn rejected {op.op} for block {block}: {ttnn_message(exc)}") from None
        return {name: self._read(env[name]) for name in read}

    def _read(self, tensor: Any) -> np.ndarray:
        t = self.ttnn
        host = t.from_device(t.to_layout(tensor, t.ROW_MAJOR_LAYOUT))
        # to_list, not to_numpy: with numpy 1.26 a bf16 to_numpy gives a 0-d object array
        return np.asarray(host.to_list(), dtype=np.float32).reshape([int(d) for d in host.shape])

    def close(self) -> None:
        device, self.device = getattr(self, "device", None), None
        if device is not None:
            self.ttnn.close_device(device)


class TtnnBackend:
    def __init__(self, mock: bool) -> None:
        self.mock = mock
        self.name = "ttnn-mock" if mock else "ttnn"

    def prepare(self, program: Program, weights: dict[str, np.ndarray]) -> TtnnProgram:
        return TtnnProgram(program, weights, self.mock)
