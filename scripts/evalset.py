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
