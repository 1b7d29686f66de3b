"""`spc run`'s outputs for downstream tools: hloc's features.h5 layout, keypoints in the original
image's pixels (against onnxruntime on the source ONNX, mapped by the documented convention),
--resize stretch|fit, the aspect note, --json, videos, and flat memory over a 200-image folder
(docs/outputs.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PIL import Image

from spc.plan.program import DEFAULT_IMAGE
from spc.runtime.frames import Geometry, Source, frames
from tests.conftest import one_line_error, spc
from tests.test_untrusted_inputs import refused

ROOT = Path(__file__).resolve().parents[1]
H, W = 120, 160  # the small plan's input
SHAPE = [1, 3, H, W]


def to_original(kp_norm: np.ndarray, original: tuple[int, int], content: tuple[int, int]) -> np.ndarray:
    """The documented convention, written out: HF's keypoints are pixels / (W, H); a frame pixel
    (x, y) is ((x + 0.5) W0 / w - 0.5, (y + 0.5) H0 / h - 0.5) in the original image."""
    pix = kp_norm.astype(np.float64) * np.array([W, H])
    return (pix + 0.5) * (np.array(original, np.float64) / np.array(content, np.float64)) - 0.5


def onnxruntime_keypoints(onnx_path: Path, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    import onnxruntime as ort

    kp, scores, _, mask = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(
        None, {"pixel_values": x})
    keep = mask[0].astype(bool)
    return kp[0][keep], scores[0][keep]


def agree(ours: np.ndarray, ref: np.ndarray) -> float:
    """The share of ``ref``'s keypoints that ``ours`` holds to float rounding (1e-3 px)."""
    d = np.linalg.norm(ref[:, None, :] - ours[None, :, :].astype(np.float64), axis=-1)
    return float(np.mean(d.min(axis=1) < 1e-3))


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory, small_plan: Path, images: dict[str, Path]) -> dict:
    """astronaut (512x512) and coffee (600x400) through the small plan: npz, h5 (--json), h5 --resize fit."""
    work = tmp_path_factory.mktemp("ran")
    inputs = [images["astronaut"], images["coffee"]]
    got = {}
    for key, args in {"npz": ("-o", work / "npz", "--viz", work / "viz"),
                      "h5": ("--format", "h5", "-o", work / "features.h5", "--json"),
                      "fit": ("--format", "h5", "-o", work / "fit.h5", "--resize", "fit")}.items():
        code, out, err = spc("run", small_plan, *inputs, *args)
        assert code == 0, err
        got[key] = (out, err)
    return {"work": work, "inputs": inputs, "out": got}


def test_h5_is_hlocs_layout_and_matches_the_npz(ran: dict) -> None:
    work = ran["work"]
    with h5py.File(work / "features.h5", "r") as fd:
        names = []
        fd.visititems(lambda name, obj: names.append(obj.parent.name.strip("/"))
                      if isinstance(obj, h5py.Dataset) else None)  # hloc's list_h5_names
        assert sorted(set(names)) == ["astronaut.png", "coffee.png"]
        for name, (w0, h0) in (("astronaut.png", (512, 512)), ("coffee.png", (600, 400))):
            g = fd[name]
            assert sorted(g.keys()) == ["descriptors", "image_size", "keypoints", "scores"]
            kp, scores, desc = g["keypoints"][()], g["scores"][()], g["descriptors"][()]
            n = len(scores)
            assert n > 20 and kp.shape == (n, 2) and kp.dtype == np.float32
            assert desc.shape == (256, n) and desc.dtype == np.float32 and scores.dtype == np.float32
            assert g["image_size"][()].tolist() == [w0, h0]  # hloc: the original (width, height)
            assert g["keypoints"].attrs["uncertainty"] == pytest.approx(2.0 * (w0 / W + h0 / H) / 2)
            # the same frame's .npz: the ONNX outputs as the model returns them, plus image_size
            z = np.load(work / "npz" / f"{name}.npz")
            assert z["image_size"].tolist() == [w0, h0]
            keep = z["mask"][0].astype(bool)
            assert int(keep.sum()) == n
            np.testing.assert_allclose(kp, to_original(z["keypoints"][0][keep], (w0, h0), (W, H)), atol=1e-3)
            np.testing.assert_array_equal(scores, z["scores"][0][keep])
            np.testing.assert_array_equal(desc, z["descriptors"][0][keep].T)
            assert kp.min() >= -0.5 and kp[:, 0].max() <= w0 - 0.5 and kp[:, 1].max() <= h0 - 0.5
            # --viz draws on the original image
            assert Image.open(work / "viz" / f"{name}.png").size == (w0, h0)


