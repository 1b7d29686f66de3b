"""batch-images (``--batch B``): a batch-1 model made to take B images at once.

The plan of a batch-B model must compute what the batch-1 model computes on each image, with
the outputs stacked as a batch-B export of the same network returns them. Two rewrites, both
exact:

* the **image-wise prefix** (every node from the input on whose result for image b depends only
  on image b: convolutions, pools, element-wise ops with per-image operands, softmax and
  reductions off the batch axis, transposes that keep it first, reshapes that keep it) takes the
  batch in its first dimension: the input is ``[B, ...]``, a reshape's target says B, and the
  types are inferred again;
* the **rest** (the first node that is not known to be image-wise and all that depends on it:
  HF's per-image keypoint loop, NonZero, anything unknown) is copied once per image, each copy
  reading its image's slice of the prefix (``Slice`` on axis 0); each output's copies are
  stacked on axis 0, their other sizes padded with zeros to the largest (as HF's batched
  forward pads the keypoints, scores, descriptors and mask).

Before (``--batch 2``)::

    %x: f32[1,1,64,80] = input
    %c: f32[1,65,8,10] = onnx.Conv(%x, %w)
    %s: f32[65,8,10] = onnx.Squeeze(%c, [0])            # per image: not image-wise at axis 0
    %k: i64[N,3] = onnx.NonZero(%s)
    -> %k

After::

    %x: f32[2,1,64,80] = input
    %c: f32[2,65,8,10] = onnx.Conv(%x, %w)
    %c/image0: f32[1,65,8,10] = onnx.Slice(%c, [0], [1], [0])
    %s/image0: f32[65,8,10] = onnx.Squeeze(%c/image0, [0])
    %k/image0: i64[N,3] = onnx.NonZero(%s/image0)
    ... the same for image 1 ...
    %k: i64[2,N,3] = onnx.Concat(Pad(%k/image0), Pad(%k/image1)) {axis = 0}

(there the output has no batch axis of size 1, so this model is refused; HF's outputs have one).
A copied output must keep a batch axis of size 1 (its first dimension), or which image a row
belongs to cannot be told: such a model is refused, naming the output. Copies cost host time
per image, never correctness; the fusions then recognise each image's copy on its own.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from spc.errors import SpcError
from spc.ir import ops
from spc.ir.graph import Graph, Node, Value
from spc.ir.ops.infer import const, norm_axis
from spc.ir.types import DType, TensorType
from spc.passes.manager import Pass, PassContext, PassResult

Rule = Callable[[Node], str | None]

_ELEMENTWISE = {
    "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitShift", "BitwiseAnd", "BitwiseNot",
    "BitwiseOr", "BitwiseXor", "Cast", "Ceil", "Celu", "Clip", "Cos", "Cosh", "Div", "Dropout", "Elu", "Equal", "Erf",
    "Exp", "Floor", "Gelu", "Greater", "GreaterOrEqual", "HardSigmoid", "HardSwish", "Identity", "IsInf", "IsNaN",
    "LeakyRelu", "Less", "LessOrEqual", "Log", "Max", "Mean", "Min", "Mish", "Mod", "Mul", "Neg", "Not", "Or", "PRelu",
    "Pow", "Reciprocal", "Relu", "Round", "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign",
    "Sqrt", "Sub", "Sum", "Tan", "Tanh", "ThresholdedRelu", "Where", "Xor",
}
# per image (and channel): the batch axis is never read across
_PER_IMAGE = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool",
              "GlobalLpPool", "BatchNormalization", "InstanceNormalization", "LRN", "DepthToSpace", "SpaceToDepth"}
# every operand is an image's own (GridSample does not broadcast its grid over the batch)
_ALL_IMAGES = {"GridSample", "Concat"}
_AXIS_ATTR = {"Softmax": -1, "LogSoftmax": -1, "Hardmax": -1, "LpNormalization": -1, "Concat": None, "Split": 0,
              "Flatten": 1, "ArgMax": 0, "ArgMin": 0, "CumSum": None}
_REDUCE = {"ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
           "ReduceProd", "ReduceSum", "ReduceSumSquare"}


def _rank(n: Node) -> int:
    return n.inputs[0].type.rank if n.inputs and n.inputs[0] is not None else 0


def _operands_per_image(n: Node, batched: set[int]) -> str | None:
    """An operand that is not an image's own (a constant, a weight) must broadcast over the batch:
    of lower rank than the result, or of size 1 in its first dimension."""
    rank = max((v.type.rank for v in n.inputs if v is not None), default=0)
    for v in n.inputs:
        if v is None or id(v) in batched:
            continue
        if v.type.rank == rank and v.type.shape[0] != 1:
            return f"operand %{v.name} has {v.type.shape[0]} rows in the batch axis"
    return None


def _axis_off_batch(n: Node) -> str | None:
    short = n.op.short_name
    axis = n.attrs.get("axis", _AXIS_ATTR[short])
    if axis is None:
        if short == "CumSum":
            data = const(n.inputs[1]) if len(n.inputs) > 1 and n.inputs[1] is not None else None
            if data is None:
                return "its axis is not a constant"
            axis = int(np.asarray(data).reshape(-1)[0])
        else:
            return "it has no axis"
    if norm_axis(int(axis), _rank(n)) == 0:
        return "it works along the batch axis"
    return None


def _reduce(n: Node) -> str | None:
    axes = n.attrs.get("axes")
    if axes is None and len(n.inputs) > 1 and n.inputs[1] is not None:
        data = const(n.inputs[1])
        if data is None:
            return "its axes are not constants"
        axes = [int(a) for a in np.atleast_1d(data)]
    if not axes:
        return None if n.attrs.get("noop_with_empty_axes", 0) else "it reduces over every axis"
    if 0 in {norm_axis(int(a), _rank(n)) for a in axes}:
        return "it reduces over the batch axis"
    return None


def _axes_input(n: Node) -> list[int] | None:
    if "axes" in n.attrs:
        return [int(a) for a in n.attrs["axes"]]
    data = const(n.inputs[1]) if len(n.inputs) > 1 and n.inputs[1] is not None else None
    return None if data is None else [int(a) for a in np.atleast_1d(data)]


def _squeeze(n: Node) -> str | None:
    axes = _axes_input(n)
    if not axes:
        return "it may drop the batch axis"
    return "it drops the batch axis" if 0 in {norm_axis(a, _rank(n)) for a in axes} else None


def _unsqueeze(n: Node) -> str | None:
    axes = _axes_input(n)
    if axes is None:
        return "its axes are not constants"
    out_rank = _rank(n) + len(axes)
    return "it puts an axis before the batch" if 0 in {norm_axis(a, out_rank) for a in axes} else None


def _transpose(n: Node) -> str | None:
    perm = n.attrs.get("perm")
    return None if perm is not None and int(perm[0]) == 0 else "it moves the batch axis"


def _slice(n: Node) -> str | None:
    if len(n.inputs) < 4 or n.inputs[3] is None:
        return "it may slice the batch axis (no axes given)"
    data = const(n.inputs[3])
    if data is None:
        return "its axes are not constants"
    return "it slices the batch axis" if 0 in {norm_axis(int(a), _rank(n)) for a in np.atleast_1d(data)} else None


def _pad(n: Node) -> str | None:
    pads = const(n.inputs[1]) if len(n.inputs) > 1 and n.inputs[1] is not None else n.attrs.get("pads")
    if pads is None or (len(n.inputs) > 3 and n.inputs[3] is not None):
        return "its pads are not constants over every axis"
    pads = np.asarray(pads).reshape(-1)
    return "it pads the batch axis" if pads[0] or pads[len(pads) // 2] else None


def _reshape(n: Node) -> str | None:
    shape = const(n.inputs[1]) if len(n.inputs) > 1 and n.inputs[1] is not None else None
    if shape is None:
        return "its target shape is not a constant"
    shape = np.asarray(shape).reshape(-1)
    if not len(shape) or int(shape[0]) not in (0, 1):
        return "its target does not keep the batch axis first"
    if -1 in shape.tolist() and int(shape[0]) != 0 and n.attrs.get("allowzero", 0):
        return "allowzero with an inferred size"
    return None


def _expand(n: Node) -> str | None:
    shape = const(n.inputs[1]) if len(n.inputs) > 1 and n.inputs[1] is not None else None
    if shape is None:
        return "its target shape is not a constant"
    shape = np.asarray(shape).reshape(-1)
    if len(shape) > _rank(n):
        return "it puts axes before the batch"
    return "it expands the batch axis" if len(shape) == _rank(n) and int(shape[0]) != 1 else None


RULES: dict[str, Rule] = {
    **{f"onnx.{o}": (lambda n: None) for o in _ELEMENTWISE | _PER_IMAGE | {"GridSample"}},
    **{f"onnx.{o}": _axis_off_batch for o in _AXIS_ATTR},
    **{f"onnx.{o}": _reduce for o in _REDUCE},
    "onnx.Squeeze": _squeeze, "onnx.Unsqueeze": _unsqueeze, "onnx.Transpose": _transpose,
    "onnx.Slice": _slice, "onnx.Pad": _pad, "onnx.Reshape": _reshape, "onnx.Expand": _expand,
}


def image_wise(n: Node, batched: set[int]) -> str | None:
    """Why ``n`` may mix images or cannot take the batch (None: it is image-wise)."""
    rule = RULES.get(n.op.name)
    if rule is None:
        return f"{n.op.name} is not known to keep images apart"
    if n.op.short_name in _ALL_IMAGES and not all(v is None or id(v) in batched for v in n.inputs):
        return "it combines an image with a value that is not one"
    if n.op.short_name in _ELEMENTWISE:
        why = _operands_per_image(n, batched)
        if why:
            return why
    if n.op.short_name in _PER_IMAGE and any(v is not None and id(v) in batched for v in n.inputs[1:]):
        return "an image is its weight"
    return rule(n)


def _helpers(g: Graph, copied: list[Node], depends: set[int]) -> list[Node]:
    """The nodes that do not read the input (an Expand of zeros too large to fold) whose results
    the copied nodes read, directly or through each other."""
    want = {id(v) for n in copied for v in n.inputs if v is not None}
    found: list[Node] = []
    for n in reversed(g.nodes):
        if n.inputs and not any(id(o) in depends for o in n.outputs) and any(id(o) in want for o in n.outputs):
            found.append(n)
            want.update(id(v) for v in n.inputs if v is not None)
    return found[::-1]


def _own_sizes(t: TensorType, image: int) -> TensorType:
    """``t`` with its symbolic sizes made image ``image``'s own: two images' keypoint counts are
    different sizes, which one symbol would say are equal."""
    return t.with_shape(tuple(d if isinstance(d, int) else f"{d}_image{image}" for d in t.shape))


class BatchImages(Pass):
    name = "batch-images"
    summary = "a batch-1 model takes B images: its image-wise prefix batched, the rest once per image"

    def __init__(self, batch: int = 1) -> None:
        self.batch = batch

    def run(self, g: Graph, ctx: PassContext) -> PassResult:
        b = self.batch
        if b <= 1:
            return PassResult(False, {"batch": b})
        if len(g.inputs) != 1:
            raise SpcError(f"--batch needs a model with one input; it has {len(g.inputs)}")
        x = g.inputs[0]
        if not x.type.is_static or not x.type.rank or x.type.shape[0] != 1:
            raise SpcError(f"--batch {b}: the input %{x.name} is {x.type}; --batch rewrites a batch-1 model "
                           "(a model with a dynamic batch takes --input-shape instead)")
        batched, depends = {id(x)}, {id(x)}
        x.type = x.type.with_shape((b, *x.type.shape[1:]))
        copied: list[Node] = []
        first_copied: tuple[str, str] | None = None
        for n in list(g.nodes):
            ins = [v for v in n.inputs if v is not None and id(v) in depends]
            if not ins:
                continue
            depends.update(id(o) for o in n.outputs)
            why = "it reads a value computed per image" if not all(id(v) in batched for v in ins) else \
                image_wise(n, batched)
            if why is None:
                why = self._batch(g, n, b)
            if why is None:
                batched.update(id(o) for o in n.outputs)
            else:
                copied.append(n)
                if first_copied is None:
                    first_copied = (n.name, why)
        outputs = self._copy(g, copied, _helpers(g, copied, depends), batched, b)
        g.outputs = outputs
        g.toposort()
        stats = {"batch": b, "batched_nodes": sum(1 for n in g.nodes if any(id(o) in batched for o in n.outputs)),
                 "copied_nodes": len(copied)}
        if first_copied is not None:
            stats["copied_from"] = f"{first_copied[0]} ({first_copied[1]})"
            ctx.note(f"batch-images: from node {first_copied[0]} on, the model runs once per image "
                     f"({first_copied[1]}); {len(copied)} node(s) copied {b} times")
        return PassResult(True, stats)

    @staticmethod
    def _batch(g: Graph, n: Node, b: int) -> str | None:
        """Give ``n`` the batch (its inputs have it): a reshape's target says B; the types are
        inferred again and must be static with B first."""
        before = n.inputs[1] if n.op.name == "onnx.Reshape" else None
        if before is not None:
            shape = np.asarray(const(before)).reshape(-1).copy()
            if int(shape[0]) == 1:
                shape[0] = b
                g.set_input(n, 1, g.add_const(f"{n.name}_batch_shape", shape.astype(np.int64)))
        try:
            types = n.op.infer(n.inputs, n.attrs) if n.op.infer else None
        except (ValueError, KeyError, IndexError, TypeError):
            types = None
        if types is None or any(not t.is_static or not t.rank or t.shape[0] != b for t in types):
            if before is not None and n.inputs[1] is not before:  # copied per image: its own target again
                g.set_input(n, 1, before)
            return "its result does not take the batch first"
        for o, t in zip(n.outputs, types):
            o.type = t
        return None

    def _copy(self, g: Graph, copied: list[Node], helpers: list[Node], batched: set[int], b: int) -> list[Value]:
        """The copied nodes once per image (with the input-free ``helpers`` they read, so that no
        node serves two images' copies: a recogniser takes an image's region whole), and each
        output's copies stacked."""
        slices: dict[tuple[int, int], Value] = {}
        images: list[dict[int, Value]] = []

        def image_of(v: Value, i: int) -> Value:
            if (id(v), i) not in slices:
                t = v.type.with_shape((1, *v.type.shape[1:]))
                consts = [g.add_const(f"{v.name}/image{i}_{k}", np.array([a], np.int64))
                          for k, a in (("start", i), ("end", i + 1), ("axis", 0))]
                node = g.make_node(ops.get("onnx.Slice"), [v, *consts], out_types=[t], name=f"{v.name}/image{i}",
                                   out_names=[f"{v.name}/image{i}"])
                slices[(id(v), i)] = node.output
            return slices[(id(v), i)]

        mine = {id(n) for n in copied} | {id(n) for n in helpers}
        both = [n for n in g.nodes if id(n) in mine]
        for i in range(b):
            made: dict[int, Value] = {}
            for n in both:
                ins = [None if v is None else image_of(v, i) if id(v) in batched else made.get(id(v), v)
                       for v in n.inputs]
                twin = g.make_node(n.op, ins, n.attrs, out_types=[_own_sizes(o.type, i) for o in n.outputs],
                                   name=f"{n.name}/image{i}", out_names=[f"{o.name}/image{i}" for o in n.outputs])
                made.update({id(o): t for o, t in zip(n.outputs, twin.outputs)})
            images.append(made)
        outputs: list[Value] = []
        names: list[tuple[Value, str]] = []
        for o in g.outputs:
            if id(o) in batched:
                outputs.append(o)
            elif id(o) in images[0]:
                stacked = self._stack(g, o, [made[id(o)] for made in images])
                outputs.append(stacked)
                names.append((stacked, o.name))
            else:
                raise SpcError(f"--batch: output {o.name} does not depend on the input; a batch of images "
                               "cannot be told apart in it")
        g.outputs = outputs
        for n in reversed(copied):
            g.remove_node(n)
        for n in reversed(helpers):  # kept where the batched nodes read them too
            if not any(o.uses or o in g.outputs for o in n.outputs):
                g.remove_node(n)
        for v, name in names:
            g.rename(v, name)
        return outputs

    @staticmethod
    def _stack(g: Graph, o: Value, parts: list[Value]) -> Value:
        """The images' copies of output ``o`` on axis 0; sizes the type leaves open are padded with
        zeros to the largest image's (HF's batched forward pads its keypoints so)."""
        t = o.type
        if not t.rank or t.shape[0] != 1:
            raise SpcError(f"--batch: output {o.name} is {t}: without a first axis of size 1 the images "
                           "cannot be told apart in it; export the model with a batch axis")
        out_type = t.with_shape((len(parts), *t.shape[1:]))
        if not t.is_static:  # each part has its own sizes (_own_sizes); the stack the largest
            i64 = TensorType(DType.I64, (t.rank,))
            shapes = [g.make_node(ops.get("onnx.Shape"), [p], out_types=[i64], name=f"{p.name}/shape").output
                      for p in parts]
            most = g.make_node(ops.get("onnx.Max"), shapes, out_types=[i64], name=f"{o.name}/largest").output
            zeros = g.add_const(f"{o.name}/pad_before", np.zeros(t.rank, np.int64))
            padded = []
            for p, s in zip(parts, shapes):
                grow = g.make_node(ops.get("onnx.Sub"), [most, s], out_types=[i64], name=f"{p.name}/grow").output
                pads = g.make_node(ops.get("onnx.Concat"), [zeros, grow], {"axis": 0},
                                   out_types=[TensorType(DType.I64, (2 * t.rank,))], name=f"{p.name}/pads").output
                padded.append(g.make_node(ops.get("onnx.Pad"), [p, pads], {"mode": "constant"},
                                          out_types=[t.with_shape((1, *t.shape[1:]))], name=f"{p.name}/padded").output)
            parts = padded
        return g.make_node(ops.get("onnx.Concat"), parts, {"axis": 0}, out_types=[out_type],
                           name=f"{o.name}/images").output
