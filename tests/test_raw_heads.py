"""A plan of a network that returns SuperPoint's raw heads (MagicLeap's SuperPointNet: the
65-channel logits and the descriptor map) gives keypoints everywhere a keypoint plan does:
`spc run` (.npz, --format h5, --viz), the Python API, with the standard extraction's parameters
shown and settable (runtime/extraction.py), against onnxruntime + the same extraction."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from spc.plan.program import DEFAULT_IMAGE
from spc.runtime.extraction import standard_keypoints
from spc.tuning.metrics import keypoint_agreement
from tests.conftest import one_line_error, spc
from tests.corpus.exports import cached

H, W = 120, 160


@pytest.fixture(scope="module")
def raw_plan(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from spc.compiler import compile_onnx

    folder = tmp_path_factory.mktemp("raw")
    src = folder / "raw.onnx"
    shutil.copy(cached("magicleap_legacy_op11", H, W), src)
    compile_onnx(src, folder / "raw.ttplan")
    return src, folder / "raw.ttplan"


def _reference(src: Path, image: Path):
    """onnxruntime on the same ONNX, then the standard extraction: keypoints in the plan's pixels."""
    import onnxruntime as ort

    from spc.runtime.inputs import load_input

    sess = ort.InferenceSession(str(src))
    x = load_input(image, [1, 1, H, W], DEFAULT_IMAGE)
    semi, desc = sess.run(None, {sess.get_inputs()[0].name: x})
    return x, standard_keypoints(semi, desc, 8)


def test_the_api_gives_raw_heads_keypoints_that_agree_with_onnxruntime(raw_plan, images) -> None:
    import spc

    src, plan = raw_plan
    with spc.load(plan) as model:
        for name in ("camera", "astronaut"):
            x, want = _reference(src, images[name])
            f = model.run(x)  # the plan's own input: keypoints in its pixels, as the reference's
            assert len(f.keypoints) > 50 and f.descriptors.shape == (len(f.keypoints), 256)
            # 120x160: ~60 keypoints, so one near-tie is 0.016 of F1 (480x640: docs/outputs.md)
            assert keypoint_agreement(f.keypoints, f.scores, f.descriptors, *want).f1 >= 0.93, name
        top = model.run(images["camera"], extraction=spc.Extraction(max_keypoints=20, threshold=0.01))
        assert len(top.keypoints) == 20 and np.all(np.diff(top.scores) <= 0)
        assert set(model.outputs(images["camera"])) == {t.name for t in model.plan.program.outputs}


def test_run_h5_viz_and_npz_of_a_raw_heads_plan(raw_plan, images, tmp_path: Path) -> None:
    _, plan = raw_plan
    code, _, err = spc("run", plan, images["camera"], images["coffee"], "--format", "h5", "-o", tmp_path / "f.h5",
                         "--viz", tmp_path / "viz", "--max-keypoints", "30")
    assert code == 0, err
    assert "standard extraction" in err and "threshold 0.005 (the top 30), NMS radius 4, border 4 px" in err, err
    with h5py.File(tmp_path / "f.h5") as f:
        assert sorted(f) == ["camera.png", "coffee.png"]
        assert f["camera.png/keypoints"].shape == (30, 2) and f["camera.png/descriptors"].shape == (256, 30)
    assert sorted(p.name for p in (tmp_path / "viz").iterdir()) == ["camera.png.png", "coffee.png.png"]
    code, _, err = spc("run", plan, images["camera"], "-o", tmp_path / "c.npz", "--border", "8")
    assert code == 0, err
    z = np.load(tmp_path / "c.npz")
    from spc.plan.io import read_plan

    outputs = {t.name for t in read_plan(plan).program.outputs}  # the export's own names ('46', '52')
    assert set(z.files) == outputs | {"keypoints", "scores", "descriptors", "image_size", "spc_plan_sha256"}, z.files
    kp = z["keypoints"]  # original pixels (512 x 512 camera): none within the scaled 8 px border
    assert len(kp) and kp.min() >= 8 * 512 / W - 1 and kp.max() <= 512 - 8 * 512 / W


def test_bad_extraction_parameters_are_one_line(raw_plan, images, tmp_path: Path) -> None:
    _, plan = raw_plan
    for option, value, says in (("--max-keypoints", "0", "max keypoints"), ("--threshold", "nan", "threshold")):
        code, _, err = spc("run", plan, images["camera"], option, value, "-o", tmp_path / "x.npz")
        one_line_error(code, err, contains=says)
        assert not (tmp_path / "x.npz").exists()


def test_a_model_without_keypoints_raises_in_the_api(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    import spc
    from spc.errors import SpcError

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 8, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), tmp_path / "m.onnx")
    with spc.compile(tmp_path / "m.onnx") as model:
        with pytest.raises(SpcError, match="no keypoints"):
            model.run(np.zeros((1, 1, 8, 8), np.float32))
        assert model.outputs(np.zeros((1, 1, 8, 8), np.float32))["y"].shape == (1, 1, 8, 8)


def test_check_finds_the_source_where_it_was_compiled_from(raw_plan, images, tmp_path: Path) -> None:
    """The plan records its source's absolute path: a plan copied elsewhere still finds it, and a
    changed file there is refused by its hash."""
    src, plan = raw_plan
    moved = tmp_path / "elsewhere" / "raw.ttplan"
    moved.parent.mkdir()
    shutil.copy(plan, moved)
    code, _, err = spc("check", moved, images["camera"])
    assert code == 0, err
    copy = tmp_path / "copy.onnx"
    shutil.copy(src, copy)
    code, _, err = spc("compile", copy, "-o", tmp_path / "c.ttplan")
    assert code == 0, err
    copy.write_bytes(copy.read_bytes() + b"\0")  # changed since: not its source any more
    code, _, err = spc("check", tmp_path / "c.ttplan", images["camera"])
    one_line_error(code, err, contains="not the ONNX this plan was compiled from")
