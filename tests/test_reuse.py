"""Precision-search trials share device tensors (tuning/reuse.py): a trial that starts from a
kept run's tensors makes, bit for bit, what a full run of the same trial program makes."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
from msgspec.structs import replace

from spc.ttnn.formats import DataFormat, MathFidelity
from spc.ttnn.precision import PrecisionPlan


@pytest.fixture(scope="module")
def trials(small_onnx: Path):  # type: ignore[no-untyped-def]
    """plan -> (program, tensors) as a precision-search trial lowers and plans it."""
    from spc.compiler import ProgramBuilder
    from spc.frontend.onnx_import import import_onnx
    from spc.passes.manager import PassContext, PassManager, PipelineOptions
    from spc.passes.pipeline import default_pipeline
    from spc.ttnn.targets import get_target

    g = import_onnx(small_onnx)
    pm = PassManager(default_pipeline())
    pm.run(g, PassContext())
    lowering = ProgramBuilder(small_onnx, get_target("p150"))

    def make(plan: PrecisionPlan):  # type: ignore[no-untyped-def]
        pm.rerun("choose-precision", g, PassContext(PipelineOptions(precision=plan)), record=False)
        program, tensors, _ = lowering.trial(g)
        return program, tensors

    return make


def _device_inputs(program, tensors) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    from spc.runtime.host import run_host
    from spc.tuning.precision_search import CALIBRATION_DIR, calibration_inputs

    x = calibration_inputs(CALIBRATION_DIR, [int(d) for d in program.inputs[0].shape], program.image)[0]
    env = {program.inputs[0].name: x.astype(np.float32)}
    run_host(program.host_pre, env, tensors)
    return {t.name: t.layout.to_device(env[t.name]) for t in program.device_inputs}


@pytest.mark.parametrize("block", ["encoder.conv_blocks.2.conv_a", "descriptor_decoder.conv_descriptor_a"])
def test_a_trial_from_kept_tensors_is_bit_identical_to_a_full_run(trials, block: str) -> None:  # type: ignore[no-untyped-def]
    from spc.runtime.emu import EmuProgram, PreparedOnce
    from spc.tuning.reuse import ProgramKeys, ReusingDevice

    base, base_tensors = trials(PrecisionPlan("accurate"))
    plan = PrecisionPlan("accurate").with_rule(block, weights_dtype=DataFormat.BFLOAT8_B,
                                               math_fidelity=MathFidelity.HIFI2)
    program, tensors = trials(plan)
    dev_in = _device_inputs(program, tensors)
    every = [name for op in program.device_ops for name in op.results]

    kept: dict[bytes, object] = {}
    with PreparedOnce() as prepared:  # the trial's unchanged weights are the base's tensors
        ReusingDevice(EmuProgram(base, base_tensors), ProgramKeys(base, base_tensors), {}, kept).run(dev_in, [])
        reusing = ReusingDevice(EmuProgram(program, tensors), ProgramKeys(program, tensors), kept)
    distinct = len({name for op in base.device_ops for name in op.weights.values()})
    assert prepared.prepared == distinct + sum(len(op.weights) for op in program.device_ops if op.block == block)
    got = reusing.run(dev_in, every)
    want = EmuProgram(program, tensors).run(dev_in, every)
    for name in every:
        assert got[name].dtype == want[name].dtype and np.array_equal(got[name], want[name], equal_nan=True), name

    first = next(i for i, (a, b) in enumerate(zip(base.device_ops, program.device_ops))
                 if a.to_json() != b.to_json())
    assert program.device_ops[first].block == block
    assert first <= reusing.calls - reusing.calls_run < reusing.calls  # the prefix at least was shared
    if block.startswith("descriptor"):  # the detector head does not read the descriptor head: shared too
        assert reusing.calls - reusing.calls_run > first


def test_a_call_the_planner_rewrote_is_not_shared(trials) -> None:  # type: ignore[no-untyped-def]
    """Same precision, but one early call's memory choice differs: it and what reads it run again."""
    from spc.tuning.reuse import ProgramKeys

    program, tensors = trials(PrecisionPlan("accurate"))
    rewritten = copy.deepcopy(program)
    op = rewritten.device_ops[1]
    op.args["conv_config"] = replace(op.args["conv_config"], act_block_h_override=64)
    dev_in = _device_inputs(program, tensors)
    a, b = ProgramKeys(program, tensors).of(dev_in), ProgramKeys(rewritten, tensors).of(dev_in)
    assert a[0] == b[0] and all(x != y for x, y in zip(a[1:], b[1:]))
    renamed = copy.deepcopy(program)  # names are not what a call computes
    renamed.device_ops[0].output = "renamed"
    renamed.device_ops[1].inputs = ["renamed"]
    assert ProgramKeys(renamed, tensors).of(dev_in) == a
    other = {k: v + 1 if k == program.device_ops[3].weights["weight_tensor"] else v for k, v in tensors.items()}
    c = ProgramKeys(program, other).of(dev_in)  # a weight's bytes are
    assert c[:3] == a[:3] and c[3] != a[3]


def test_weights_are_prepared_once_while_entered(trials) -> None:  # type: ignore[no-untyped-def]
    import spc.emulator.device as emu_ops
    import spc.runtime.emu as emu

    program, tensors = trials(PrecisionPlan("accurate"))
    distinct = len({name for op in program.device_ops for name in op.weights.values()})
    with emu.PreparedOnce() as prepared:
        emu.EmuProgram(program, tensors)
        emu.EmuProgram(program, tensors)
    assert prepared.prepared == distinct  # the second program took the first one's
    assert emu.prepare_weight is emu_ops.prepare_weight  # and outside, nothing is shared
