"""--precision auto: the search's decisions on a synthetic scorer, and the real scorer once."""

from __future__ import annotations

from pathlib import Path

import pytest

from spc.ttnn.precision import PrecisionPlan
from spc.tuning.precision_search import Score, search_plans
from spc.tuning.thresholds import Thresholds

BLOCKS = ["enc.a", "enc.b", "head"]


def synthetic(sensitive: dict[str, int]):
    """Cost: phases + weight bytes per block. Accuracy: a block loses F1 when its fidelity has
    fewer phases than ``sensitive[block]``, or when its weights are block-float."""
    def score(plan: PrecisionPlan) -> Score:
        cost, f1 = 0.0, 0.98
        for b in BLOCKS:
            p = plan.for_block(b)
            cost += p.math_fidelity.phases + 2 * p.weights_dtype.bytes_per_value
            if p.math_fidelity.phases < sensitive.get(b, 1):
                f1 -= 0.05
            if p.weights_dtype.block_float_bits and b in sensitive:
                f1 -= 0.05
        return Score(f1=f1, descriptor_pcc=0.999, score_pcc=0.999, device_ms=cost, f1s=(f1, f1 + 0.01),
                     descriptor_pccs=(0.999, 0.999))
    return score


def test_keeps_sensitive_blocks_and_cheapens_the_rest() -> None:
    result = search_plans(BLOCKS, synthetic({"head": 4}), Thresholds(), log=lambda s: None)
    chosen = {b: result.plan.for_block(b) for b in BLOCKS}
    assert chosen["head"].math_fidelity.value == "HiFi4" and chosen["head"].weights_dtype.value == "bfloat16"
    assert chosen["enc.a"].weights_dtype.value == "bfloat4_b" and chosen["enc.a"].math_fidelity.value == "LoFi"
    assert result.score.f1 >= result.reference.f1 - 0.01 and result.score.device_ms < result.reference.device_ms


def test_takes_a_whole_preset_when_it_passes() -> None:
    result = search_plans(BLOCKS, synthetic({}), Thresholds(), log=lambda s: None)
    assert result.plan == PrecisionPlan("fast") and "fast" in result.message


def test_says_so_when_nothing_cheaper_passes() -> None:
    everything = {b: 4 for b in BLOCKS}
    result = search_plans(BLOCKS, synthetic(everything), Thresholds(), log=lambda s: None)
    assert result.plan == PrecisionPlan("accurate") and "no plan cheaper" in result.message


def test_gate_is_paired_per_input() -> None:
    ref = Score(0.95, 0.999, 0.999, 1.0, f1s=(0.90, 0.95, 0.99), descriptor_pccs=(0.999,) * 3)
    # the median holds (0.95) but one input drops 0.03 below its own reference: fails
    worse = Score(0.95, 0.999, 0.999, 0.5, f1s=(0.93, 0.95, 0.96), descriptor_pccs=(0.999,) * 3)
    assert worse.passes(ref.f1 - 0.01, 0.998) and not worse.within(ref, 0.01, 0.001)


def test_says_so_when_even_accurate_misses_absolute_thresholds() -> None:
    result = search_plans(BLOCKS, synthetic({}), Thresholds(min_f1=0.99), log=lambda s: None)
    assert result.plan == PrecisionPlan("accurate") and "even `accurate` misses" in result.message


def test_real_scorer_on_the_small_export(small_onnx: Path) -> None:
    from spc.compiler import Lowering
    from spc.frontend.onnx_import import import_onnx
    from spc.passes.manager import PassContext, PassManager, PipelineOptions
    from spc.passes.pipeline import default_pipeline
    from spc.ttnn.targets import get_target
    from spc.tuning.precision_search import CALIBRATION_DIR, Evaluator, calibration_inputs

    g = import_onnx(small_onnx)
    pm = PassManager(default_pipeline())
    pm.run(g, PassContext())
    inputs = calibration_inputs(CALIBRATION_DIR, [1, 3, 120, 160])
    assert len(inputs) == 3
    evaluate = Evaluator(g, small_onnx, inputs[:1],
                         lambda plan: pm.rerun("choose-precision", g, PassContext(PipelineOptions(precision=plan)),
                                               record=False),
                         Lowering(small_onnx, get_target("p150")).trial)
    accurate, fast = evaluate(PrecisionPlan("accurate")), evaluate(PrecisionPlan("fast"))
    assert accurate.descriptor_pcc > 0.99 and accurate.score_pcc > 0.99
    assert accurate.f1 > 0.9  # the trial plan has the graph's output roles: its keypoints are compared
    assert fast.device_ms < accurate.device_ms
    assert fast.score_pcc < accurate.score_pcc  # the demo weights do not survive LoFi + bfp8
    with pytest.raises(Exception, match="not a preset"):
        PrecisionPlan("auto")


def test_trials_are_lowered_and_planned_as_the_compile_does(small_onnx: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A trial's plan is the compile's: its forced memory, read-back, capacity and kernel options."""
    import spc.tuning.precision_search as precision_search
    from spc.compiler import AutoPrecision, compile_onnx
    from spc.memory.residency import predicted_ms
    from spc.plan.io import read_plan
    from spc.ttnn.memory import MemoryOverrides
    from spc.tuning.precision_search import SearchResult

    trials = []

    def search(g, src, choose, lower_and_plan, calib=None, thresholds=None, log=print):  # type: ignore[no-untyped-def]
        program, _, records = lower_and_plan(g)  # under `accurate`, as the compile then writes it
        trials.append((program, predicted_ms(records)))
        score = Score(1.0, 1.0, 1.0, 0.0)
        return SearchResult(PrecisionPlan("accurate"), score, score, Thresholds())

    monkeypatch.setattr(precision_search, "search", search)
    out = tmp_path / "p.ttplan"
    memory = MemoryOverrides.from_cli(["encoder.conv_blocks.0.*=dram:height=2"])
    compile_onnx(small_onnx, out, auto=AutoPrecision(log=lambda s: None), memory=memory, keypoint_capacity=64,
                 kernels=True)
    ((trial, ms),), written = trials, read_plan(out)
    assert trial.to_json() == written.program.to_json()
    assert round(ms, 4) == written.manifest["predicted_device_ms"]
