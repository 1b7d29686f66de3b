"""Tenstorrent targets as data: what the cost model and (later) the memory planner know of a chip.

Figures from shared/reference/tenstorrent-facts.md (tt-metal tech_reports/ and
docs.tenstorrent.com). A target is a kind of chip and how many of them: a plan's device program is
for one chip (its L1, its grid) and b images; on a target of N chips (``chips``, laid out as the
ttnn mesh ``mesh``) the runtime runs that program once on every chip, each on its own b images
(data parallelism: docs/ttnn.md). An n300 is used as a single chip here.
"""

from __future__ import annotations

from msgspec import Struct

from spc.errors import SpcError

# the runtime opens the device with this much L1_SMALL (conv and pool config tensors); measured
# on the mock p150: 8 KiB fails in the encoder, 16 KiB passes
L1_SMALL_BYTES = 32768


class Target(Struct, frozen=True):
    """A chip (or a mesh of them) as the compiler models it: cores, clock, L1, DRAM."""

    name: str
    grid: tuple[int, int]  # compute cores (columns, rows) available to programs
    clock_hz: float
    l1_bytes: int  # a worker core's L1 (its top address)
    cb_base: int  # where circular buffers start; below it, firmware and reserved space
    dram_bytes_per_s: float  # measured, bank-adjacent readers
    dram_banks: int
    flop_per_cycle_per_core: int = 4096  # matrix engine, one fidelity phase (8x16 x 16x16)
    arch: str = "blackhole"  # what ttnn's device.arch() names the chip (ttnn.Arch member, lower case)
    # one chip's DRAM (shared/reference/tenstorrent-facts.md: p150 32 GB, n150 12 GB, n300 24 GB = 2 x 12)
    dram_bytes: int = 32 << 30
    chips: int = 1  # chips of this kind on the host, each running the whole program on its own images
    mesh: tuple[int, int] = (1, 1)  # the ttnn mesh the chips form (rows, columns): rows * columns == chips

    def __post_init__(self) -> None:
        assert self.mesh[0] * self.mesh[1] == self.chips, (self.name, self.mesh, self.chips)

    @property
    def cores(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def l1_top(self) -> int:
        """L1 tensors are allocated down from here (L1_SMALL sits above)."""
        return self.l1_bytes - L1_SMALL_BYTES

    @property
    def l1_budget_bytes(self) -> int:
        """Circular buffers (up from cb_base) and L1 tensors (down from l1_top) share this."""
        return self.l1_top - self.cb_base

    @property
    def peak_flops_per_phase(self) -> float:
        return self.flop_per_cycle_per_core * self.cores * self.clock_hz


TARGETS = {
    # 11x10 with current firmware (one column for dispatch); the mock allocator reports the L1 sizes
    # L1 top and first CB address as the mock p150's allocator reports them (reports.get_device_info)
    "p150": Target("p150", (11, 10), 1.35e9, 1572864, 111744, 500e9, 8),
    # many Blackhole chips on one host, each one modelled as a p150 (its L1, grid and DRAM): a p300
    # board's two chips, and four or eight p150 boards linked by ethernet. The mock opens them from
    # runtime/ttnn_mock/*_cluster_desc.yaml (tt-umd's examples, harvested as a p150)
    "p300": Target("p300", (11, 10), 1.35e9, 1572864, 111744, 500e9, 8, chips=2, mesh=(1, 2)),
    "4xp150": Target("4xp150", (11, 10), 1.35e9, 1572864, 111744, 500e9, 8, chips=4, mesh=(1, 4)),
    "8xp150": Target("8xp150", (11, 10), 1.35e9, 1572864, 111744, 500e9, 8, chips=8, mesh=(1, 8)),
    # Wormhole: 1464 KiB of L1 per core; the reserved base is assumed to be Blackhole's (not
    # measured: the mock device here is a p150)
    "n150": Target("n150", (8, 8), 1.0e9, 1499136, 111744, 288e9, 12, arch="wormhole_b0", dram_bytes=12 << 30),
    "n300": Target("n300", (8, 8), 1.0e9, 1499136, 111744, 288e9, 12, arch="wormhole_b0", dram_bytes=12 << 30),
}
# what `spc compile` builds for, and what run/check/bench expect, unless --target says otherwise
DEFAULT_TARGET = "p150"


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise SpcError(f"--target {name}: unknown target (known: {', '.join(TARGETS)})") from None
