"""What a plan's parts must say about each other, checked after its schema (plan/schema.py) and
before anything runs it, as MLIR verifies an op against its operands:

* every tensor a call or host node reads is made before it (or is an input, a constant, a
  weight); no name is made twice; the outputs, probes, fallbacks and held values name tensors that exist;
* every weight a call or constant names exists, in float32 with finite values where the device
  reads it, in the shape its call declares (a conv's [out, in/groups, kh, kw]);
* each call's declared output shape follows from its inputs' shapes and its arguments (per call
  family: element-wise broadcast, conv and pool windows, reshape, pad, slice, concat ...), so
  no call can be made to allocate more than the bounded shapes the schema allowed;
* a fused kernel's composed calls are what the kernel itself composes from its parameters;
* every tensor crossing the host/device boundary holds as many values in its shape as in its
  device shape, in a form its shape can take;
* the host stages type-check under the IR's own rules (``OpDef.infer``) from the declared
  inputs (a stage reads what earlier stages made; sizes that only the run can tell, after a
  NonZero, are left to the runtime, which checks the outputs it hands on), and every program
  output comes out with its declared type;
* the output roles name outputs and spell what the keypoint op understands, at its rank.

Each failure is one SpcError naming the call or node and what is wrong.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from spc.errors import SpcError
from spc.ir import ops
from spc.ir.graph import Graph
from spc.ir.ops.keypoints import ROLES, OutputSpec
from spc.ir.types import DType, TensorType
from spc.kernels import KERNELS
from spc.plan.program import HostNode, Program, TensorSpec, TtOp, encode
from spc.plan.schema import MAX_ELEMENTS
from spc.ttnn.calls import CALLS, ShapeError
from spc.ttnn.calls.definition import axis as checked_axis
from spc.ttnn.formats import DataFormat

DEVICE_WEIGHT_DTYPES = (np.float32,)
_UNKNOWN = object()  # a host value whose type only the run can tell


def _numel(shape: list[int] | tuple[int, ...]) -> int:
    return math.prod(int(d) for d in shape)


def _expected(op: TtOp, ins: list[list[int]], weights: dict[str, np.ndarray]) -> int | None:
    """The number of values ``op`` makes from inputs of shapes ``ins`` (its definition's shape
    rule, ttnn/calls); None where the call keeps or shrinks its input (the runtime checks those
    against the declared shape)."""
    rule = CALLS[op.op].shape
    return None if rule is None else rule(ins, op.args, {key: (t, weights[t]) for key, t in op.weights.items()})


def _kernel(op: TtOp) -> None:
    kernel = KERNELS[op.args["kernel"]]
    if len(op.inputs) != kernel.arity:
        raise ShapeError(f"kernel {kernel.name} reads {kernel.arity} tensors, not {len(op.inputs)}")
    try:
        want = kernel.composed(list(op.inputs), op.results, dict(op.args.get("params", {})))
    except (ValueError, TypeError, KeyError, IndexError, ZeroDivisionError, OverflowError) as exc:
        raise ShapeError(f"kernel {kernel.name} refuses its parameters ({type(exc).__name__}: {exc})") from None
    if encode(want) != encode(op.args["composed"]):
        raise ShapeError(f"the calls it says it replaces are not what kernel {kernel.name} composes from its "
                         "parameters")


def _layouts(program: Program) -> None:
    """Every tensor crossing the host/device boundary holds as many values in its IR shape as in
    its device shape, in a form that shape can take (the runtime reshapes one into the other)."""
    for t in [*program.device_inputs, *program.device_outputs, *program.probes.values(), *program.fallback_outputs,
              *program.values.values()]:
        try:
            t.layout  # noqa: B018 (the form must fit the shape: the conv layout takes rank 2..4)
        except ValueError as exc:
            raise SpcError(f"device tensor {t.name}: {exc}") from None
        if _numel(t.shape) != _numel(t.device_shape):
            raise SpcError(f"device tensor {t.name}: its shape {list(t.shape)} and device shape "
                           f"{list(t.device_shape)} hold different numbers of values")
    uploaded = {t.name for t in program.device_inputs}
    for name, fmt in program.input_storage.items():
        if name not in uploaded:
            raise SpcError(f"input_storage names {name}, which is not a device input")
        if fmt not in (DataFormat.BFLOAT16, DataFormat.FLOAT32):
            raise SpcError(f"device input {name}: uploaded as {fmt.value}; an upload writes bfloat16 or float32")


def _device(program: Program, weights: dict[str, np.ndarray]) -> dict[str, list[int]]:
    _layouts(program)
    shapes: dict[str, list[int]] = {t.name: list(t.device_shape) for t in program.device_inputs}
    stored = {t.name: program.input_format(t.name) for t in program.device_inputs}
    stored.update((c.name, c.dtype) for c in program.constants)
    for c in program.constants:
        w = _weight(weights, c.weight, f"constant {c.name}")
        if w.size != _numel(c.device_shape):
            raise SpcError(f"constant {c.name}: weight {c.weight} holds {w.size} values for {c.device_shape}")
        if c.name in shapes:
            raise SpcError(f"constant {c.name}: the name is already taken")
        shapes[c.name] = list(c.device_shape)
    for i, op in enumerate(program.device_ops):
        where = f"call {i} ({op.op}, {op.block or op.source or op.output})"
        for name in op.inputs:
            if name not in shapes:
                raise SpcError(f"{where} reads {name}, which nothing before it makes")
        for name in op.results:
            if name in shapes:
                raise SpcError(f"{where} makes {name}, which already exists")
        for tensor in op.weights.values():
            _weight(weights, tensor, where)
        formats = {stored[n] for n in op.inputs if n in stored}
        if op.op == "ttnn.concat" and len(formats) > 1:  # ttnn refuses it (concat_device_operation.cpp)
            raise SpcError(f"{where} joins tensors stored as {', '.join(sorted(f.value for f in formats))}: ttnn "
                           "concatenates one format")
        stored[op.output] = op.dtype
        stored.update(zip(op.extra_outputs, op.extra_dtypes))
        try:
            if op.op == "spc.kernel":
                _kernel(op)
            else:
                want = _expected(op, [shapes[n] for n in op.inputs], weights)
                if want is not None and want != _numel(op.shape):
                    raise ShapeError(f"declares {_numel(op.shape)} output values ({op.shape}); its inputs and "
                                     f"arguments make {want}")
        except ShapeError as exc:
            raise SpcError(f"{where}: {exc}") from None
        for name in op.results:
            shapes[name] = list(op.shape)
    for t in [*program.device_outputs, *program.probes.values(), *program.fallback_outputs]:
        if t.name not in shapes:
            raise SpcError(f"device output {t.name}: no call makes it")
        if _numel(shapes[t.name]) != _numel(t.device_shape):
            raise SpcError(f"device output {t.name}: declared {t.device_shape}, made {shapes[t.name]}")
    for value, t in program.values.items():  # the record `spc check --per-layer` reads values by
        if t.name not in shapes:
            raise SpcError(f"held value {value}: no call or input makes its tensor {t.name}")
        if _numel(shapes[t.name]) != _numel(t.device_shape):
            raise SpcError(f"held value {value}: declared {t.device_shape}, made {shapes[t.name]}")
    return shapes


def _weight(weights: dict[str, np.ndarray], name: str, where: str) -> np.ndarray:
    if name not in weights:
        raise SpcError(f"{where} names weight {name}, which the plan does not hold")
    w = weights[name]
    if w.dtype not in DEVICE_WEIGHT_DTYPES:
        raise SpcError(f"{where}: weight {name} is {w.dtype}; the device reads float32 weights")
    if not np.isfinite(w).all():
        raise SpcError(f"{where}: weight {name} holds non-finite values")
    return w


def _dynamic_types(op: str, args: list[Any], attrs: dict[str, Any], fresh: Any) -> list[Any] | None:
    """The types of a data-dependent op's results where its inputs are not constants (the IR's own
    inference leaves them to ONNX's): the sizes that depend on the values as symbols."""
    x = args[0].type if args and args[0] is not None else None
    if x is None:
        return None

    def at(axis: Any) -> tuple:
        if axis is None:
            return (fresh(),)
        a = checked_axis(int(axis), len(x.shape))
        return (*x.shape[:a], fresh(), *x.shape[a + 1:])

    if op == "onnx.NonZero":
        return [TensorType(DType.I64, (len(x.shape), fresh()))]
    if op == "onnx.TopK":
        shape = at(attrs.get("axis", -1))
        return [TensorType(x.dtype, shape), TensorType(DType.I64, shape)]
    if op == "onnx.Compress":
        return [TensorType(x.dtype, at(attrs.get("axis")))]
    if op == "onnx.Unique":
        n = fresh()
        return [TensorType(x.dtype, at(attrs.get("axis"))), TensorType(DType.I64, (n,)),
                TensorType(DType.I64, (fresh(),)), TensorType(DType.I64, (n,))]
    return None


