"""DISK + LightGlue (trained weights) through `spc match` on image pairs with a known homography,
against onnxruntime running the same two ONNX files.

    make homography        # = .venv/bin/python scripts/homography.py (installs what it needs first)
    .venv/bin/python scripts/homography.py --warps 5 --keypoints 512
    .venv/bin/python scripts/homography.py --disk-float32    # DISK's blocks stored in float32 (F1 0.99)

Six natural images (scikit-image's camera, astronaut, coffee, chelsea, rocket, brick) at 640x480,
each warped by ``--warps`` seeded homographies (each corner moved by up to 15 % of the side;
OpenCV's warpPerspective), written with hloc's pairs file. DISK (tests/corpus/disk.py) and
LightGlue on DISK (tests/corpus/lightglue.py) are exported, compiled with the validation and
run by `spc match` on emu; onnxruntime runs the same two files on the same input arrays (spc's
own reading of each image: in colour, as DISK's plan says its first convolution reads it).

Per pair:
* the matcher alone: spc's LightGlue against onnxruntime's on onnxruntime's DISK features (the
  same keypoints on both sides): the match-set F1 of matches0 (spc/tuning/metrics.py);
* the pipeline: spc's matches against onnxruntime's as pixel pairs, one to one within 2 px at
  both ends (their keypoints are each side's own; the DISK keypoints' own F1 is printed too);
* the homography estimated from each side's matches (OpenCV's RANSAC, 3 px), its corner error
  (the mean distance of the image's four corners from where the true homography puts them), and
  the share of pairs under 3 px on each side.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SPC = ROOT / ".venv" / "bin" / "spc"
IMAGES = ("camera", "astronaut", "coffee", "chelsea", "rocket", "brick")
H, W = 480, 640


def warps(count: int, seed: int) -> list[np.ndarray]:
    import cv2

    rng = np.random.default_rng(seed)
    corners = np.array([[0, 0], [W - 1, 0], [W - 1, H - 1], [0, H - 1]], np.float32)
    out = []
    for _ in range(count):
        moved = corners + rng.uniform(-0.15, 0.15, (4, 2)).astype(np.float32) * [W, H]
        out.append(cv2.getPerspectiveTransform(corners, moved.astype(np.float32)))
    return out


def write_pairs(folder: Path, count: int) -> tuple[list[tuple[str, str]], dict[tuple[str, str], np.ndarray]]:
    import cv2
    from PIL import Image
    from skimage import data

    folder.mkdir(parents=True, exist_ok=True)
    pairs, truth = [], {}
    for i, name in enumerate(IMAGES):
        im = np.asarray(Image.fromarray(getattr(data, name)()).convert("RGB").resize((W, H), Image.BILINEAR))
        Image.fromarray(im).save(folder / f"{name}.png")
        for j, h in enumerate(warps(count, 100 + i)):
            warped = cv2.warpPerspective(im, h, (W, H))
            Image.fromarray(warped).save(folder / f"{name}_w{j}.png")
            pairs.append((f"{name}.png", f"{name}_w{j}.png"))
            truth[pairs[-1]] = h
    (folder / "pairs.txt").write_text("".join(f"{a} {b}\n" for a, b in pairs))
    return pairs, truth


def corner_error(est: np.ndarray | None, true: np.ndarray) -> float:
    import cv2

    if est is None:
        return float("inf")
    c = np.array([[[0, 0]], [[W - 1, 0]], [[W - 1, H - 1]], [[0, H - 1]]], np.float32)
    return float(np.linalg.norm(cv2.perspectiveTransform(c, est) - cv2.perspectiveTransform(c, true), axis=2).mean())


def homography(p0: np.ndarray, p1: np.ndarray) -> np.ndarray | None:
    import cv2

    if len(p0) < 4:
        return None
    h, _ = cv2.findHomography(p0.astype(np.float64), p1.astype(np.float64), cv2.RANSAC, 3.0, maxIters=2000,
                              confidence=0.999)
    return h


def pixel_f1(a0: np.ndarray, a1: np.ndarray, b0: np.ndarray, b1: np.ndarray, tol: float = 2.0) -> float:
    """Matches (a0[i], a1[i]) against (b0[j], b1[j]), one to one, both ends within ``tol`` px."""
    if not len(a0) and not len(b0):
        return 1.0
    if not len(a0) or not len(b0):
        return 0.0
    d = np.maximum(np.linalg.norm(a0[:, None] - b0[None], axis=2), np.linalg.norm(a1[:, None] - b1[None], axis=2))
    used, hits = set(), 0
    for i in np.argsort(d.min(1)):
        for j in np.argsort(d[i]):
            if d[i, j] > tol:
                break
            if j not in used:
                used.add(j)
                hits += 1
                break
    return 2 * hits / (len(a0) + len(b0))


def compile_plan(src: Path, plan: Path, *options: str) -> str:
    plan.unlink(missing_ok=True)
    done = subprocess.run([SPC, "compile", src, "-o", plan, *options], capture_output=True, text=True)
    if done.returncode:
        sys.exit(done.stderr.strip())
    return next(line for line in done.stdout.splitlines() if line.startswith("wrote"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warps", type=int, default=5)
    ap.add_argument("--keypoints", type=int, default=512)
    ap.add_argument("--work", type=Path, default=Path("bench-out/homography"))
    ap.add_argument("--disk-float32", action="store_true",
                    help="DISK's blocks store their results in float32 (--precision-config), not bf16")
    args = ap.parse_args()
    import h5py
    import onnxruntime as ort

    from spc.api import _frame
    from spc.plan.io import read_plan
    from spc.tuning.metrics import index_set_f1
    from tests.corpus.disk import export as export_disk
    from tests.corpus.lightglue import export as export_lightglue

    work, k = args.work, args.keypoints
    work.mkdir(parents=True, exist_ok=True)
    disk, lg = work / f"disk_{H}x{W}_{k}.onnx", work / f"lightglue_disk_{k}.onnx"
    if not disk.exists():
        export_disk(disk, H, W, k)
    if not lg.exists():
        export_lightglue(lg, k)
    options: list[str] = []
    if args.disk_float32:
        (work / "float32.toml").write_text('[blocks."*"]\noutput_dtype = "float32"\n')
        options = ["--precision-config", str(work / "float32.toml")]
    print(compile_plan(disk, work / "disk.ttplan", *options))
    disk_plan = read_plan(work / "disk.ttplan")  # how it reads a picture (colour: DISK's first conv reads RGB)
    print(compile_plan(lg, work / "lightglue.ttplan"))
    pairs, truth = write_pairs(work / "images", args.warps)
    out = work / "out"
    for f in ("matches.h5", "features.h5"):
        (out / f).unlink(missing_ok=True)
    done = subprocess.run([SPC, "match", work / "disk.ttplan", work / "lightglue.ttplan", work / "images", "--pairs",
                           work / "images" / "pairs.txt", "-o", out, "--json"], capture_output=True, text=True)
    if done.returncode:
        sys.exit(done.stderr.strip())
    print(done.stdout.splitlines()[-1])

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    xs = ort.InferenceSession(str(disk), opts, providers=["CPUExecutionProvider"])
    ms = ort.InferenceSession(str(lg), opts, providers=["CPUExecutionProvider"])
    size = np.array([[W, H]], np.float32)
    ref_feats: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in sorted({n for p in pairs for n in p}):
        x, _ = _frame(work / "images" / name, [1, 3, H, W], disk_plan.program.image, "stretch", False)
        kp, _scores, desc = xs.run(None, {"image": x})
        ref_feats[name] = (kp[0], desc[0])

    def ort_match(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        return ms.run(None, {"kpts0": a[0][None], "kpts1": b[0][None], "desc0": a[1][None], "desc1": b[1][None],
                             "size0": size, "size1": size.copy()})[0][0]

    # the matcher alone, on onnxruntime's features: spc's LightGlue plan through the Python API
    import spc

    model = spc.load(work / "lightglue.ttplan")
    rows, errs = [], {"spc": [], "onnxruntime": []}
    with h5py.File(out / "features.h5", "r") as f, h5py.File(out / "matches.h5", "r") as m:
        for p in pairs:
            a, b = ref_feats[p[0]], ref_feats[p[1]]
            ref = ort_match(a, b)
            ours = model.tensors({"kpts0": a[0][None], "kpts1": b[0][None], "desc0": a[1][None],
                                  "desc1": b[1][None], "size0": size, "size1": size.copy()})["matches0"][0]
            f1_matcher = index_set_f1(ours, ref)
            m0 = m[f"{p[0]}/{p[1]}"]["matches0"][()]
            k0, k1 = f[p[0]]["keypoints"][()], f[p[1]]["keypoints"][()]
            i = np.flatnonzero(m0 >= 0)
            s0, s1 = k0[i], k1[m0[i]]
            j = np.flatnonzero(ref >= 0)
            r0, r1 = a[0][j], b[0][ref[j]]
            f1_pipe = pixel_f1(s0, s1, r0, r1)
            e_spc, e_ref = corner_error(homography(s0, s1), truth[p]), corner_error(homography(r0, r1), truth[p])
            errs["spc"].append(e_spc)
            errs["onnxruntime"].append(e_ref)
            rows.append((p, f1_matcher, len(i), len(j), f1_pipe, e_spc, e_ref))
    model.close()
    print("\n| pair | matcher F1 (same features) | matches spc / onnxruntime | pipeline F1 (2 px) "
          "| corner error spc / onnxruntime (px) |")
    print("|---|---:|---:|---:|---:|")
    for p, f1m, ns, nr, f1p, es, er in rows:
        print(f"| {p[1]} | {f1m:.4f} | {ns} / {nr} | {f1p:.4f} | {es:.2f} / {er:.2f} |")
    with h5py.File(out / "features.h5", "r") as f:
        kp_f1 = np.array([pixel_f1(f[n]["keypoints"][()], f[n]["keypoints"][()], ref_feats[n][0], ref_feats[n][0])
                          for n in sorted(ref_feats)])
    print(f"\nDISK keypoints, spc against onnxruntime (one to one, 2 px) over {len(kp_f1)} images: F1 median "
          f"{np.median(kp_f1):.4f}, min {kp_f1.min():.4f}")
    f1s = np.array([r[1] for r in rows])
    pipe = np.array([r[4] for r in rows])
    acc = {side: float(np.mean(np.array(e) <= 3.0)) for side, e in errs.items()}
    print(f"\nmatcher F1: median {np.median(f1s):.4f}, min {f1s.min():.4f}; pipeline F1: median {np.median(pipe):.4f}, "
          f"min {pipe.min():.4f}; homography accuracy at 3 px: spc {acc['spc']:.3f}, onnxruntime "
          f"{acc['onnxruntime']:.3f} (difference {abs(acc['spc'] - acc['onnxruntime']):.3f}) over {len(rows)} pairs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
