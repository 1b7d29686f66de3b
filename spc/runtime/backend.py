"""The backend interface: prepare a device program once, then run it per frame."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from spc.errors import SpcError
from spc.plan.program import Program
from spc.ttnn.targets import TARGETS


class PreparedProgram(Protocol):
    def run(self, inputs: dict[str, np.ndarray], read: list[str]) -> dict[str, np.ndarray]:
        """Run the device stage on device-layout inputs; return the named device tensors."""
        ...

    def close(self) -> None: ...


class Backend(Protocol):
    name: str

    def prepare(self, program: Program, weights: dict[str, np.ndarray]) -> PreparedProgram: ...


BACKENDS = ("emu", "ttnn-mock", "ttnn")


class _EachChipProgram:
    """A one-chip program run on each chip's inputs in turn: the inputs are the chips' stacked on
    axis 0, and so are the results (as a mesh of N chips takes and returns them)."""

    def __init__(self, program: PreparedProgram, chips: int) -> None:
        self.program = program
        self.chips = chips
        self.seconds: dict[str, float] = {}

    def run(self, inputs: dict[str, np.ndarray], read: list[str]) -> dict[str, np.ndarray]:
        split = {name: np.split(a, self.chips) for name, a in inputs.items()}
        parts = []
        seconds: dict[str, float] = {}
        for k in range(self.chips):
            parts.append(self.program.run({name: chip[k] for name, chip in split.items()}, read))
            for phase, s in getattr(self.program, "seconds", {}).items():
                seconds[phase] = seconds.get(phase, 0.0) + s
        self.seconds = seconds
        return {name: np.concatenate([part[name] for part in parts]) for name in read}

    def close(self) -> None:
        self.program.close()


class EachChip:
    """A backend of one chip (the emulator) for a target of several: the same program on every
    chip's part of the inputs, one chip after another."""

    def __init__(self, backend: Backend, chips: int) -> None:
        self.backend = backend
        self.chips = chips
        self.name = backend.name

    def prepare(self, program: Program, weights: dict[str, np.ndarray]) -> PreparedProgram:
        return _EachChipProgram(self.backend.prepare(program, weights), self.chips)


def get_backend(name: str, trace: bool = True, target: str | None = None) -> Backend:
    """``trace``: on a device, capture the program as a trace and replay it (ignored elsewhere).
    ``target``: the chip(s) the plan is for; a device of another kind is refused (emu: only how many chips,
    each emulated in turn)."""
    if name == "emu":
        from spc.runtime.emu import EmuBackend  # torch (~1 s): the ttnn backends need none

        chips = TARGETS[target].chips if target in TARGETS else 1
        return EmuBackend() if chips == 1 else EachChip(EmuBackend(), chips)
    if name in ("ttnn", "ttnn-mock"):
        from spc.runtime.ttnn_backend import TtnnBackend  # ~12 ms: the emulator needs none of it

        return TtnnBackend(mock=name == "ttnn-mock", trace=trace, target=target)
    raise SpcError(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})")
