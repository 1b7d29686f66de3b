"""How a picture fills a model's image input, read from the graph, never from names.

An image input is ``[1, ., ., .]`` with no axis named. Its first windowed ops (the convolutions
and pools the image reaches before any other) read ``[N, C, H, W]``; their H and W are the
input's axes 1 and 2 (NHWC: TensorFlow's and JAX's exporters, a Transpose before the first
convolution) or 2 and 3 (NCHW). Where a resize in between hides the sizes, the one of axes 1
and 3 that has at most four entries is the channels.

The channels are what those ops (with none, the model's outputs) read of them: SuperPoint's
Hugging Face export takes three and reads the first (its processor feeds grey three times);
DISK's first convolution reads all three (colour). Each channel is changed in turn on a seeded
picture and the values the windowed ops read are compared, only the nodes on the way to them
run: a model that reads several of its three channels takes colour (``rgb``), anything else the
picture's grey in every channel. A graph whose axes, or whose colour, cannot be told takes
arrays only (``layout = "none"``), with a note.

Before::

    %x: f32[1, 480, 640, 1]
    %t = onnx.Transpose(%x) {perm = [0, 3, 1, 2]}
    %y = onnx.Conv(%t, %w)

After: ``ImageInput(layout="NHWC", colour="grey")``, and a note saying so.
"""

from __future__ import annotations

import numpy as np

from spc.ir.graph import Graph, Node, Value
from spc.ir.interpreter import MissingValue, NodeFailed, run_nodes
from spc.plan.program import MAX_IMAGE_CHANNELS, ImageInput

WINDOWED = frozenset({"onnx.Conv", "onnx.ConvTranspose", "onnx.DeformConv", "onnx.MaxPool", "onnx.AveragePool",
                      "onnx.LpPool"})
NOT_A_PICTURE = ImageInput(layout="none")


def image_input(g: Graph) -> tuple[ImageInput, str | None]:
    """The convention a picture is read by for ``g``'s one input, and a note when it is not
    SuperPoint's own (NCHW, grey) or cannot be told."""
    if len(g.inputs) != 1:
        return NOT_A_PICTURE, None
    x = g.inputs[0]
    t = x.type
    if t.rank != 4 or not t.is_static or not t.dtype.is_float:
        return NOT_A_PICTURE, None
    dims = [int(d) for d in t.static_shape]  # a batch export's N images are each read so
    if min(dims) < 1:  # an empty input: no picture fills it
        return NOT_A_PICTURE, None
    prefix, entries = _first_windows(g, x)
    layout = _layout(dims, entries)
    if not entries:  # no convolution or pool to ask: what the model returns tells which channels it reads
        entries = [v for v in g.outputs if not v.is_const]
        prefix = _towards(g.nodes, entries, x)
    if layout is None:
        return NOT_A_PICTURE, (f"image input {x.name} {dims}: its first convolutions do not say which axis holds "
                               "the channels; it takes arrays (.npy), not pictures")
    axis = 1 if layout == "NCHW" else 3
    colour = "grey"
    if dims[axis] == 3:
        read = _channels_read(x, dims, axis, prefix, entries)
        if read is None:
            return NOT_A_PICTURE, (f"image input {x.name} {dims}: the way to its first convolutions (or to its "
                                   "outputs) cannot be run from the image alone, so whether it reads colour cannot "
                                   "be told; it takes arrays (.npy), not pictures")
        colour = "rgb" if len(read) > 1 else "grey"
    found = ImageInput(layout, colour)
    if found == ImageInput():
        return found, None
    what = "colour (its first convolutions read all three channels)" if colour == "rgb" else "grey"
    return found, f"image input {x.name} {dims} is {layout}: pictures are read in {what}"


