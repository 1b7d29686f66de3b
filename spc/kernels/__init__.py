"""Fused device kernels that replace chains of stock ttnn calls, each written three ways:

* a TT-Lang kernel (``ttl``), simulated in the test suite by tt-lang-sim and compiled by tt-lang
  for hardware;
* a reference (torch), which the ``emu`` backend runs: bit-exact with the TT-Lang kernel
  (tested in the simulator) and with the composed ttnn calls it replaces (tested in the emulator);
* the composed ttnn calls, which the lowering records beside the kernel so that a runtime
  without tt-lang runs those instead (runtime/ttnn_backend.py says so once).

``spc compile --kernels on`` lets the lowering use them (lowering/lower.py); `spc inspect` shows
each kernel call.
"""

from __future__ import annotations

from spc.kernels import keypoints, nms  # noqa: F401  (they register their kernels)
from spc.kernels.registry import KERNELS, Kernel

__all__ = ["KERNELS", "Kernel"]
