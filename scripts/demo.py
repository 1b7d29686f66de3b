"""The demo: export HF SuperPoint (demo weights) at 480x640, compile with dumps, run on a natural
image (scikit-image's astronaut), write keypoints and an overlay, and check against onnxruntime.

    make demo            # or: .venv/bin/python scripts/demo.py demo-out
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main(out: Path) -> int:
    from PIL import Image
    from skimage import data

    out.mkdir(parents=True, exist_ok=True)
    image = out / "astronaut.png"
    Image.fromarray(data.astronaut()).save(image)
    spc = [sys.executable, "-m", "spc.cli"]
    steps = [
        [*spc, "export", "-o", str(out / "superpoint.onnx")],
        [*spc, "compile", str(out / "superpoint.onnx"), "-o", str(out / "sp.ttplan"), "--dump-dir", str(out / "dumps")],
        [*spc, "run", str(out / "sp.ttplan"), str(image), "-o", str(out / "kp.npz"), "--viz", str(out / "kp.png")],
        [*spc, "check", str(out / "sp.ttplan"), str(image)],
    ]
    for cmd in steps:
        print("$ spc " + " ".join(cmd[3:]), flush=True)
        if subprocess.call(cmd) != 0:
            return 1
    print(f"\nkeypoints: {out / 'kp.npz'}   overlay: {out / 'kp.png'}   pass dumps: {out / 'dumps'}/")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "demo-out")))
