"""What a compile is asked for: one record from `spc compile` (cli.py) and ``spc.compile``
(api.py) through the compiler to the plan's manifest (its ``options``).

How a compile is watched (``--dump-dir``, ``--print-ir-after-all``, ``--stop-after``, ``--explain``)
is not here: it changes what is printed and dumped, never the plan.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from msgspec import Struct, field

from spc.ttnn.memory import MemoryOverrides
from spc.ttnn.precision import PrecisionPlan
from spc.ttnn.targets import DEFAULT_TARGET
from spc.tuning.thresholds import Thresholds


def _thresholds() -> Thresholds:
    return Thresholds()


class AutoPrecision(Struct):
    """``--precision auto``: where the calibration inputs are and what must hold."""

    calib: Path | None = None
    thresholds: Thresholds = field(default_factory=_thresholds)
    log: Callable[[str], None] = print


class CompileOptions(Struct, frozen=True):
    """Every option that changes the plan, with `spc compile`'s defaults."""

    target: str = DEFAULT_TARGET  # --target (ttnn/targets.py)
    precision: PrecisionPlan = field(default_factory=PrecisionPlan)  # --precision / --precision-config
    auto: AutoPrecision | None = None  # --precision auto: searched per block first
    memory: MemoryOverrides = field(default_factory=MemoryOverrides)  # --memory-config
    nms_single_pass: bool = False  # --nms-single-pass (changes results)
    dense: bool = False  # --dense: the maps read back whole
    keypoint_capacity: int | None = None  # --keypoint-capacity
    kernels: bool = False  # --kernels on
    input_shape: list[int] | None = None  # --input-shape
    batch: int = 1  # --batch (a size; --batch auto chooses one: compiler.choose_batch)
    verify: bool = True  # not --no-verify (validation/translation.py)
    disabled_passes: tuple[str, ...] = ()  # --disable-pass (each lowered op by op where it would have run)

    def manifest(self, precision: PrecisionPlan | None = None) -> dict[str, Any]:
        """The manifest's ``options``, with the ``precision`` chosen (``--precision auto``'s search)."""
        out = {"input_shape": self.input_shape, "batch": self.batch, "nms_single_pass": self.nms_single_pass,
               "precision": (precision or self.precision).describe(), "memory_config": self.memory.describe(),
               "dense": self.dense, "keypoint_capacity": self.keypoint_capacity, "kernels": self.kernels}
        if self.disabled_passes:  # only when given: the plans of every other compile stay as they were
            out["disabled_passes"] = list(self.disabled_passes)
        return out
