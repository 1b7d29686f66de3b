"""The emulated device (torch on the CPU): the device's numerics (``numerics.py``: storage
rounding, the matrix engine's fidelity phases and accumulation), each ttnn call as the device
computes it (``device.py``, what the ``emu`` backend runs: runtime/emu.py), and the TT-Lang
kernels under tt-lang-sim (``kernel_sim.py``, the test suite's). Below the runtime, beside the
target's types (ttnn/), which it reads and does not extend."""
