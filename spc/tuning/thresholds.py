"""What an automatic precision choice must keep (no torch needed to describe it)."""

from __future__ import annotations

from msgspec import Struct


class Thresholds(Struct, frozen=True):
    """Relative to the `accurate` plan on the calibration inputs, unless absolute values are given."""

    f1_drop: float = 0.01
    desc_pcc_drop: float = 0.001
    min_f1: float | None = None
    min_desc_pcc: float | None = None