def _spelled_outputs(n: HostNode, stage: str) -> None:
    """A keypoint op makes what its ``outputs`` attribute spells, one value per entry."""
    spelled = n.attrs.get("outputs")
    if spelled is None:
        return
    if not isinstance(spelled, list) or len(spelled) != len(n.outputs) or not all(isinstance(w, str) for w in spelled):
        raise SpcError(f"{stage} node {n.name} ({n.op}): its outputs attribute spells {str(spelled)[:80]} for "
                       f"{len(n.outputs)} outputs")
    for words in spelled:
        try:
            OutputSpec.parse(words)
        except ValueError as exc:
            raise SpcError(f"{stage} node {n.name} ({n.op}): {exc}") from None


def _host(nodes: list[HostNode], known: dict[str, Any], weights: dict[str, np.ndarray],
          outputs: list[TensorSpec], stage: str) -> dict[str, Any]:
    """Type-check a host stage with the IR's rules, starting from ``known`` (name -> Value); the
    values it knows after the stage. A value whose type depends on values known only at run time
    (an Expand to the shape of a NonZero's result) is left to the runtime, and so is what reads it."""
    g = Graph("host")
    env = dict(known)
    declared = {t.name: t for t in outputs}
    symbols = itertools.count()
    for n in nodes:
        args = []
        for name in n.inputs:
            if name is None:
                args.append(None)
            elif name in env:
                args.append(env[name])
            elif name in weights:
                env[name] = g.add_const(name, np.asarray(weights[name]))
                args.append(env[name])
            else:
                raise SpcError(f"{stage} node {n.name} ({n.op}) reads {name}, which nothing makes")
        op = ops.get(n.op)
        lo, hi = op.arity
        if not lo <= len(args) <= hi:
            raise SpcError(f"{stage} node {n.name} ({n.op}) takes {lo}..{hi} inputs, not {len(args)}")
        if any(a is _UNKNOWN for a in args):
            env.update(dict.fromkeys(n.outputs, _UNKNOWN))
            continue
        out_types = None
        if op.infer is None:  # ops whose types their producer gives: the program's declared outputs
            _spelled_outputs(n, stage)
            if not all(o in declared for o in n.outputs):
                if n.op not in ("spc.Keypoints", "spc.KeypointsFromTopK"):
                    raise SpcError(f"{stage} node {n.name} ({n.op}): its outputs must be the program's")
                # one image's keypoints of a batch plan, which the stacking after it reads: sizes
                # known at run time, checked there against the declared outputs (runtime/runner.py)
                env.update(dict.fromkeys(n.outputs, _UNKNOWN))
                continue
            out_types = [_spec_type(declared[o]) for o in n.outputs]
        try:
            if out_types is None:
                out_types = op.infer(args, n.attrs)
                if out_types is None and op.data_dependent:
                    out_types = _dynamic_types(n.op, args, n.attrs, lambda: f"v{len(env)}_{next(symbols)}")
                if out_types is None:  # sizes that depend on run-time values
                    env.update(dict.fromkeys(n.outputs, _UNKNOWN))
                    continue
            node = g.make_node(op, args, n.attrs, out_types=out_types, name="n")
        except SpcError as exc:
            raise SpcError(f"{stage} node {n.name} ({n.op}): {exc}") from None
        except Exception as exc:  # the op's own type rules refuse it; the message says how
            raise SpcError(f"{stage} node {n.name} ({n.op}) does not type-check: {type(exc).__name__}: "
                           f"{str(exc)[:200]}") from None
        if len(node.outputs) < len(n.outputs):  # fewer is ONNX's omitted trailing optional outputs
            raise SpcError(f"{stage} node {n.name} ({n.op}) makes {len(node.outputs)} values, not {len(n.outputs)}")
        for name, v in zip(n.outputs, node.outputs):
            static = [d for d in v.type.shape if isinstance(d, int)]
            if _numel(static) > MAX_ELEMENTS:
                raise SpcError(f"{stage} node {n.name} ({n.op}) makes {v.type}: more than {MAX_ELEMENTS} values")
            env[name] = v
    for t in outputs:
        v = env.get(t.name)
        if v is None:
            raise SpcError(f"output {t.name}: the {stage} stage does not make it")
        if v is _UNKNOWN:  # the runtime checks it against its declaration (runtime/runner.py)
            continue
        if v.type.dtype.value != t.dtype or len(v.type.shape) != len(t.shape) or any(
                isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(v.type.shape, t.shape)):
            raise SpcError(f"output {t.name}: made as {v.type}, declared {t.dtype}{t.shape}")
    return env


