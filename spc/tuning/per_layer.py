"""`spc check --per-layer`: where, in program order, a plan departs from onnxruntime.

The plan runs on the emulator keeping every device tensor; onnxruntime runs the source ONNX with
the matching values as extra outputs. Which device tensor is which ONNX value comes from the
plan's own record (``Program.values``: the device tensor holding each IR value, its IR shape and
layout; IR values keep the ONNX names the importer read, and fused ops the name of the value
they replace), never from what the names look like: exporters name values ``relu_3``,
``/conv1a/Conv_output_0`` or ``46``. A device tensor outside the record (a fused op's insides, a
layout or memory copy) has no ONNX counterpart and is counted, not compared; a recorded value
onnxruntime has no value of, or of another shape, is listed as skipped with the reason.

Per tensor: PCC, largest absolute difference and relative error (||ours - ref|| / ||ref||, L2),
with the block that makes it and the block's precision as the IR spells it. Per block: the
relative error of what it reads (the nearest compared tensors upstream), of what it makes, the
growth between them, and its own error: what it makes when it runs alone on onnxruntime's values
of what it reads. The block that adds the most error is the one with the largest own error, not
the largest growth: growth also counts the inputs' error as the block amplifies it (a softmax
doubles the relative error of its logits; an NMS turns small score differences into moved
peaks), so with one conv planted at LoFi + bfloat8_b weights the NMS grows the error most
(docs/accuracy.md), while the conv's own error is nearly five times any other block's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
import onnxruntime as ort
from msgspec import Struct, field

from spc.errors import SpcError
from spc.frontend.onnx_import import load_onnx
from spc.ir.parser import ParseError, parse_graph
from spc.ir.printer import MATRIX_OPS
from spc.ir.types import DType
from spc.plan.io import Plan
from spc.plan.program import DeviceTensor, Program, TtOp
from spc.records import asdict
from spc.runtime.host import run_host
from spc.runtime.runner import feeds_of
from spc.tuning.comparison import find_source

if TYPE_CHECKING:
    from spc.runtime.emu import EmuProgram

DEFAULT_MIN_PCC = 0.99  # where the table marks a tensor when --min-pcc is not given (issue 15's bar)
INPUT_BLOCK = "(device input)"  # a value the host hands to the device: no block made it


class TensorError(Struct):
    """One compared tensor: the IR value (named as in the ONNX), what made it, how far it is."""

    name: str
    op: str  # the IR op that makes it ("spc.Conv2d", "spc.ScoreFold", ...; the host op for an input)
    block: str
    precision: str  # the block's, as the IR spells it ("w:bfloat16 HiFi4 fp32acc l1acc out:bfloat16")
    call: int  # the device call that makes it, in program order (-1: a device input)
    shape: list[int]
    pcc: float
    max_abs: float
    rel_err: float


class Skipped(Struct):
    name: str
    reason: str


class BlockError(Struct):
    """A block's error: relative error of its inputs (the worst of the nearest compared tensors
    upstream; 0 when none is compared) and of its outputs (the worst it makes); growth is their
    difference; local_error is its outputs' error when it runs alone on onnxruntime's values of
    its inputs (_local_errors)."""

    block: str
    precision: str
    input_error: float
    output_error: float
    growth: float
    local_error: float  # the block alone on the reference's inputs: the error it adds itself


class PerLayerReport(Struct):
    input: str
    min_pcc: float
    tensors: list[TensorError] = field(default_factory=list)  # in program order
    skipped: list[Skipped] = field(default_factory=list)  # recorded values not compared, and why
    internal: int = 0  # device tensors with no IR value (fused ops' insides, copies): no counterpart
    blocks: list[BlockError] = field(default_factory=list)  # blocks with a compared output, in program order
    first_under: str | None = None  # the first tensor with PCC under min_pcc
    worst_block: str | None = None  # the block that adds the most error (largest local_error)

    def as_dict(self) -> dict[str, Any]:
        # strict JSON: a metric that is not a number (a non-finite reference) is null
        return _finite(asdict(self))

    def under(self) -> list[TensorError]:
        return [t for t in self.tensors if t.pcc < self.min_pcc]


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def errors(ours: np.ndarray, ref: np.ndarray) -> tuple[float, float, float]:
    """(PCC, largest absolute difference, relative L2 error) of two arrays of one shape. PCC as
    metrics.pcc defines it, computed in place: a 64-channel map at 720x1280 is 0.5 GB in float64,
    and the copies metrics.pcc makes would be most of a per-layer run's memory."""
    a, b = ours.astype(np.float64).ravel(), ref.astype(np.float64).ravel()
    if a.size == 0:
        return 1.0, 0.0, 0.0
    d = a - b
    num, den = math.sqrt(float(np.dot(d, d))), math.sqrt(float(np.dot(b, b)))
    top, bottom = float(d.max()), float(d.min())  # NaN if any value is (numpy's max propagates it)
    max_abs = math.nan if math.isnan(top) or math.isnan(bottom) else max(top, -bottom)
    del d
    rel = num / den if den > 0 else (0.0 if num == 0 else math.inf)
    same = num == 0
    a -= a.mean()
    b -= b.mean()
    spread = math.sqrt(float(np.dot(a, a)) * float(np.dot(b, b)))
    c = (1.0 if same else 0.0) if spread == 0 else float(np.dot(a, b)) / spread
    return c, max_abs, rel


