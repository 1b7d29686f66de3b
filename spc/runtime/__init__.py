"""Runtime: load a plan, run its host and device stages on a backend (emu, ttnn)."""
