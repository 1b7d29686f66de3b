"""The backend interface: prepare a device program once, then run it per frame."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from spc.errors import SpcError
from spc.plan.program import Program


class PreparedProgram(Protocol):
    def run(self, inputs: dict[str, np.ndarray], read: list[str]) -> dict[str, np.ndarray]:
        """Run the device stage on device-layout inputs; return the named device tensors."""
        ...

    def close(self) -> None: ...


class Backend(Protocol):
    name: str

    def prepare(self, program: Program, weights: dict[str, np.ndarray]) -> PreparedProgram: ...


BACKENDS = ("emu", "ttnn-mock", "ttnn")


def get_backend(name: str, trace: bool = True, target: str | None = None) -> Backend:
    """``trace``: on a device, capture the program as a trace and replay it (ignored elsewhere).
    ``target``: the chip the plan is for; a device of another kind is refused (ignored by emu)."""
    if name == "emu":
        from spc.runtime.emu import EmuBackend

        return EmuBackend()
    if name in ("ttnn", "ttnn-mock"):
        from spc.runtime.ttnn_backend import TtnnBackend

        return TtnnBackend(mock=name == "ttnn-mock", trace=trace, target=target)
    raise SpcError(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})")