def _host_value(t: DeviceTensor, y: np.ndarray) -> np.ndarray:
    """A device tensor as the IR value it holds, in the IR (= ONNX) layout."""
    x = t.layout.from_device(y, t.shape)
    return x != 0 if DType(t.dtype) is DType.BOOL else x


def _same_shape(ours: tuple[int, ...], ref: tuple[int, ...]) -> bool:
    """The same values in the same order: equal shapes, or equal but for sizes of 1."""
    return ours == ref or [d for d in ours if d != 1] == [d for d in ref if d != 1]


class _Reference:
    """onnxruntime on the source ONNX, asked for ``names`` as extra outputs where the model has
    values of those names; what it has none of is in ``missing``."""

    def __init__(self, path: Path, names: list[str]) -> None:
        model = load_onnx(path)
        inits = {i.name for i in model.graph.initializer}
        self.inputs = [i.name for i in model.graph.input if i.name not in inits]
        made = {o for n in model.graph.node for o in n.output}
        outputs = {o.name for o in model.graph.output}
        self.missing = {n for n in names if n not in made and n not in outputs and n not in self.inputs}
        for name in names:
            if name in made and name not in outputs:
                # no type given: onnxruntime takes the value's own (masks stay bool, indices int64)
                model.graph.output.append(onnx.ValueInfoProto(name=name))
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own types, not one base class
            raise SpcError(f"{path}: onnxruntime cannot run the model with its inner values as outputs: "
                           f"{str(exc).splitlines()[0][:200]}") from None
        self.names = [o.name for o in self.session.get_outputs()]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``feeds``: the plan's inputs by name, which are the source's (the plan was made from it)."""
        if sorted(self.inputs) != sorted(feeds):
            raise SpcError(f"the source ONNX takes {', '.join(self.inputs)}; the plan {', '.join(feeds)}: "
                           "give the ONNX the plan was compiled from (--onnx)")
        try:
            got = dict(zip(self.names, self.session.run(None, feeds)))
        except Exception as exc:  # onnxruntime's own types: a shape or type the model does not take
            shapes = ", ".join(f"{k} {v.dtype}{list(v.shape)}" for k, v in feeds.items())
            raise SpcError(f"onnxruntime refuses the input(s) {shapes}: {str(exc).splitlines()[0][:200]}") from None
        got.update(feeds)
        return got


def _ir_nodes(plan: Plan) -> dict[str, tuple[str, str, str]]:
    """IR value name -> (op, block, precision as the IR spells it), from the plan's final IR."""
    class Unread(dict):
        # the IR names the weights it had when the plan was written; folded ones (BatchNorm into a
        # conv) are not in the plan, and only the nodes' ops and blocks are read here
        def __contains__(self, key: object) -> bool:
            return True

    try:
        g = parse_graph(plan.ir_text, Unread(plan.weights))
    except (ParseError, SpcError, KeyError, ValueError) as exc:
        raise SpcError(f"the plan's IR (ir.txt) does not parse ({str(exc)[:160]}); recompile it") from None
    out = {}
    for n in g.nodes:
        spelled = "" if n.precision is None else n.precision.spell(compute=n.op.name in MATRIX_OPS)
        for o in n.outputs:
            out[o.name] = (n.op.name, n.block or n.name, spelled)
    return out


