"""The Python API (spc/api.py): what a notebook does, without the command line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import spc
from spc.errors import SpcError
from tests.conftest import spc as cli


@pytest.fixture(scope="module")
def model(small_plan: Path) -> spc.Model:
    with spc.load(small_plan) as m:
        yield m


def test_run_gives_what_spc_run_writes_in_hloc_layout(model: spc.Model, small_plan: Path, images: dict[str, Path],
                                                      tmp_path: Path) -> None:
    import h5py

    f = model.run(images["camera"])
    assert f.image_size == Image.open(images["camera"]).size
    assert f.keypoints.dtype == np.float32 and f.keypoints.shape[1] == 2 and len(f.scores) == len(f.keypoints)
    assert f.descriptors.shape == (len(f.keypoints), 256) and set(f.outputs) == {"keypoints", "scores",
                                                                                  "descriptors", "mask"}
    code, _, err = cli("run", small_plan, images["camera"], "--format", "h5", "-o", tmp_path / "features.h5")
    assert code == 0, err
    with h5py.File(tmp_path / "features.h5", "r") as h5:
        group = h5[next(iter(h5))]
        np.testing.assert_array_equal(group["keypoints"][()], f.keypoints)
        np.testing.assert_array_equal(group["scores"][()], f.scores)
        np.testing.assert_array_equal(group["descriptors"][()], f.descriptors.T)
        assert tuple(group["image_size"][()]) == f.image_size


def test_images_as_arrays_and_pil(model: spc.Model, images: dict[str, Path]) -> None:
    path = images["camera"]
    by_path = model.run(path)
    pil = Image.open(path)
    for image in (pil, np.asarray(pil.convert("L")), np.asarray(pil.convert("RGB"))):
        got = model.run(image)
        assert got.image_size == by_path.image_size
        assert abs(len(got.keypoints) - len(by_path.keypoints)) <= max(2, len(by_path.keypoints) // 20)
    np.testing.assert_array_equal(model.run(np.asarray(pil.convert("L"))).keypoints,
                                  model.run(pil).keypoints)  # a grey array is what PIL's "L" is
    shaped = np.zeros(model.input_shape, np.float32)  # the plan's own input: used as is
    assert model.run(shaped).image_size == (model.input_shape[-1], model.input_shape[-2])


def test_fit_keeps_the_aspect_ratio(model: spc.Model) -> None:
    wide = np.zeros((60, 400), np.uint8)
    wide[20:40, 100:300:8] = 255  # bright dots
    f = model.run(wide, resize="fit")
    assert f.image_size == (400, 60)
    assert np.all((f.keypoints[:, 0] <= 399.5) & (f.keypoints[:, 1] <= 59.5))


def test_errors_are_spc_errors(model: spc.Model, small_plan: Path, small_onnx: Path, tmp_path: Path) -> None:
    with pytest.raises(SpcError, match="neither an image"):
        model.run(np.zeros((2, 3, 4, 5)))
    bad = np.full((50, 60), np.nan, np.float32)
    with pytest.raises(SpcError, match="NaN"):
        model.run(bad)
    with pytest.raises(SpcError, match="this run is for n150"):
        spc.load(small_plan, target="n150")
    with pytest.raises(SpcError, match="is the input"):
        spc.compile(small_onnx, small_onnx, overwrite=True)


def test_compile_in_memory_and_to_a_file(small_onnx: Path, tmp_path: Path) -> None:
    m = spc.compile(small_onnx)
    assert m.path is None and m.target == "p150" and m.input_shape[0] == 1
    out = tmp_path / "p.ttplan"
    m2 = spc.compile(small_onnx, out, precision="fast")
    assert m2.path == out and out.is_file() and m2.plan.manifest["options"]["precision"]["preset"] == "fast"
    with pytest.raises(SpcError, match="already exists"):
        spc.compile(small_onnx, out)
