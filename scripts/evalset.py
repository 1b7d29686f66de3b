"""The evaluation set the scripts share: scikit-image's natural images and cached exports."""

from __future__ import annotations

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