def per_layer(plan: Plan, plan_path: Path, x: np.ndarray | Mapping[str, np.ndarray], onnx: Path | None,
              name: str = "input", min_pcc: float | None = None) -> PerLayerReport:
    """Compare every device tensor of ``plan`` that holds an ONNX value with onnxruntime's value,
    on the model input ``x`` (the plan's input shape; a plan of several inputs takes them by
    name); ``onnx``: the source, else found next to the plan (tuning/comparison.py find_source)."""
    from spc.runtime.emu import EmuProgram  # torch (~0.9 s): spc check on ttnn imports this module, runs no emulator

    p = plan.program
    if not p.values:
        raise SpcError("the plan has no record of which device tensor holds which model value "
                       "(compiled by an older spc); recompile it")
    feeds = feeds_of(p, x)
    src = find_source(plan, plan_path, onnx)
    report = PerLayerReport(name, DEFAULT_MIN_PCC if min_pcc is None else min_pcc)

    # the device side: one run of the emulator, reading every recorded tensor and every other one
    # a block reads from outside itself (what the blocks' own runs below start from)
    env: dict[str, np.ndarray] = dict(feeds)
    run_host(p.host_pre, env, plan.weights)
    device_in = {t.name: t.layout.to_device(env[t.name]) for t in p.device_inputs}
    made_by = {r: i for i, op in enumerate(p.device_ops) for r in op.results}
    recorded = {t.name for t in p.values.values()}
    emu = EmuProgram(p, plan.weights)
    try:
        got = emu.run(device_in, sorted(recorded | _read_across(p) - set(emu.constants)))
        ref_side = _Reference(src, list(p.values))
        ref = ref_side.run(feeds)

        nodes = _ir_nodes(plan)
        report.internal = sum(1 for r in made_by if r not in recorded)
        order = sorted(p.values.items(), key=lambda kv: (made_by.get(kv[1].name, -1), kv[0]))
        exact: dict[str, np.ndarray] = {}  # device tensor -> the reference's value, in the device layout
        for value, t in order:
            call = made_by.get(t.name, -1)
            op, block, precision = nodes.get(value, ("", "", ""))
            if call < 0:  # the model's input or what the host stage made: float32, stored as the device reads it
                op, block, precision = op or "(input)", INPUT_BLOCK, f"out:{p.input_format(t.name).value}"
            else:  # as the blocks below are keyed
                block = _block(p.device_ops[call])
            if value in ref_side.missing:
                report.skipped.append(Skipped(value, "the ONNX has no value of this name (the compiler made it)"))
                continue
            b = np.asarray(ref.pop(value))  # taken: what is kept is its device-layout copy (exact)
            if b.dtype.kind not in "biuf":
                report.skipped.append(Skipped(value, f"onnxruntime gives {b.dtype}, not numbers"))
                continue
            a = _host_value(t, got[t.name])
            if not _same_shape(tuple(a.shape), tuple(b.shape)):
                report.skipped.append(Skipped(value, f"shape {list(a.shape)} here, {list(b.shape)} in the ONNX"))
                continue
            b = b.reshape(a.shape)
            report.tensors.append(TensorError(value, op, block, precision, call, list(a.shape), *errors(a, b)))
            exact[t.name] = t.layout.to_device(b.astype(np.float32))
        for name in exact:  # the local runs read the reference's values of these, not ours
            got.pop(name, None)
        under = report.under()
        report.first_under = under[0].name if under else None
        report.blocks = _blocks(p, report.tensors, _local_errors(emu, p, got, exact))
    finally:
        emu.close()
    measured = [b for b in report.blocks if not math.isnan(b.local_error)]
    if measured:
        worst = max(measured, key=lambda b: b.local_error)
        report.worst_block = worst.block if worst.local_error > 0 else None
    return report


