"""The evaluation set the scripts share: scikit-image's natural images and cached exports."""

from __future__ import annotations

import argparse
from pathlib import Path

# CC0 / public domain (licences as scikit-image states them); none is in tuning/calibration/
IMAGES = ("camera", "astronaut", "coffee", "chelsea", "rocket", "brick")


def evaluation_images(work: Path, names: tuple[str, ...] = IMAGES) -> list[Path]:
    """The images as PNG files in ``work`` (written once)."""
    from PIL import Image
    from skimage import data

    work.mkdir(parents=True, exist_ok=True)
    files = []
    for name in names:
        path = work / f"{name}.png"
        if not path.exists():
            Image.fromarray(getattr(data, name)()).save(path)
        files.append(path)
    return files


def exported(work: Path, height: int, width: int) -> Path:
    """HF SuperPoint (demo weights) exported at ``height`` x ``width``, cached in ``work``."""
    from spc.frontend.export import export_onnx

    src = work / f"superpoint_{height}x{width}.onnx"
    if not src.exists():
        export_onnx(src, height, width)
    return src


def corpus_options(doc: str | None, root: Path) -> argparse.ArgumentParser:
    """The options of the scripts that build corpus variants in ``.venv-tf`` (corpus_tf.py,
    corpus_derived.py): the size, the work folder, that venv's interpreter."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="480x640", help="HxW")
    ap.add_argument("--work", type=Path, default=Path("bench-out/corpus"))
    ap.add_argument("--tf-python", default=str(root / ".venv-tf" / "bin" / "python"))
    return ap


def size_of(args: argparse.Namespace) -> tuple[int, int]:
    """``--size`` as (height, width), with the work folder made."""
    args.work.mkdir(parents=True, exist_ok=True)
    h, w = (int(v) for v in args.size.split("x"))
    return h, w


def fixed_k_through_spc(args: argparse.Namespace, python: str, exporter: Path, name: str) -> int:
    """An export another toolchain made (``exporter`` run by ``python``: WEIGHTS OUT H W K; input
    [1, H, W, 1], outputs keypoints [K, 2] (x, y) pixels, scores [K], descriptors [K, 256]) at
    ``--size``: compiled, each image file read by spc as the plan says (NHWC grey: checked to be the
    array a TF user makes), run on the emu backend, keypoints against onnxruntime on the same ONNX
    and the same array (top 500 by score, 2 px, one to one) and the matched descriptors' cosine; prints a row, exit 0
    when F1 median >= 0.97 and cosine >= 0.99 (corpus_tf.py, corpus_jax.py)."""
    import statistics
    import subprocess
    import time

    import numpy as np
    import onnxruntime as ort
    from PIL import Image

    from spc.compiler import compile_onnx
    from spc.frontend.weights import demo_weights_path, load_state_file
    from spc.plan.io import read_plan
    from spc.runtime.inputs import load_input
    from spc.runtime.runner import Runner
    from spc.tuning.metrics import keypoint_agreement

    h, w = size_of(args)
    weights = args.work / "demo_weights_hf.npz"
    np.savez(weights, **load_state_file(demo_weights_path()))
    src = args.work / f"{name}_{h}x{w}.onnx"
    subprocess.run([python, str(exporter), str(weights), str(src), str(h), str(w), str(args.k)], check=True,
                   capture_output=True)
    plan_path = src.with_suffix(".ttplan")
    t0 = time.perf_counter()
    result = compile_onnx(src, plan_path)
    seconds = time.perf_counter() - t0
    for note in result.notes:
        print(f"note: {note}")
    plan = read_plan(plan_path)
    print(f"image input: {plan.program.image.layout}, {plan.program.image.colour}")
    sess = ort.InferenceSession(str(src))
    f1s, cos = [], []
    with Runner(plan) as runner:
        for f in evaluation_images(args.work, IMAGES):
            # spc's own reading of the file is the array a TF user makes (channels last), up to
            # PIL's resize in float rather than in bytes (mean 1/255 apart); both sides then run on it
            grey = np.asarray(Image.open(f).convert("L").resize((w, h)), np.float32) / 255
            x = load_input(f, [1, h, w, 1], plan.program.image)
            assert x.shape == (1, h, w, 1) and float(np.abs(x - grey.reshape(1, h, w, 1)).mean()) < 2 / 255, f
            ours = list(runner.run(x).outputs.values())
            ref = sess.run(None, {sess.get_inputs()[0].name: x})
            a = keypoint_agreement(ours[0].astype(np.float32), ours[1], ours[2], ref[0].astype(np.float32), ref[1],
                                   ref[2])
            f1s.append(a.f1)
            cos.append(a.descriptor_cosine)
            print(f"{f.name}: F1 {a.f1:.3f}, descriptor cosine {a.descriptor_cosine:.4f}")
    print(f"| {name} | {plan.manifest['recognised']} | {plan.manifest['device_ops']} "
          f"| F1 {statistics.median(f1s):.3f} ({min(f1s):.3f}) | cosine min {min(cos):.4f} | compile {seconds:.1f} s |")
    return 0 if statistics.median(f1s) >= 0.97 and min(cos) >= 0.99 else 1
