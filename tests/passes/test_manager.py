"""The pass manager: order, verification, re-runs and stages recorded, instruments, frozen options."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from spc.passes.choose_precision import ChoosePrecision
from spc.passes.manager import (
    DumpDir,
    Pass,
    PassContext,
    PassError,
    PassManager,
    PassResult,
    PipelineOptions,
    StageResult,
)
from spc.ttnn.formats import MathFidelity
from spc.ttnn.precision import PrecisionPlan
from tests.conftest import ir

NET = """graph @t(%x: f32[1,2,8,8]) {
  %w: f32[4,2,3,3] = const @"w"
  %e: f32[1,4,8,8] = spc.Conv2d(%x, %w) {activation = "relu", dilations = [1, 1], group = 1, kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [1, 1]} #enc @device
  return %e
}
"""


def graph():
    return ir(NET, w=np.ones((4, 2, 3, 3), np.float32))


class Choose(ChoosePrecision):
    requires = ()  # the graph comes placed


class Nothing(Pass):
    name = "nothing"

    def run(self, g, ctx) -> PassResult:
        return PassResult(False)


def test_options_are_frozen() -> None:
    with pytest.raises(AttributeError, match="immutable"):
        PipelineOptions().nms_single_pass = True  # type: ignore[misc]


def test_order_is_enforced() -> None:
    with pytest.raises(PassError, match="choose-precision requires partition-host-device"):
        PassManager([ChoosePrecision()]).run(graph(), PassContext())


def test_a_rerun_is_verified_and_recorded_and_a_stage_is_dumped(tmp_path: Path) -> None:
    g = graph()
    pm = PassManager([Nothing(), Choose()], [DumpDir(tmp_path)])
    pm.run(g, PassContext())
    assert g.nodes[0].precision.math_fidelity is MathFidelity.HIFI4
    pm.rerun("choose-precision", g, PassContext(PipelineOptions(precision=PrecisionPlan("fast"))), record=False)
    assert len(pm.records) == 2 and g.nodes[0].precision.math_fidelity is MathFidelity.LOFI
    pm.rerun("choose-precision", g, PassContext(PipelineOptions(precision=PrecisionPlan("balanced"))))
    assert [r.name for r in pm.records] == ["nothing", "choose-precision", "choose-precision"]
    assert '#enc @device <"w" w:float32 HiFi2' in (tmp_path / "03-choose-precision.ir").read_text()
    pm.stage("lowered-thing", g, lambda: StageResult({"calls": 1}, {"a": 1}, {"a": 1, "b": 1}, "the result\n"))
    pm.close(g)
    assert (tmp_path / "04-lowered-thing.txt").read_text() == "the result\n"
    summary = (tmp_path / "summary.txt").read_text()
    assert " 4  lowered-thing" in summary and "b 0->1" in summary and "[calls=1]" in summary


def test_a_pass_that_has_not_run_cannot_run_again() -> None:
    pm = PassManager([Nothing(), Choose()], stop_after="nothing")
    g = graph()
    pm.run(g, PassContext())
    with pytest.raises(PassError, match="has not run"):
        pm.rerun("choose-precision", g, PassContext())
