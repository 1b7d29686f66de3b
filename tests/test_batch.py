"""Batch plans (`spc compile --batch B` of HF's batch-1 export): the batched model is the batch-1
model image by image (onnxruntime on the batch-images dump), `spc check` gives each image the
figures the batch-1 plan gives it, `spc run` fills batches and drops the pad, the plan runs on the
mock p150."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spc.plan.program import DEFAULT_IMAGE
from spc.runtime.inputs import load_input

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("camera", "astronaut", "coffee")  # three images: the batch of two runs a padded second batch


def spc(*args: object, python: str = sys.executable) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-m", "spc.cli", *map(str, args)], capture_output=True, text=True, check=False,
                          cwd=ROOT)


@pytest.fixture(scope="module")
def plans(small_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from spc.compiler import compile_onnx

    folder = tmp_path_factory.mktemp("batch")
    one, two = folder / "one.ttplan", folder / "two.ttplan"
    compile_onnx(small_onnx, one)
    result = compile_onnx(small_onnx, two, batch=2, dump_dir=folder / "dumps")
    assert "fuse-keypoints: 2 region(s)" in result.recognised, result.recognised
    assert not any("read back densely" in note for note in result.notes), result.notes
    return {"one": one, "two": two, "dumps": folder / "dumps"}


def test_the_batched_model_is_the_batch_1_model_per_image(plans: dict[str, Path], small_onnx: Path,
                                                          images: dict[str, Path]) -> None:
    import onnxruntime as ort

    def run(model: Path, x: np.ndarray) -> list[np.ndarray]:
        s = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        return s.run(None, {s.get_inputs()[0].name: x})

    xs = [load_input(images[n], [1, 3, 120, 160], DEFAULT_IMAGE) for n in NAMES[:2]]
    dump = next(plans["dumps"].glob("*-batch-images.onnx"))
    batched = run(dump, np.concatenate(xs))
    alone = [run(small_onnx, x) for x in xs]
    for k, (got, *each) in enumerate(zip(batched, *alone)):
        assert got.shape[0] == 2
        for i, want in enumerate(each):
            n = want.shape[1] if want.ndim > 1 else None
            np.testing.assert_array_equal(got[i:i + 1, :n], want, err_msg=f"output {k}, image {i}")
            np.testing.assert_array_equal(got[i:i + 1, n:], 0)  # the pad to the batch's largest count


def test_check_gives_each_image_the_batch_1_figures(plans: dict[str, Path], small_onnx: Path,
                                                    images: dict[str, Path]) -> None:
    figures = {}
    for name in ("one", "two"):
        done = spc("check", plans[name], *(images[n] for n in NAMES), "--onnx", small_onnx, "--json")
        assert done.returncode == 0, done.stderr
        figures[name] = json.loads(done.stdout)
    for a, b in zip(figures["one"], figures["two"]):
        assert a["input"] == b["input"] and a["keypoints"] == b["keypoints"] > 0
        for key in ("f1", "score_pcc", "descriptor_pcc"):
            assert abs(a[key] - b[key]) <= 0.005, (a["input"], key, a[key], b[key])


def test_run_fills_batches_and_drops_the_pad(plans: dict[str, Path], images: dict[str, Path], tmp_path: Path) -> None:
    from spc.plan.io import read_plan

    assert read_plan(plans["two"]).manifest["options"]["batch"] == 2
    files = [tmp_path / f"{n}.png" for n in NAMES]
    for f, n in zip(files, NAMES):
        f.write_bytes(images[n].read_bytes())
    for name in ("one", "two"):
        done = spc("run", plans[name], *files, "-o", tmp_path / name)
        assert done.returncode == 0, done.stderr
        assert "done: 3 frames" in done.stdout + done.stderr
    for n in NAMES:
        a, b = np.load(tmp_path / "one" / f"{n}.png.npz"), np.load(tmp_path / "two" / f"{n}.png.npz")
        ma, mb = a["mask"][0] > 0, b["mask"][0] > 0
        assert ma.sum() == mb.sum() > 0
        for key in ("keypoints", "scores", "descriptors"):  # both read back top-K, sampled on the device
            np.testing.assert_array_equal(a[key][0][ma], b[key][0][mb])


def test_the_batch_plan_runs_on_the_mock_p150(plans: dict[str, Path], ttnn_python: str, images: dict[str, Path],
                                              tmp_path: Path) -> None:
    done = spc("run", plans["two"], images["camera"], images["coffee"], "-o", tmp_path, "--backend", "ttnn-mock",
               python=ttnn_python)
    assert done.returncode == 0, done.stderr
    assert "the mock p150 validates every call" in done.stderr and "computes no values" in done.stderr, done.stderr


def test_batch_options_refuse_what_they_cannot_do(small_onnx: Path, tmp_path: Path) -> None:
    done = spc("compile", small_onnx, "-o", tmp_path / "x.ttplan", "--batch", "2", "--precision", "auto")
    assert done.returncode == 1 and done.stderr.startswith("spc: error: --precision auto") and "\n" not in \
        done.stderr.strip()
    done = spc("compile", small_onnx, "-o", tmp_path / "x.ttplan", "--batch", "2", "--input-shape", "2,3,120,160")
    assert done.returncode == 1 and "spc: error:" in done.stderr
    assert not (tmp_path / "x.ttplan").exists()


def test_inspect_predicts_the_rate_a_batch_buys(plans: dict[str, Path]) -> None:
    from spc.memory.throughput import D2H_CALL_S, HOST_POST_S, UPLOAD_S

    rates = {}
    for name in ("one", "two"):
        done = spc("inspect", plans[name], "--json")
        assert done.returncode == 0, done.stderr
        t = json.loads(done.stdout)["throughput"]
        assert t["batch"] == (1 if name == "one" else 2) and t["uploads"] == 1
        assert t["readbacks"] == 1  # every image's compact results packed into one tensor on the device
        # the upload beside the previous run's trace, then the read-back and the host's post-processing
        assert t["run_s"] == pytest.approx(max(t["device_s"], t["uploads"] * UPLOAD_S) + t["readbacks"] * D2H_CALL_S
                                           + t["batch"] * HOST_POST_S)
        rates[name] = t["fps"]
    assert rates["two"] > rates["one"]  # one upload per two frames


def test_batch_auto_keeps_the_fastest_size_within_the_latency(small_onnx: Path, tmp_path: Path) -> None:
    plan = tmp_path / "auto.ttplan"
    done = spc("compile", small_onnx, "-o", plan, "--batch", "auto", "--max-latency-ms", "60")
    assert done.returncode == 0, done.stderr
    tried = json.loads(spc("inspect", plan, "--json").stdout)["batch_search"]
    assert [r["batch"] for r in tried] == [1, 2, 4, 8]
    ok = [r for r in tried if r["fits"] and r["run_s"] <= 0.060]
    (chosen,) = [r for r in tried if r["chosen"]]
    assert chosen == max(ok, key=lambda r: r["fps"])
    assert json.loads(spc("inspect", plan, "--json").stdout)["throughput"]["batch"] == chosen["batch"]
    done = spc("compile", small_onnx, "-o", tmp_path / "x.ttplan", "--batch", "auto", "--max-latency-ms", "1")
    assert done.returncode == 1 and done.stderr.startswith("spc: error:") and "no batch" in done.stderr
    assert not (tmp_path / "x.ttplan").exists()


def test_per_layer_says_to_compare_the_batch_1_plan(plans: dict[str, Path], small_onnx: Path,
                                                    images: dict[str, Path]) -> None:
    done = spc("check", plans["two"], images["camera"], "--onnx", small_onnx, "--per-layer")
    assert done.returncode == 1 and done.stderr.startswith("spc: error:") and "without --batch" in done.stderr


def test_check_against_a_batched_export_of_the_network(plans: dict[str, Path], small_onnx: Path,
                                                        images: dict[str, Path]) -> None:
    """--reference: onnxruntime on a batch-2 ONNX of the same network (the batch-images dump, which
    equals HF's own batch-2 export bit for bit: docs/batch.md), run in batches and split per image."""
    dump = next(plans["dumps"].glob("*-batch-images.onnx"))
    figures = []
    for args in (["--onnx", small_onnx], ["--reference", dump]):
        done = spc("check", plans["two"], *(images[n] for n in NAMES), *args, "--json")
        assert done.returncode == 0, done.stderr
        figures.append(json.loads(done.stdout))
    for a, b in zip(*figures):
        assert (a["f1"], a["keypoints"], a["ref_keypoints"]) == (b["f1"], b["keypoints"], b["ref_keypoints"])
    done = spc("check", plans["two"], images["camera"], "--reference", dump, "--onnx", small_onnx)
    assert done.returncode == 1 and done.stderr.startswith("spc: error: --reference")


def test_a_reference_of_another_size_is_refused(plans: dict[str, Path], exports, images: dict[str, Path]) -> None:
    done = spc("check", plans["two"], images["camera"], "--reference", exports(240, 320))
    assert done.returncode == 1 and done.stderr.startswith("spc: error:") and "plan's size" in done.stderr


def test_a_reference_s_maps_are_not_looked_up_by_the_source_s_names(plans: dict[str, Path],
                                                                    images: dict[str, Path]) -> None:
    """The dump keeps the source's value names, yet as another export its maps are not compared."""
    dump = next(plans["dumps"].glob("*-batch-images.onnx"))
    done = spc("check", plans["two"], images["camera"], "--reference", dump, "--json")
    assert done.returncode == 0, done.stderr
    (report,) = json.loads(done.stdout)
    assert report["score_pcc"] is None or report["score_pcc"] != report["score_pcc"]  # NaN: not compared