def _first_windows(g: Graph, x: Value) -> tuple[list[Node], list[Value]]:
    """The nodes on the paths from ``x`` to the first windowed ops it reaches (in order), with what
    they read that constants compute (a quantized model's DequantizeLinear of a constant: the graph
    is read as imported, before constants are folded), and the values those ops read from there.
    What the image reaches only past a windowed op, or beside the paths (its Shape for a later
    scaling), is not among them."""
    reached, computed = {id(x)}, set()
    between: list[Node] = []
    entries: list[Value] = []
    for n in g.nodes:  # topological order
        read = [v for v in n.inputs[:1] if v is not None and id(v) in reached]
        if n.op.name in WINDOWED:
            entries.extend(read)
            continue
        if any(v is not None and id(v) in reached for v in n.inputs):
            between.append(n)
            reached.update(id(o) for o in n.outputs)
        elif all(v is None or v.is_const or id(v) in computed for v in n.inputs):
            between.append(n)  # of constants only: kept where the paths read it (_towards)
            computed.update(id(o) for o in n.outputs)
    return _towards(between, entries, x), entries


def _towards(nodes: list[Node], ends: list[Value], x: Value) -> list[Node]:
    """Of ``nodes`` (in order), those the values ``ends`` depend on, not looking past ``x``."""
    needed = {id(v) for v in ends}
    kept: list[Node] = []
    for n in reversed(nodes):
        if any(id(o) in needed for o in n.outputs):
            kept.append(n)
            needed.update(id(v) for v in n.inputs if v is not None and v is not x)
    return kept[::-1]


def _layout(dims: list[int], entries: list[Value]) -> str | None:
    """NCHW or NHWC from the windowed ops' spatial sizes, else from the small axis; None when
    they disagree or nothing tells."""
    found = set()
    for v in entries:
        if v.type.rank != 4 or not v.type.is_static:
            continue
        hw = tuple(int(d) for d in v.type.static_shape[2:])
        fits = {lay for lay, axes in (("NCHW", (2, 3)), ("NHWC", (1, 2))) if hw == (dims[axes[0]], dims[axes[1]])}
        if len(fits) == 1:
            found |= fits
    if len(found) == 1:
        return found.pop()
    if found:
        return None
    small = [lay for lay, axis in (("NCHW", 1), ("NHWC", 3)) if dims[axis] <= MAX_IMAGE_CHANNELS]
    return small[0] if len(small) == 1 else None


def _channels_read(x: Value, dims: list[int], axis: int, prefix: list[Node],
                   entries: list[Value]) -> set[int] | None:
    """The channels of ``x`` (on ``axis``) that the windowed ops' inputs depend on: each changed in
    turn on a seeded picture. An op that reads ``x`` itself reads every channel; None where there
    is nothing to ask or the way there needs more than the image (nothing can be told)."""
    if not entries:
        return None
    if any(v is x for v in entries):
        return set(range(dims[axis]))
    base = _picture(dims)
    try:
        ref = [a.copy() for a in _entry_values(x, base, prefix, entries)]  # views of ``base``, changed below
        read = set()
        for c in range(dims[axis]):
            index = tuple(c if i == axis else slice(None) for i in range(4))
            kept = base[index].copy()
            base[index] = 1 - kept  # the channel's values reversed, the others as they were
            try:
                if any(not np.array_equal(a, b) for a, b in zip(ref, _entry_values(x, base, prefix, entries))):
                    read.add(c)
            finally:
                base[index] = kept
    except (MissingValue, NodeFailed):  # what lies before the convolutions needs more than the image
        return None
    return read


def _picture(dims: list[int]) -> np.ndarray:
    """Distinct values in [0, 1), where no clamp or rectifier hides a change: each element's index
    over their count."""
    n = int(np.prod(dims))
    return (np.arange(n, dtype=np.float32) * np.float32(1 / n)).reshape(dims)


def _entry_values(x: Value, picture: np.ndarray, prefix: list[Node], entries: list[Value]) -> list[np.ndarray]:
    env = run_nodes(prefix, {id(x): picture}, quiet=True)
    return [env[id(v)] for v in entries]
