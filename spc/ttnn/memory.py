"""The memory configurations a block can take, spelled as in ``--memory-config`` and the IR.

A convolution or a max pool runs one of two ways in ttnn 0.81.1:

* ``l1``: its input height-sharded in L1, halo and circular buffers beside it, output
  height-sharded in L1 (``Conv2dL1FullSliceConfig``); for a conv, ``act_block_h`` (tiles, 0 =
  ttnn's default of the whole shard) bounds the activation buffers;
* ``dram``: input and output in DRAM, the op run over ``slices`` bands of output rows
  (``Conv2dDRAMSliceHeight``) or columns (``...Width``), each band in L1 on its own.

Spelling (``--memory-config BLOCK=SPEC``, blocks by glob): ``l1``, ``l1:abh=4``, ``dram:height=2``,
``dram:width=4``.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from spc.errors import SpcError

SLICE_DIMS = ("height", "width")


@dataclass(frozen=True)
class MemoryConfig:
    path: str = "l1"  # "l1" | "dram"
    act_block_h: int = 0  # tiles; 0 = ttnn's default (the whole per-core shard)
    slice_dim: str = "height"
    slices: int = 1  # dram path only

    def __post_init__(self) -> None:
        if self.path not in ("l1", "dram"):
            raise SpcError(f"memory path {self.path!r} is not l1 or dram")
        if self.slice_dim not in SLICE_DIMS or self.slices < 1 or self.act_block_h < 0:
            raise SpcError(f"memory configuration {self} is not valid")

    @property
    def slice_config(self) -> dict[str, object]:
        """As the lowered program records it (lowering/ttnn_calls.py spells it for ttnn)."""
        if self.path == "l1":
            return {"type": "l1_full"}
        return {"type": f"dram_{self.slice_dim}", "num_slices": self.slices}

    @staticmethod
    def from_slice_config(s: dict | None, act_block_h_override: int = 0) -> MemoryConfig:
        s = s or {"type": "l1_full"}
        if s["type"] == "l1_full":
            return MemoryConfig("l1", act_block_h_override // 32)
        return MemoryConfig("dram", act_block_h_override // 32, s["type"].removeprefix("dram_"), int(s["num_slices"]))

    def spell(self) -> str:
        if self.path == "dram":
            return f"dram:{self.slice_dim}={self.slices}"
        return f"l1:abh={self.act_block_h}" if self.act_block_h else "l1"


def parse(spec: str) -> MemoryConfig:
    """``l1``, ``l1:abh=4``, ``dram:height=2``, ``dram:width=4``."""
    s = spec.strip()
    try:
        path, _, rest = s.partition(":")
        if path == "l1" and (not rest or rest.startswith("abh=")):
            return MemoryConfig("l1", int(rest.removeprefix("abh=")) if rest else 0)
        if path == "dram":
            dim, _, n = (rest or "height=1").partition("=")
            return MemoryConfig("dram", 0, dim, int(n or 1))
    except (ValueError, SpcError):
        pass
    raise SpcError(f"memory configuration {spec!r}: expected l1, l1:abh=N, dram:height=N or dram:width=N")


@dataclass(frozen=True)
class MemoryOverrides:
    """``--memory-config`` rules, in order; the last matching rule wins."""

    rules: tuple[tuple[str, MemoryConfig], ...] = ()

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

    def for_block(self, block: str) -> MemoryConfig | None:
        found = None
        for pattern, mem in self.rules:
            if fnmatch.fnmatchcase(block, pattern):
                found = mem
        return found

    def unused(self, blocks: set[str]) -> list[str]:
        return [p for p, _ in self.rules if not any(fnmatch.fnmatchcase(b, p) for b in blocks)]

    def describe(self) -> list[list[str]]:
        return [[p, m.spell()] for p, m in self.rules]
