"""One read-back per run: every tensor the host reads, packed on the device into one.

ttnn's host cost is per call, not per byte (6-9 ms for each ``from_device`` on a p150, measured
by the hand port: memory/throughput.py), so a run that reads three tensors pays three times. Here
each device output is laid row-major in rows of one width for all (in float32 where any of them
is not bfloat16: topk's positions, exact in float32 below 2^24, are not in bfloat16), and the
outputs' rows are concatenated one after another into one [1, 1, R, W] tensor; the host's first
node, ``spc.Unpack``, takes each one's rows back (a view: no copy), as its attributes say. The values
are the same: bfloat16 and integers are exact in float32.

Before::

    device outputs: %values [1,1,1,k] bf16, %positions [1,1,1,k] u32, %descriptors [1,k,c] bf16
    host: spc.KeypointsFromTopK(%values, %positions, %descriptors)

After::

    ttnn.typecast / ttnn.to_layout(ROW_MAJOR) / ttnn.reshape([1,1,n/k,k]) of each, ttnn.concat(dim=-2)
    device outputs: %readback [1,1,2+c,k] f32
    host: %values, %positions, %descriptors = spc.Unpack(%readback) {rows = [[0,1],[1,2],[2,2+c]], ...};
          spc.KeypointsFromTopK(%values, %positions, %descriptors)
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from spc.plan.program import DeviceTensor, HostNode
from spc.ttnn.configs import PageLayout
from spc.ttnn.formats import DataFormat
from spc.ttnn.layout import Form, PlainLayout
from spc.ttnn.memory import DRAM_INTERLEAVED

if TYPE_CHECKING:
    from spc.lowering.emitter import Emitter

READBACK = "readback"


def read_once(em: Emitter, outputs: list[DeviceTensor]) -> tuple[list[DeviceTensor], list[HostNode]]:
    """``outputs`` as one device tensor, and the host node that gives them back; one output as it is."""
    if len(outputs) < 2:
        return outputs, []
    f32, bf16 = DataFormat.FLOAT32, DataFormat.BFLOAT16
    pack = bf16 if all(em.dtypes.get(t.name, bf16) is bf16 for t in outputs) else f32
    counts = [math.prod(t.device_shape) for t in outputs]
    width = _width(counts)
    rows = [0]
    for n in counts:
        rows.append(rows[-1] + n // width)
    name = em.unused(READBACK)  # a model may name a value so
    parts = [_as_rows(em, t, pack, width) for t in outputs]
    em.emit("ttnn.concat", parts, name, PlainLayout((1, 1, rows[-1], width)), READBACK, store=pack,
            out_shape=[1, 1, rows[-1], width], dim=-2)
    packed = DeviceTensor(name, [rows[-1], width], [1, 1, rows[-1], width], Form.PLAIN, "f32")
    attrs = {"rows": [[a, b] for a, b in itertools.pairwise(rows)],
             "device_shapes": [list(t.device_shape) for t in outputs], "shapes": [list(t.shape) for t in outputs],
             "forms": [t.form.value for t in outputs], "dtypes": [t.dtype for t in outputs]}
    return [packed], [HostNode("spc.Unpack", name, [name], [t.name for t in outputs], attrs)]


def _width(counts: list[int]) -> int:
    """The rows' width: the largest divisor of every output's count up to 2048 values (a row-major
    row is one page, which ttnn stages in L1 whole: a whole map's is too much, measured on the mock
    p150), so that each output is whole rows, one after another."""
    common = math.gcd(*counts)
    return max(d for d in range(1, min(common, 2048) + 1) if common % d == 0)


def _as_rows(em: Emitter, t: DeviceTensor, pack: DataFormat, width: int) -> str:
    """Device output ``t`` interleaved, in ``pack``, row-major, as [1, 1, its count / width, width]."""
    shape = list(t.device_shape)
    lay = PlainLayout(tuple(shape))

    def call(op: str, x: str, what: str, store: DataFormat | None = None, **args: object) -> str:
        return em.emit(op, [x], em.unused(f"{t.name}/{what}"), lay, READBACK, store=store, out_shape=shape, **args)

    x = t.name
    if not em.in_dram.get(x, True):  # data movement takes interleaved tensors, not a conv's shards
        x = call("ttnn.to_memory_config", x, "dram", memory_config=DRAM_INTERLEAVED)
    if em.dtypes.get(x, DataFormat.BFLOAT16) is not pack:  # ttnn casts tiles
        if not em.tiles.get(x, False):
            x = call("ttnn.to_layout", x, "tiled", layout=PageLayout.TILE)
        x = call("ttnn.typecast", x, pack.value, store=pack, dtype=pack)
    if em.tiles.get(x, False):
        x = call("ttnn.to_layout", x, "row_major", layout=PageLayout.ROW_MAJOR)
    out = [1, 1, math.prod(shape) // width, width]
    return em.emit("ttnn.reshape", [x], em.unused(f"{t.name}/rows"), PlainLayout(tuple(out)), READBACK, store=pack,
                   shape=out)
