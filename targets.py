"""Tenstorrent targets as data: what the cost model and (later) the memory planner know of a chip.

Figures from shared/reference/tenstorrent-facts.md (tt-metal tech_reports/ and
docs.tenstorrent.com). A target is one chip: an n300 is used as a single chip here.
"""

from __future__ import annotations

from dataclasses import dataclass

from spc.errors import SpcError


@dataclass(frozen=True)
class Target:
    name: str
    grid: tuple[int, int]  # compute cores (columns, rows) available to programs
    clock_hz: float
    l1_bank_bytes: int  # allocatable L1 per core
    l1_cb_limit_bytes: int  # largest circular-buffer region per core
    dram_bytes_per_s: float  # measured, bank-adjacent readers
    dram_banks: int
    flop_per_cycle_per_core: int = 4096  # matrix engine, one fidelity phase (8x16 x 16x16)

    @property
    def cores(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def peak_flops_per_phase(self) -> float:
        return self.flop_per_cycle_per_core * self.cores * self.clock_hz


TARGETS = {
    # 11x10 with current firmware (one column for dispatch); the mock allocator reports the L1 sizes
    "p150": Target("p150", (11, 10), 1.35e9, 1428352, 1572864, 500e9, 8),
    # "about 1.5 MB" of L1 per core: the same sizes are assumed until measured on a Wormhole allocator
    "n150": Target("n150", (8, 8), 1.0e9, 1428352, 1572864, 288e9, 12),
    "n300": Target("n300", (8, 8), 1.0e9, 1428352, 1572864, 288e9, 12),
}


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise SpcError(f"--target {name}: unknown target (known: {', '.join(TARGETS)})") from None
