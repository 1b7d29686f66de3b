"""One core's L1 as ttnn's allocator manages it, to find where circular buffers must stop.

L1 tensors are placed top-down in the allocator's bank by best fit (tt-metal FreeListOpt; the
allocator tech report); circular buffers grow up from ``target.cb_base``. ttnn refuses a program
whose buffers end above the lowest live tensor (program.cpp: "circular buffers ... clash with L1
buffers"). Freed tensors leave holes, so the lowest address, not the sum, is what counts.
"""

from __future__ import annotations

from spc.ttnn.targets import Target

ALIGN = 16


class Ledger:
    def __init__(self, target: Target) -> None:
        self.top = target.l1_top
        self.floor = target.cb_base
        self.cb_base = target.cb_base
        self.blocks: dict[str, tuple[int, int]] = {}  # name -> (address, size)

    def _free_ranges(self) -> list[tuple[int, int]]:
        taken = sorted(self.blocks.values())
        out, at = [], self.floor
        for addr, size in taken:
            if addr > at:
                out.append((at, addr - at))
            at = max(at, addr + size)
        if at < self.top:
            out.append((at, self.top - at))
        return out

    def alloc(self, name: str, size: int) -> bool:
        """Place ``size`` bytes; False when no hole holds them (ttnn: out of L1)."""
        if size <= 0:
            return True
        size = -(-size // ALIGN) * ALIGN
        fits = [(s, a) for a, s in self._free_ranges() if s >= size]
        if not fits:
            return False
        s, a = min(fits, key=lambda f: (f[0], -f[1]))  # best fit; the higher hole on a tie
        self.blocks[name] = (a + s - size, size)
        return True

    def free(self, name: str) -> None:
        self.blocks.pop(name, None)

    def copy(self) -> Ledger:
        other = Ledger.__new__(Ledger)
        other.top, other.floor, other.cb_base, other.blocks = self.top, self.floor, self.cb_base, dict(self.blocks)
        return other

    def lowest(self) -> int:
        return min((a for a, _ in self.blocks.values()), default=self.top)

    def cb_room(self) -> int:
        """Bytes of circular buffers a program may have now."""
        return self.lowest() - self.cb_base

    def in_use(self) -> int:
        return sum(s for _, s in self.blocks.values())
