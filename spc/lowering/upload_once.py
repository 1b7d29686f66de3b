"""One upload per run: the device inputs of a model of several (a matcher's keypoints,
descriptors and sizes) packed on the host into one tensor, cut back on the device.

ttnn's host cost is per call, not per byte (~8.4 ms for each upload on a p150, measured by the
hand port: memory/throughput.py), so six inputs cost six times one. Here the host's last node,
``spc.Pack``, lays each input out in its device layout, flattened, from the first of its own rows of
``WIDTH`` values (the rest of its last row zeros), in float32 (lowering/lower.py input_storage);
the device's first calls slice each input's rows back and reshape them to its device shape. An
image plan has one input and is left as it is.

Before::

    device inputs: %kpts0 [1,512,2] f32, %desc0 [1,512,128] f32, %size0 [1,2] f32

After::

    host: %upload = spc.Pack(%kpts0, %desc0, %size0) {rows = [[0,1],[1,65],[65,66]], width = 1024, ...}
    device inputs: %upload [1,1,66,1024] f32
    ttnn.slice(%upload, [0,0,0,0], [1,1,1,1024]) -> reshape [1,1,1,1024] -> slice [.., :1024] -> reshape
        [1,512,2] = %kpts0 ...  (an input of whole rows: the slice and the reshape only)
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from spc.plan.program import DeviceTensor, HostNode
from spc.ttnn.formats import DataFormat
from spc.ttnn.layout import Form, PlainLayout

if TYPE_CHECKING:
    from spc.lowering.emitter import Emitter

UPLOAD = "upload"
# values per row: a row-major row is one page, which ttnn stages in L1 whole (read_once.py)
WIDTH = 1024


def upload_once(em: Emitter, inputs: list[DeviceTensor]) -> tuple[list[DeviceTensor], list[HostNode]]:
    """``inputs`` as one device tensor, and the host node that packs them; one input as it is.
    The calls that cut them back are put first in ``em.ops``."""
    if len(inputs) < 2:
        return inputs, []
    rows = [0]
    for t in inputs:
        rows.append(rows[-1] + math.ceil(math.prod(t.device_shape) / WIDTH))
    name = em.unused(UPLOAD)  # a model may name a value so
    shape = [1, 1, rows[-1], WIDTH]
    f32 = DataFormat.FLOAT32
    em.layouts[name], em.dtypes[name], em.in_dram[name], em.tiles[name] = PlainLayout(tuple(shape)), f32, True, False
    first = len(em.ops)
    for t, (a, b) in zip(inputs, itertools.pairwise(rows)):
        _cut(em, name, t, a, b)
    em.ops[:] = em.ops[first:] + em.ops[:first]
    packed = DeviceTensor(name, shape, shape, Form.PLAIN, "f32")
    attrs = {"rows": [[a, b] for a, b in itertools.pairwise(rows)], "width": WIDTH,
             "device_shapes": [list(t.device_shape) for t in inputs], "shapes": [list(t.shape) for t in inputs],
             "forms": [t.form.value for t in inputs], "dtypes": [t.dtype for t in inputs]}
    return [packed], [HostNode("spc.Pack", name, [t.name for t in inputs], [name], attrs)]


def _cut(em: Emitter, packed: str, t: DeviceTensor, a: int, b: int) -> None:
    """Input ``t`` from rows a..b of ``packed``, under its own name, in its own layout."""
    n = math.prod(t.device_shape)
    layout = em.layouts.pop(t.name)  # made here now, no longer uploaded

    def call(op: str, x: str, out: str, out_shape: list[int], **args: object) -> str:
        return em.emit(op, [x], out, PlainLayout(tuple(out_shape)), UPLOAD, store=DataFormat.FLOAT32,
                       out_shape=out_shape, **args)

    part = [1, 1, b - a, WIDTH]
    x = call("ttnn.slice", packed, em.unused(f"{t.name}/rows"), part,
             starts=[0, 0, a, 0], ends=[1, 1, b, WIDTH], steps=[1, 1, 1, 1])
    if n != (b - a) * WIDTH:  # the last row's zeros cut off
        flat = [1, 1, 1, (b - a) * WIDTH]
        x = call("ttnn.reshape", x, em.unused(f"{t.name}/flat"), flat, shape=flat)
        x = call("ttnn.slice", x, em.unused(f"{t.name}/values"), [1, 1, 1, n],
                 starts=[0, 0, 0, 0], ends=[1, 1, 1, n], steps=[1, 1, 1, 1])
    em.emit("ttnn.reshape", [x], t.name, layout, UPLOAD, store=DataFormat.FLOAT32,
            out_shape=list(t.device_shape), shape=list(t.device_shape))
