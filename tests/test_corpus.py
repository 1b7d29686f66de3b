"""Every export of the corpus (tests/corpus, docs/corpus.md) compiles, runs on the emu backend
close to onnxruntime, puts its multiply-adds on the device and runs on the mock p150.

120x160 here, so that the suite stays short; the 480x640 figures are scripts/corpus_report.py's.
At this size a map holds 300 pixels per keypoint cell row, so F1 over the top 500 reaches into
scores near zero, where bf16 reorders ties: the bars are lower than at 480x640.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from spc.compiler import compile_onnx
from spc.plan.io import read_plan
from spc.plan.program import DEFAULT_IMAGE
from spc.runtime.extraction import STANDARD
from spc.runtime.inputs import load_input
from spc.tuning.comparison import Comparison
from tests.corpus.exports import CORPUS, cached

SIZE = (120, 160)
ROOT = Path(__file__).resolve().parents[1]
# what each export must be recognised as (the fused ops in its final graph)
EXPECTED = {
    "hf": {"spc.ScoreFold", "spc.Nms", "spc.L2Norm", "spc.Keypoints"},
    "fixed_k": {"spc.ScoreFold", "spc.Nms", "spc.L2Norm", "spc.Keypoints"},
    "dense": {"spc.L2Norm"},
}


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path, object]]:
    folder = tmp_path_factory.mktemp("corpus")
    out = {}
    for name, export in CORPUS.items():
        src = cached(name, *SIZE)
        plan = folder / f"{name}.ttplan"
        shape = [1, export.channels, *SIZE] if export.dynamic_axes else None
        result = compile_onnx(src, plan, input_shape=shape)
        out[name] = (src, plan, result)
    return out


def _kind(name: str) -> str:
    return "fixed_k" if name.startswith("fixed_k") else "hf" if name.startswith("hf") else "dense"


@pytest.mark.parametrize("name", list(CORPUS))
def test_export_compiles_and_matches_onnxruntime(name: str, plans, images: dict[str, Path]) -> None:
    src, plan_path, result = plans[name]
    ops = {n.op.name for n in result.graph.nodes}
    assert EXPECTED[_kind(name)] <= ops, result.recognised
    device, host = result.macs
    assert device / (device + host) >= 0.99
    plan = read_plan(plan_path)
    shape = [int(d) for d in plan.program.inputs[0].shape]
    report = Comparison(src, {r: t.name for r, t in plan.program.probes.items()},
                        [load_input(images["astronaut"], shape, plan.program.image)]).reports(plan)[0]
    assert report.f1 >= 0.93 and report.keypoints_from, report
    assert report.score_pcc >= 0.997 and report.descriptor_pcc >= 0.99, report
    if _kind(name) != "dense":  # the keypoint outputs carry their roles, whatever they are called
        assert {r["role"] for r in plan.program.roles.values()} >= {"keypoints", "scores", "descriptors"}


def test_the_raw_heads_are_compared_through_the_standard_extraction(plans, images: dict[str, Path]) -> None:
    src, plan_path, _ = plans["magicleap_legacy_op11"]
    plan = read_plan(plan_path)
    assert {r["role"] for r in plan.program.roles.values()} == {"score_logits", "descriptor_map"}
    report = Comparison(src, {}, [load_input(images["camera"], [1, 1, *SIZE], plan.program.image)]).reports(plan)[0]
    assert report.keypoints_from == STANDARD and not math.isnan(report.f1)


def test_fixed_k_keypoints_read_back_compactly(plans) -> None:
    """The fixed-K extractor is recognised in its own layout ((x, y) int64 pixels without batch;
    (y, x) / (H, W) with (D, N) descriptors) and its top-K is computed on the device."""
    specs = {}
    for name in ("fixed_k_op20", "fixed_k_op18_variant"):
        plan = read_plan(plans[name][1])
        assert [h.op for h in plan.program.host_post] == ["spc.Unpack", "spc.KeypointsFromTopK"]
        specs[name] = sorted(r["spec"] for r in plan.program.roles.values())
    assert specs["fixed_k_op20"] == ["descriptors nd flat", "keypoints xy pixel i64 flat", "scores flat"]
    assert specs["fixed_k_op18_variant"] == ["descriptors dn batch", "keypoints yx norm f32 batch", "scores batch"]


def test_the_legacy_spelling_compiles_to_the_dynamo_export_s_device_program(plans) -> None:
    """torch.onnx's legacy (TorchScript) exporter: Constant nodes, Shape/Gather/Concat chains,
    ConstantOfShape, Range, ScatterND, Split, Flatten, Gather for squeezes."""
    import onnx

    src, plan_path, result = plans["hf_legacy"]
    assert {"Constant", "ConstantOfShape", "Range", "ScatterND", "Split", "Flatten"} <= \
        {n.op_type for n in onnx.load(str(src)).graph.node}
    legacy = sorted(n.op.name for n in result.graph.nodes if n.placement.value == "device")
    dynamo = sorted(n.op.name for n in plans["hf_dynamo_named"][2].graph.nodes if n.placement.value == "device")
    assert legacy == dynamo and len(legacy) == 18 and "iterations = 2" in str(result.graph)
    # the fused ops kept the legacy exporter's value names, so onnxruntime can be asked for them
    assert len(read_plan(plan_path).program.probes) == 3


def test_superpoint_open_runs_its_batch_norms_on_the_device(plans) -> None:
    _, _, result = plans["superpoint_open_op17"]
    bn = [n for n in result.graph.nodes if n.op.name == "onnx.BatchNormalization"]
    assert len(bn) == 10 and all(n.placement.value == "device" for n in bn)


def test_every_corpus_plan_runs_on_the_mock_p150(plans, ttnn_python: str) -> None:
    paths = [str(p) for _, p, _ in plans.values()]
    done = subprocess.run([ttnn_python, "-m", "spc.runtime.ttnn_mock.check_plans", *paths], capture_output=True,
                          text=True, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert done.stdout.count("ok ") == len(paths)


def test_outputs_are_never_looked_up_by_name(plans, images: dict[str, Path], tmp_path: Path) -> None:
    """The unnamed HF export (outputs div_3, select_scatter_...) runs and reports its keypoints."""
    from spc.cli import main

    _, plan, _ = plans["hf_dynamo_unnamed"]
    x = load_input(images["camera"], [1, 1, *SIZE], DEFAULT_IMAGE)
    np.save(tmp_path / "x.npy", x)
    with pytest.raises(SystemExit) as done:
        main(["run", str(plan), str(tmp_path / "x.npy"), "-o", str(tmp_path / "out.npz")], standalone_mode=True)
    assert done.value.code in (0, None)
    got = np.load(tmp_path / "out.npz")
    assert "mask" not in got.files and len(set(got.files) - {"spc_plan_sha256"}) == 4


def test_emitted_program_with_device_constants_runs_on_the_mock_p150(plans, ttnn_python: str,
                                                                    tmp_path: Path) -> None:
    """SuperPoint-Open's batch norms read per-channel constants: the emitted program puts them on
    the device before its first call."""
    from tests.conftest import spc

    _, plan_path, _ = plans["superpoint_open_op17"]
    program = tmp_path / "program.py"
    code, _, err = spc("emit-py", plan_path, "-o", program)
    assert code == 0, err
    assert program.read_text().count("device_constant(device, weights[") == 20
    plan = read_plan(plan_path)
    x = tmp_path / "x.npy"
    np.save(x, np.zeros(plan.program.device_inputs[0].device_shape, np.float32))
    done = subprocess.run([ttnn_python, str(program), str(plan_path), str(x), str(tmp_path / "out.npz"), "--mock"],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(np.load(tmp_path / "out.npz")) == sorted(t.name for t in plan.program.device_outputs)


@pytest.mark.parametrize("name", ["hf_legacy", "hf_dynamo_k300_op20_2ch", "magicleap_legacy_op13_3ch",
                                  "superpoint_open_op17", "fixed_k_op18_variant"])
def test_batch_plans_give_each_image_the_batch_1_figures(name: str, plans, images: dict[str, Path],
                                                         tmp_path: Path) -> None:
    """`--batch 2` of exports spc did not write (docs/batch.md): per image the batch-1 plan's
    figures, keypoints recognised per image where the batch-1 plan recognises them."""
    src, one, _ = plans[name]
    two = tmp_path / "two.ttplan"
    export = CORPUS[name]
    shape = [1, export.channels, *SIZE] if export.dynamic_axes else None
    compile_onnx(src, two, input_shape=shape, batch=2)
    names = ["camera", "coffee", "astronaut"]
    figures = []
    for plan_path in (one, two):
        plan = read_plan(plan_path)
        probes = {r: t.name for r, t in plan.program.probes.items()}
        xs = [load_input(images[n], [1, export.channels, *SIZE], plan.program.image) for n in names]
        batch = int(plan.program.inputs[0].shape[0])
        reports = Comparison(src, probes, xs, names, batch).reports(plan)
        figures.append([(r.f1, r.keypoints, r.ref_keypoints) for r in reports])
        assert all(not math.isnan(r.f1) for r in reports), reports
    assert figures[0] == figures[1]


def test_a_batch_needs_outputs_with_a_batch_axis(plans, tmp_path: Path) -> None:
    from spc.errors import SpcError

    with pytest.raises(SpcError, match=r"output keypoints .*without a first axis of size 1"):
        compile_onnx(plans["fixed_k_op20"][0], tmp_path / "x.ttplan", batch=2)


def test_a_call_no_block_configures_gets_room_in_l1(ttnn_python: str, images: dict[str, Path], tmp_path: Path) -> None:
    """SuperPoint-Open at 480x640, --batch 2: its unfolded BatchNorm multiply finds L1 full of the
    conv output before it; the planner sends that output to DRAM (memory/planner.py), and ttnn on
    the mock p150 accepts every call."""
    plan = tmp_path / "open_b2.ttplan"
    result = compile_onnx(cached("superpoint_open_op17", 480, 640), plan, batch=2)
    assert any("go to DRAM to leave L1" in note for note in result.notes), result.notes
    done = subprocess.run([ttnn_python, "-m", "spc.cli", "run", plan, images["camera"], images["coffee"], "-o",
                           tmp_path, "--backend", "ttnn-mock"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
