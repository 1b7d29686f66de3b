"""The lowered program for a viewer (Netron): ``--dump-dir``'s ``NN-device-program.onnx``, and what
it says of each IR node for the IR's own dumps after the memory planner.

The device program as an ONNX graph: one node per ttnn call, in order, in the :data:`TTNN_DOMAIN`
domain (``ttnn.conv2d`` is op type ``conv2d``), reading and writing the device tensors by name;
the call's arguments are string attributes holding their JSON spelling, as ``program.json`` has
them (``slice_config = {"type":"l1_full"}``, ``memory_config = "DRAM_INTERLEAVED"``), its weights
further inputs (initializers). Each result's device shape is in ``value_info``, with the ONNX
element type of its storage format; block-float formats (bfloat8_b, bfloat4_b) have none, and
their values are bfloat16 values, so they are declared so, the exact format in the node's
metadata (``dtype``) beside its IR node (``source``) and block.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from spc.ir.to_onnx import set_metadata
from spc.plan.program import Program, TtOp, encode
from spc.ttnn.formats import DataFormat
from spc.ttnn.memory import BlockMemory
from spc.version import __version__

TTNN_DOMAIN = "ttnn"
TTNN_DOMAIN_VERSION = 1
MIN_IR_VERSION = 10  # metadata_props on nodes


def elem_type(fmt: DataFormat) -> int:
    """The ONNX element type a device format is declared as (block floats: bfloat16)."""
    return {DataFormat.FLOAT32: TensorProto.FLOAT, DataFormat.UINT32: TensorProto.UINT32,
            DataFormat.UINT16: TensorProto.UINT16}.get(fmt, TensorProto.BFLOAT16)


def block_memory(op: TtOp) -> str | None:
    """A conv's or pool's memory configuration as ``--memory-config`` spells it (``l1``,
    ``l1:abh=4``, ``dram:height=2``); None for a call without one."""
    slicing = op.args.get("slice_config")
    if slicing is None:
        return None
    conv = op.args.get("conv_config")
    return BlockMemory(slicing, conv.act_block_tiles if conv is not None else 0).spell()


def ir_notes(program: Program) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """What the planned program says of the IR: per IR node (a call's ``source``) its ttnn call
    count, its blocks' memory configurations and where its calls were told to write; per device
    tensor (an IR value keeps its name on the device) the format it is stored in."""
    calls: dict[str, list[TtOp]] = {}
    for op in program.device_ops:
        calls.setdefault(op.source, []).append(op)
    notes: dict[str, dict[str, str]] = {}
    for source, ops in calls.items():
        n = {"ttnn_calls": str(len(ops))}
        memory = list(dict.fromkeys(m for m in map(block_memory, ops) if m is not None))
        if memory:
            n["memory"] = ", ".join(memory)
        written = list(dict.fromkeys(op.args["memory_config"].key for op in ops
                                     if op.args.get("memory_config") is not None))
        if written:
            n["memory_config"] = ", ".join(written)
        notes[source] = n
    stored = {name: fmt.value for op in program.device_ops
              for name, fmt in zip(op.results, [op.dtype, *op.extra_dtypes])}
    return notes, stored


def _info(name: str, shape: list[int], fmt: DataFormat, meta: Mapping[str, str]) -> onnx.ValueInfoProto:
    vi = helper.make_tensor_value_info(name, elem_type(fmt), [int(d) for d in shape])
    set_metadata(vi, meta)
    return vi


def program_to_onnx(program: Program, tensors: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """``program``'s device calls as an ONNX graph; ``tensors``: the plan's tensors (the weights and
    constants the calls read, written as initializers)."""
    def tensor(name: str, what: str) -> np.ndarray:
        if name not in tensors:
            raise ValueError(f"the device program reads {what} {name}, which is not among the plan's tensors")
        return np.asarray(tensors[name])

    inits: dict[str, onnx.TensorProto] = {}
    for c in program.constants:
        inits[c.name] = numpy_helper.from_array(tensor(c.weight, "constant").reshape(c.device_shape), c.name)
    nodes, infos = [], []
    # the runtime uploads the device inputs in bfloat16 (runtime/emu.py, ttnn_backend.py)
    produced: dict[str, tuple[list[int], DataFormat]] = {t.name: (list(t.device_shape), DataFormat.BFLOAT16)
                                                         for t in program.device_inputs}
    for op in program.device_ops:
        for name in op.weights.values():
            if name not in inits:
                inits[name] = numpy_helper.from_array(tensor(name, "weight"), name)
        node = helper.make_node(op.op.removeprefix("ttnn."), [*op.inputs, *op.weights.values()], op.results,
                                name=op.output, domain=TTNN_DOMAIN)
        args = {**encode(op.args), **op.weights}  # a weight's keyword names the input it is
        for k, v in sorted(args.items()):
            node.attribute.append(helper.make_attribute(k, json.dumps(v, separators=(",", ":"), sort_keys=True)))
        meta = {"source": op.source, "block": op.block, "dtype": op.dtype.value,
                "shape": json.dumps(op.shape, separators=(",", ":"))}
        if op.extra_outputs:
            meta["extra_dtypes"] = ", ".join(d.value for d in op.extra_dtypes)
        set_metadata(node, meta)
        nodes.append(node)
        for name, fmt in zip(op.results, [op.dtype, *op.extra_dtypes]):
            produced[name] = (list(op.shape), fmt)
    outputs = list(dict.fromkeys(t.name for t in [*program.device_outputs, *program.fallback_outputs]))
    inputs = {t.name for t in program.device_inputs}
    for name, (shape, fmt) in produced.items():
        if name not in outputs and name not in inputs:
            infos.append(_info(name, shape, fmt, {"dtype": fmt.value}))
    missing = [name for name in outputs if name not in produced]
    if missing:
        raise ValueError(f"the device program's outputs {', '.join(missing)} are written by no call and are "
                         "no device input")
    ins = [_info(t.name, *produced[t.name], {"form": t.form.value, "ir_shape": json.dumps(t.shape)})
           for t in program.device_inputs]
    outs = [_info(name, *produced[name], {"dtype": produced[name][1].value}) for name in outputs]
    graph = helper.make_graph(nodes, "device_program", ins, outs, list(inits.values()), value_info=infos,
                              doc_string="the ttnn calls of the device stage, in order (spc: plan/program.py)")
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(TTNN_DOMAIN, TTNN_DOMAIN_VERSION)],
                             ir_version=MIN_IR_VERSION, producer_name="spc", producer_version=__version__)