def test_keypoints_in_original_pixels_agree_with_onnxruntime(ran: dict, small_onnx: Path) -> None:
    """onnxruntime on the source ONNX, on the same resized frame, its normalised keypoints mapped
    by the convention: our stretch and fit keypoints are the same points to float rounding."""
    work = ran["work"]
    for mode, h5 in (("stretch", "features.h5"), ("fit", "fit.h5")):
        sources = [Source(p, "image", None) for p in ran["inputs"]]
        with h5py.File(work / h5, "r") as fd:
            for frame in frames(sources, SHAPE, mode, image=DEFAULT_IMAGE):
                g = frame.geometry
                kp, _ = onnxruntime_keypoints(small_onnx, frame.x)
                ref = to_original(kp, g.original, g.content)
                if mode == "fit":
                    assert g.content != g.frame  # both images are padded at 120x160
                    inside = (kp[:, 0] * W < g.content[0] - 0.5) & (kp[:, 1] * H < g.content[1] - 0.5)
                    ref = ref[inside]
                ours = fd[frame.source.path.name]["keypoints"][()]
                assert abs(len(ours) - len(ref)) <= max(3, len(ref) // 20), (mode, len(ours), len(ref))
                assert agree(ours, ref) > 0.9, mode
                w0, h0 = g.original
                assert ours[:, 0].max() <= w0 - 0.5 and ours[:, 1].max() <= h0 - 0.5


def test_fit_keeps_the_aspect_ratio_and_drops_padding() -> None:
    g = Geometry.of((600, 400), (W, H), "fit")
    assert g.content == (160, 107) and g.resized and not g.aspect_changed
    assert Geometry.of((512, 512), (W, H), "fit").content == (120, 120)
    grey = np.random.default_rng(0).random((400, 600)).astype(np.float32)
    frame = g.prepare(grey)
    assert frame.shape == (H, W) and np.all(frame[107:] == 0) and frame[:107].std() > 0.01
    xy, keep = g.to_original(np.array([[0, 0], [159, 106], [10, 107], [159, 119]], np.float32))
    assert keep.tolist() == [True, True, False, False]
    np.testing.assert_allclose(xy[:2], [[(0.5 * 600 / 160) - 0.5, (0.5 * 400 / 107) - 0.5],
                                        [599.5 - 0.5 * 600 / 160, 399.5 - 0.5 * 400 / 107]], rtol=1e-6)
    s = Geometry.of((512, 512), (W, H), "stretch")
    assert s.content == (W, H) and s.aspect_changed
    assert not Geometry.of((640, 480), (W, H), "stretch").aspect_changed
    assert not Geometry.of((W, H), (W, H), "stretch").resized


def test_stretch_notes_the_aspect_change_once_and_json_lines(ran: dict) -> None:
    out, err = ran["out"]["h5"]
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1, err
    assert "astronaut.png resized 512x512 -> 120x160 (height x width; aspect changed; --resize fit keeps it)" \
        in notes[0] and "1 more input" in notes[0]
    assert "note:" not in ran["out"]["fit"][1]
    records = [json.loads(line) for line in out.splitlines()]
    assert [r.get("input", "").rsplit("/", 1)[-1] for r in records[:2]] == ["astronaut.png", "coffee.png"]
    assert records[1]["image_size"] == [600, 400] and records[1]["resized"] and records[1]["aspect_changed"]
    assert records[1]["group"] == "coffee.png" and records[1]["keypoints"] > 20
    summary = records[-1]["summary"]
    assert summary["frames"] == 2 and summary["keypoints"] == records[0]["keypoints"] + records[1]["keypoints"]
    assert ran["out"]["npz"][0].splitlines()[-1].startswith("done: 2 frames from 2 input(s)")


def test_a_video_gives_a_result_per_frame_appended_to_the_h5(ran: dict, small_plan: Path, images: dict[str, Path],
                                                             tmp_path: Path) -> None:
    import imageio.v3 as iio

    rgb = np.asarray(Image.open(images["astronaut"]).convert("RGB").resize((160, 128)))
    clip = tmp_path / "clip.mp4"
    iio.imwrite(clip, np.stack([rgb, rgb[:, ::-1], rgb[::-1]]), plugin="FFMPEG", fps=5)
    h5 = tmp_path / "features.h5"
    shutil.copy(ran["work"] / "features.h5", h5)
    code, out, err = spc("run", small_plan, clip, "--format", "h5", "-o", h5)
    assert code == 0, err
    assert [line.split(":")[0] for line in out.splitlines()[:3]] == [f"{clip} frame {i}" for i in (1, 2, 3)]
    assert "done: 3 frames from 1 input(s)" in out
    with h5py.File(h5, "r") as fd:
        assert sorted(fd) == ["astronaut.png", "clip.mp4", "coffee.png"]  # appended: the earlier groups kept
        assert sorted(fd["clip.mp4"]) == ["frame_000001", "frame_000002", "frame_000003"]
        for i in (1, 2, 3):
            g = fd[f"clip.mp4/frame_{i:06d}"]
            assert g["image_size"][()].tolist() == [160, 128] and len(g["scores"]) > 10
        mirrored = fd["clip.mp4/frame_000002/keypoints"][()]
        assert mirrored[:, 0].max() <= 159.5
    # a group already there is refused, before anything runs or is written
    refused("run", small_plan, clip, "--format", "h5", "-o", h5, contains="already holds clip.mp4/frame_000001 "
            "(and 2 more); pass --overwrite", folder=tmp_path)


@pytest.fixture(scope="module")
def relu_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plan with an image input and no keypoints, fast on the emulator: for streaming and naming."""
    folder = tmp_path_factory.mktemp("relu")
    x = helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, [1, 3, 240, 320])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 240, 320])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["pixel_values"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(model, folder / "relu.onnx")
    code, _, err = spc("compile", folder / "relu.onnx", "-o", folder / "relu.ttplan")
    assert code == 0, err
    return folder / "relu.ttplan"


def test_video_frames_as_npz_files(relu_plan: Path, tmp_path: Path) -> None:
    import imageio.v3 as iio

    frames_ = (np.arange(4, dtype=np.uint8)[:, None, None, None] * 60 + np.zeros((4, 240, 320, 3), np.uint8))
    iio.imwrite(tmp_path / "v.mp4", frames_, plugin="FFMPEG", fps=4)
    code, out, err = spc("run", relu_plan, tmp_path / "v.mp4", "--json")
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.glob("*.npz")) == [f"v.mp4.frame_{i:06d}.npz" for i in (1, 2, 3, 4)]
    means = [float(np.load(tmp_path / f"v.mp4.frame_{i:06d}.npz")["y"].mean()) for i in (1, 2, 3, 4)]
    assert means == sorted(means) and means[-1] - means[0] > 0.5  # the frames in order
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["frame"] for r in records[:4]] == [1, 2, 3, 4] and records[0]["keypoints"] is None
    assert records[-1]["summary"]["frames"] == 4


def test_h5_needs_keypoints_and_a_readable_video(relu_plan: Path, small_plan: Path, tmp_path: Path) -> None:
    (tmp_path / "x.png").write_bytes(b"")
    code, _, err = spc("run", relu_plan, tmp_path / "x.png", "--format", "h5", "-o", tmp_path / "f.h5")
    one_line_error(code, err, contains="--format h5 writes keypoints")
    (tmp_path / "bad.mp4").write_bytes(os.urandom(3000))
    refused("run", small_plan, tmp_path / "bad.mp4", "-o", tmp_path / "o", contains="not a readable video",
            folder=tmp_path)
    (tmp_path / "not.h5").write_text("text\n")
    refused("run", small_plan, tmp_path / "x.png", "--format", "h5", "-o", tmp_path / "not.h5",
            contains="is not an HDF5 file", folder=tmp_path)


CHILD = """import sys
from spc.cli import main

def vmhwm_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024

plan, folder, out = sys.argv[1:4]
files = sorted(p for p in __import__("pathlib").Path(folder).iterdir())
main(["-q", "run", plan, *map(str, files[:5]), "-o", out + "/warm"], standalone_mode=False)
warm = vmhwm_mb()
main(["-q", "run", plan, folder, "-o", out + "/all"], standalone_mode=False)
print("vmhwm-mb", warm, vmhwm_mb())
"""

# what the old `spc run` held for this folder: every input, 200 x (1, 3, 240, 320) float32
HELD_BEFORE_MB = 200 * 3 * 240 * 320 * 4 / 2**20
BOUND_MB = 24  # docs/outputs.md: at most PREFETCH + 2 frames (here 0.9 MB each) and the decoders' buffers


def test_a_200_image_folder_runs_in_flat_memory(relu_plan: Path, tmp_path: Path) -> None:
    """Peak RSS (VmHWM of the child itself) after 5 images and after 200: the growth stays under
    BOUND_MB, where holding every input, as spc did, takes HELD_BEFORE_MB (176 MB) more."""
    folder = tmp_path / "imgs"
    folder.mkdir()
    ramp = np.linspace(0, 255, 200 * 150, dtype=np.float32).reshape(150, 200)
    for i in range(200):
        Image.fromarray(((ramp + 7 * i) % 256).astype(np.uint8)).save(folder / f"{i:03d}.png")
    (tmp_path / "out").mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", CHILD, str(relu_plan), str(folder), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    warm, peak = (float(v) for v in done.stdout.split("vmhwm-mb")[-1].split())
    assert len(list((tmp_path / "out" / "all").glob("*.npz"))) == 200
    assert peak - warm < BOUND_MB, (warm, peak)
    assert HELD_BEFORE_MB > 4 * BOUND_MB


def test_an_input_that_fails_to_decode_stops_the_run_and_keeps_what_is_done(relu_plan: Path, tmp_path: Path,
                                                                            images: dict[str, Path]) -> None:
    """Headers are checked first; a file whose header is fine and whose pixels are not stops the
    run at its frame, the complete results before it kept."""
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(images["camera"], folder / "a.png")
    png = images["coffee"].read_bytes()
    (folder / "b.png").write_bytes(png[: len(png) // 2])  # its header intact
    code, _, err = spc("run", relu_plan, folder, "-o", tmp_path / "out", "-q")  # -q: no note for a.png
    one_line_error(code, err, contains="b.png: not a readable image")
    assert "stopped after 1 of 2 frame(s); their results are kept" in err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.png.npz"]
    assert np.load(tmp_path / "out" / "a.png.npz")["image_size"].tolist() == [512, 512]


def test_h5_groups_are_merged_whole_and_record_their_plan(tmp_path: Path) -> None:
    """tools/h5_store.py: groups go to a journal, then into a copy renamed over the file; each
    records its plan; a second writer is refused; a journal a killed run left is merged first."""
    from spc.errors import SpcError
    from spc.tools.h5_store import PLAN_ATTR, H5Store

    h5 = tmp_path / "f.h5"
    group = {"keypoints": np.zeros((3, 2), np.float32), "scores": np.ones(3, np.float32),
             "descriptors": np.zeros((256, 3), np.float32), "image_size": np.array([640, 480])}
    with H5Store(h5, "sha-1") as store:
        store.add("a/x.png", group, 2.0)
        assert not h5.exists()  # nothing in the file until the merge
        with pytest.raises(SpcError, match="another spc run is writing this file"):
            H5Store(h5, "sha-1")
    with h5py.File(h5, "r") as fd:
        assert list(fd) == ["a"] and fd["a/x.png"].attrs[PLAN_ATTR] == "sha-1"
        assert fd["a/x.png/keypoints"].attrs["uncertainty"] == np.float32(2.0)
    killed = H5Store(h5, "sha-2")
    killed.add("a/x.png", {**group, "scores": np.full(3, 7, np.float32)}, 2.0)
    killed.add("b/y.png", group, 2.0)
    killed._unlock()  # as a SIGKILL leaves it: the journal, no merge
    with H5Store(h5, "sha-2") as store:
        assert store.groups() == {"a/x.png": "sha-2", "b/y.png": "sha-2"}
    with h5py.File(h5, "r") as fd:
        assert fd["a/x.png/scores"][0] == 7
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith("spc-lock")) == ["f.h5"]
    # the file keeps its mode; through a symlink it is the same file, with the same lock
    os.chmod(h5, 0o640)
    link = tmp_path / "link"
    link.mkdir()
    (link / "f.h5").symlink_to(h5)
    with H5Store(link / "f.h5", "sha-3") as store:
        store.add("c/z.png", group, 2.0)
        with pytest.raises(SpcError, match="another spc run is writing this file"):
            H5Store(h5, "sha-3")
    assert (link / "f.h5").is_symlink() and (h5.stat().st_mode & 0o777) == 0o640
    with h5py.File(h5, "r") as fd:
        assert sorted(fd) == ["a", "b", "c"]
