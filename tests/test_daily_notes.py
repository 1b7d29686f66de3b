"""The small things a new user meets (issue 27): a model given to `spc run`, --json that is JSON,
no keypoint columns for a model without keypoints, a note for a tiny image."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PIL import Image

from tests.conftest import one_line_error, spc


@pytest.fixture()
def relu_plan(tmp_path: Path) -> tuple[Path, Path]:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 8, 8])])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)
    assert spc("compile", model, "-o", tmp_path / "m.ttplan")[0] == 0
    return model, tmp_path / "m.ttplan"


def test_run_on_a_model_says_compile_it_first(relu_plan, tmp_path: Path) -> None:
    model, _ = relu_plan
    np.save(tmp_path / "x.npy", np.zeros((1, 1, 8, 8), np.float32))
    code, _, err = spc("run", model, tmp_path / "x.npy")
    one_line_error(code, err, contains=f"compile it first: spc compile {model} -o m.ttplan")


def test_check_json_is_json_and_the_table_has_no_keypoint_columns(relu_plan, tmp_path: Path) -> None:
    _, plan = relu_plan
    np.save(tmp_path / "x.npy", np.random.default_rng(0).normal(size=(1, 1, 8, 8)).astype(np.float32))

    def refuse(constant: str):
        raise AssertionError(f"{constant} is not JSON")

    code, out, err = spc("check", plan, tmp_path / "x.npy", "--json")
    assert code == 0, err
    (report,) = json.loads(out, parse_constant=refuse)
    assert report["score_pcc"] is None and report["f1"] is None  # no score map, no keypoints: null, not NaN
    code, out, err = spc("check", plan, tmp_path / "x.npy")
    assert code == 0 and "y PCC" in out and "precision" not in out and "F1" not in out, out


def test_a_tiny_image_gets_a_note(small_plan: Path, tmp_path: Path) -> None:
    Image.fromarray((np.random.default_rng(1).random((30, 40)) * 255).astype(np.uint8)).save(tmp_path / "t.png")
    code, _, err = spc("run", small_plan, tmp_path / "t.png", "-o", tmp_path / "t.npz")
    assert code == 0 and "40x30 upscaled 4x to the plan's 160x120" in err, err


def test_run_verbose_says_what_each_frame_took(small_plan: Path, images: dict[str, Path], tmp_path: Path) -> None:
    code, _, err = spc("-v", "run", small_plan, images["camera"], images["coffee"], "-o", tmp_path / "out")
    assert code == 0, err
    assert "backend emu, input [1, 3, 120, 160]" in err and err.count("decoded and run in") == 2, err
    code, _, quiet = spc("run", small_plan, images["camera"], "-o", tmp_path / "one.npz")
    assert "decoded and run in" not in quiet


def test_coords_pixels_npz_holds_what_h5_holds(small_plan: Path, images: dict[str, Path], tmp_path: Path) -> None:
    import h5py

    assert spc("run", small_plan, images["coffee"], "-o", tmp_path / "p.npz", "--coords", "pixels")[0] == 0
    assert spc("run", small_plan, images["coffee"], "--format", "h5", "-o", tmp_path / "f.h5")[0] == 0
    z = np.load(tmp_path / "p.npz")
    with h5py.File(tmp_path / "f.h5") as f:
        g = f["coffee.png"]
        np.testing.assert_array_equal(z["keypoints"], g["keypoints"][()])
        np.testing.assert_array_equal(z["scores"], g["scores"][()])
        np.testing.assert_array_equal(z["descriptors"], g["descriptors"][()].T)
    assert z["keypoints"].ndim == 2 and "mask" in z.files  # the model's other outputs kept