def _block(op: TtOp) -> str:
    return op.block or op.source


def _read_across(p: Program) -> set[str]:
    """Device tensors a call reads from another block (or the device inputs)."""
    made_in = {r: _block(op) for op in p.device_ops for r in op.results}
    return {i for op in p.device_ops for i in op.inputs if made_in.get(i) != _block(op)}


def _local_errors(emu: EmuProgram, p: Program, got: dict[str, np.ndarray],
                  exact: dict[str, np.ndarray]) -> dict[str, float]:
    """Each compared tensor's relative error when its block runs alone on the reference's values
    of what it reads (where onnxruntime has them; else the emulator's): the error the block adds
    by itself. Its output error also holds its inputs' error, amplified: a softmax doubles the
    relative error of its logits, a max-pool NMS turns small differences into flips; so the block
    that adds the most error is found by this, not by the growth. A block whose calls refuse
    those inputs (a value only the device's own arithmetic makes valid) gets NaN."""
    import torch  # as in per_layer: not for spc check on a ttnn backend

    made_in = {r: _block(op) for op in p.device_ops for r in op.results}
    last = {_block(c.op): i for i, c in enumerate(emu.calls)}
    local: dict[str, dict[str, torch.Tensor]] = {}  # block -> its own tensors, as it made them alone
    failed: set[str] = set()
    out = {}
    for i, call in enumerate(emu.calls):
        op = call.op
        block = _block(op)
        own = local.setdefault(block, {})
        if block in failed:
            continue
        ins = []
        for name in op.inputs:
            if made_in.get(name) == block and name in own:
                ins.append(own[name])
            elif name in emu.constants:
                ins.append(emu.constants[name])
            else:
                ins.append(torch.from_numpy(np.ascontiguousarray(exact[name] if name in exact else got[name])))
        try:
            op.bind(own, call.fn(ins))
        except (RuntimeError, ValueError, IndexError, TypeError, KeyError, OverflowError):
            failed.add(block)
            out.update({name: math.nan for name in exact if made_in.get(name) == block})
            local.pop(block, None)
            continue
        if last[block] == i:  # the block is done: its errors, then its tensors go (a frame's worth at most)
            for name, t in local.pop(block).items():
                if name in exact:
                    out[name] = errors(t.numpy().reshape(exact[name].shape), exact[name])[2]
    return out


def _blocks(p: Program, tensors: list[TensorError], local: dict[str, float]) -> list[BlockError]:
    """Each block's input, output and own error. A tensor that is not compared carries the worst
    error of the compared tensors it derives from (calls are in program order: one pass)."""
    held = {t.name: p.values[t.name].name for t in tensors}  # value -> the device tensor holding it
    err_of: dict[str, float] = {}
    for t in tensors:
        if not math.isnan(t.rel_err):
            err_of[held[t.name]] = max(err_of.get(held[t.name], 0.0), t.rel_err)
    upstream: dict[str, float] = {t.name: err_of.get(t.name, 0.0) for t in p.device_inputs}
    block_in: dict[str, float] = {}
    made_in: dict[str, str] = {}
    for op in p.device_ops:
        ins = [upstream.get(i, 0.0) for i in op.inputs]
        outside = [upstream.get(i, 0.0) for i in op.inputs if made_in.get(i) != _block(op)]
        if outside:
            block_in[_block(op)] = max(block_in.get(_block(op), 0.0), *outside)
        for r in op.results:
            made_in[r] = _block(op)
            upstream[r] = err_of[r] if r in err_of else max(ins, default=0.0)
    out: dict[str, BlockError] = {}
    for t in tensors:
        if t.call < 0:
            continue
        e = out.get(t.block)
        if e is None:
            e = out[t.block] = BlockError(t.block, t.precision, block_in.get(t.block, 0.0), 0.0, 0.0, 0.0)
        if not math.isnan(t.rel_err):
            e.output_error = max(e.output_error, t.rel_err)
        own = local.get(p.values[t.name].name, 0.0)
        e.local_error = own if math.isnan(own) or math.isnan(e.local_error) else max(e.local_error, own)
        e.growth = e.output_error - e.input_error
    return list(out.values())
