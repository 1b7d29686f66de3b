"""Memory configurations as types: where a tensor lives, and how a conv or pool runs.

As ttnn (and tt-mlir's MemoryConfigAttr) has them:

* :class:`MemoryConfig`: a buffer type (DRAM or L1) and a tensor layout (interleaved, or
  height/width/block sharded) — ``ttnn.MemoryConfig``, e.g. ``DRAM_INTERLEAVED``;
* :class:`SliceConfig`: how ttnn.conv2d and ttnn.max_pool2d go through their output: all at once
  with the input height-sharded in L1 (``Conv2dL1FullSliceConfig``), or in DRAM over ``num_slices``
  bands of output rows (``Conv2dDRAMSliceHeight``) or columns (``...Width``), each in L1 on its own;
* :class:`BlockMemory`: what spc chooses per conv or pool block (memory/planner.py): its slicing
  and, for a conv, the activation block height in tiles (0: ttnn's default, the whole shard).
  ``--memory-config BLOCK=SPEC`` spells it ``l1``, ``l1:abh=4``, ``dram:height=2``, ``dram:width=4``.

The plan stores them in its calls (plan/program.py writes and reads their JSON in one place), the
call spellings (ttnn/calls) turn them into ttnn objects, the L1 model (memory/l1.py) sizes them.
Nothing parses them back from strings but the command line.
"""

from __future__ import annotations

import enum
import fnmatch

from msgspec import Struct

from spc.errors import SpcError


class BufferType(enum.Enum):
    DRAM = "dram"
    L1 = "l1"


class TensorLayout(enum.Enum):
    INTERLEAVED = "INTERLEAVED"
    HEIGHT_SHARDED = "HEIGHT_SHARDED"
    WIDTH_SHARDED = "WIDTH_SHARDED"
    BLOCK_SHARDED = "BLOCK_SHARDED"

    @property
    def ttnn(self) -> str:
        return f"ttnn.TensorMemoryLayout.{self.value}"


class MemoryConfig(Struct, frozen=True):
    """Where a tensor lives: ``ttnn.MemoryConfig(layout, buffer_type)``."""

    buffer: BufferType
    layout: TensorLayout = TensorLayout.INTERLEAVED

    @property
    def in_dram(self) -> bool:
        return self.buffer is BufferType.DRAM

    @property
    def key(self) -> str:
        """The plan's spelling (``DRAM_INTERLEAVED``), as ttnn names its ready-made configs."""
        return f"{self.buffer.name}_{self.layout.value}"

    @property
    def ttnn(self) -> str:
        if self.layout is not TensorLayout.INTERLEAVED:
            raise SpcError(f"no ready-made ttnn spelling for {self.key}: a sharded memory config needs a shard spec")
        return f"ttnn.{self.buffer.name}_MEMORY_CONFIG"

    @staticmethod
    def from_key(key: str) -> MemoryConfig:
        buffer, _, layout = key.partition("_")
        try:
            return MemoryConfig(BufferType[buffer], TensorLayout(layout))
        except (KeyError, ValueError):
            raise ValueError(f"memory config {key!r} is not one of DRAM_INTERLEAVED, L1_INTERLEAVED, ...") from None


DRAM_INTERLEAVED = MemoryConfig(BufferType.DRAM)
L1_INTERLEAVED = MemoryConfig(BufferType.L1)


class SliceType(enum.Enum):
    L1_FULL = "l1_full"
    DRAM_HEIGHT = "dram_height"
    DRAM_WIDTH = "dram_width"

    @property
    def dim(self) -> str:
        """The output dimension a DRAM slicing cuts ("height" or "width")."""
        return self.value.removeprefix("dram_")


class SliceConfig(Struct, frozen=True):
    """How a conv or pool runs: all at once in L1, or in DRAM slices by rows or columns."""

    type: SliceType = SliceType.L1_FULL
    num_slices: int = 1

    def __post_init__(self) -> None:
        if self.num_slices < 1 or (self.type is SliceType.L1_FULL and self.num_slices != 1):
            raise SpcError(f"slice configuration {self} is not valid")

    @property
    def in_dram(self) -> bool:
        return self.type is not SliceType.L1_FULL

    def to_json(self) -> dict[str, object]:
        if self.type is SliceType.L1_FULL:
            return {"type": self.type.value}
        return {"type": self.type.value, "num_slices": self.num_slices}

    @staticmethod
    def from_json(d: dict) -> SliceConfig:
        return SliceConfig(SliceType(d["type"]), int(d.get("num_slices", 1)))


L1_FULL = SliceConfig()
SLICE_DIMS = {"height": SliceType.DRAM_HEIGHT, "width": SliceType.DRAM_WIDTH}


class BlockMemory(Struct, frozen=True):
    """A conv or pool block's memory configuration: its slicing and activation block (tiles)."""

    slicing: SliceConfig = L1_FULL
    act_block_h: int = 0

    def __post_init__(self) -> None:
        if self.act_block_h < 0:
            raise SpcError(f"memory configuration {self} is not valid")

    @property
    def path(self) -> BufferType:
        return BufferType.DRAM if self.slicing.in_dram else BufferType.L1

    @property
    def slices(self) -> int:
        return self.slicing.num_slices

    @staticmethod
    def dram(dim: str, slices: int, act_block_h: int = 0) -> BlockMemory:
        return BlockMemory(SliceConfig(SLICE_DIMS[dim], slices), act_block_h)

    def spell(self) -> str:
        if self.slicing.in_dram:
            return f"dram:{self.slicing.type.dim}={self.slices}"
        return f"l1:abh={self.act_block_h}" if self.act_block_h else "l1"


def parse(spec: str) -> BlockMemory:
    """``l1``, ``l1:abh=4``, ``dram:height=2``, ``dram:width=4``: the command line's spelling."""
    s = spec.strip()
    try:
        path, _, rest = s.partition(":")
        if path == "l1" and (not rest or rest.startswith("abh=")):
            return BlockMemory(L1_FULL, int(rest.removeprefix("abh=")) if rest else 0)
        if path == "dram":
            dim, _, n = (rest or "height=1").partition("=")
            if dim in SLICE_DIMS:
                return BlockMemory.dram(dim, int(n or 1))
    except (ValueError, SpcError):
        pass
    raise SpcError(f"memory configuration {spec!r}: expected l1, l1:abh=N, dram:height=N or dram:width=N")


class MemoryOverrides(Struct, frozen=True):
    """``--memory-config`` rules, in order; the last matching rule wins."""

    rules: tuple[tuple[str, BlockMemory], ...] = ()

    @staticmethod
    def from_cli(items: tuple[str, ...] | list[str]) -> MemoryOverrides:
        rules = []
        for item in items:
            block, eq, spec = item.partition("=")
            if not eq or not block:
                raise SpcError(f"--memory-config {item!r}: expected BLOCK=SPEC, "
                               "e.g. 'encoder.conv_blocks.0.*=dram:height=4'")
            rules.append((block.strip(), parse(spec)))
        return MemoryOverrides(tuple(rules))

    def for_block(self, block: str) -> BlockMemory | None:
        found = None
        for pattern, mem in self.rules:
            if fnmatch.fnmatchcase(block, pattern):
                found = mem
        return found

    def unused(self, blocks: set[str]) -> list[str]:
        return [p for p, _ in self.rules if not any(fnmatch.fnmatchcase(b, p) for b in blocks)]

    def describe(self) -> list[list[str]]:
        return [[p, m.spell()] for p, m in self.rules]