def _spec_type(t: Any):
    return TensorType(DType(t.dtype), tuple(t.shape))


def _roles(program: Program) -> None:
    """The output roles name outputs, spell keypoint outputs the keypoint op understands, with the
    rank that spelling implies, and give dense maps a plausible cell."""
    outputs = {t.name: t for t in program.outputs}
    for name, role in program.roles.items():
        if name not in outputs:
            raise SpcError(f"output role of {name}: the program has no such output")
        kind = role.get("role")
        if "cell" in role and not (type(role["cell"]) is int and 1 <= role["cell"] <= 64):
            raise SpcError(f"output role of {name}: cell {str(role['cell'])[:20]} is not a size from 1 to 64")
        if kind not in ROLES:
            continue
        text = role.get("spec")
        try:
            spec = OutputSpec.parse(text) if isinstance(text, str) else None
        except ValueError as exc:
            raise SpcError(f"output role of {name}: {exc}") from None
        if spec is None or spec.role != kind:
            raise SpcError(f"output role of {name}: {kind} with the spelling {str(text)[:40]!r}")
        rank = (2 if kind in ("keypoints", "descriptors") else 1) + spec.batch
        shape = outputs[name].shape
        if len(shape) != rank or (kind == "keypoints" and isinstance(shape[-1], int) and shape[-1] != 2):
            raise SpcError(f"output role of {name}: {kind} ({spec.spell()}) cannot be a value of shape {list(shape)}")


def verify_plan(program: Program, weights: dict[str, np.ndarray]) -> None:
    """Refuse a plan whose parts disagree (module docstring); silent when it holds."""
    _roles(program)
    _device(program, weights)
    g = Graph("inputs")
    known = {t.name: g.add_input(t.name, _spec_type(t)) for t in program.inputs}
    # the host-pre stage makes the device inputs; the device outputs enter the host-post stage
    pre_outputs = [TensorSpec(t.name, t.dtype, list(t.shape)) for t in program.device_inputs]
    # the runtime keeps every value of the frame: a later stage may read what an earlier one made
    pre = _host(program.host_pre, known, weights, pre_outputs, "host-pre")
    device = {t.name: g.add_input(t.name, _spec_type(t)) for t in [*program.device_outputs, *program.probes.values()]}
    _host(program.host_post, {**pre, **device}, weights, program.outputs, "host-post")
    if program.fallback_outputs or program.fallback_post:
        fallback = {t.name: g.add_input(t.name, _spec_type(t)) for t in program.fallback_outputs}
        _host(program.fallback_post, {**pre, **device, **fallback}, weights, program.outputs, "fallback")
