"""`spc run` over files: progress bar, .npz per input, optional overlay PNG."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from spc.errors import SpcError
from spc.files import atomic_write
from spc.plan.io import Plan
from spc.runtime.inputs import load_input
from spc.runtime.runner import Runner, RunResult


def output_paths(files: list[Path], output: Path | None, suffix: str) -> list[Path]:
    """One input: ``output`` itself (default <input>.<suffix>); several: files in the folder ``output``."""
    if len(files) == 1 and (output is None or output.suffix):
        return [output or files[0].with_suffix(suffix)]
    folder = output or Path(".")
    if (folder.exists() and not folder.is_dir()) or folder.suffix == suffix:
        raise SpcError(f"{folder}: {len(files)} inputs need a folder for -o/--viz, not a {suffix} file")
    return [folder / (f.stem + suffix) for f in files]


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def overlay_png(grey: np.ndarray, keypoints: np.ndarray, scores: np.ndarray) -> bytes:
    """Keypoints (pixel x, y) as circles whose radius grows with the score, on the grey image."""
    from PIL import Image, ImageDraw

    im = Image.fromarray((np.clip(grey, 0, 1) * 255).astype(np.uint8), mode="L").convert("RGB")
    draw = ImageDraw.Draw(im)
    top = float(scores.max()) if len(scores) else 1.0
    for (x, y), s in zip(keypoints, scores):
        r = 1.5 + 3.0 * float(s) / max(top, 1e-6)
        draw.ellipse([x - r, y - r, x + r, y + r], outline=(0, 255, 0))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def summary(result: RunResult, roles: dict[str, dict], height: int, width: int) -> str:
    """What a frame gave: its keypoints when the model has them (by role), else its outputs."""
    from spc.ir.ops.keypoints import canonical

    got = canonical(result.outputs, roles, height, width)
    if got is not None:
        return f"{len(got[0])} keypoints"
    return ", ".join(f"{name} {list(a.shape)}" for name, a in result.outputs.items())


def run_files(plan: Plan, files: list[Path], output: Path | None, viz: Path | None, dense: bool,
              backend: str, trace: bool = True) -> None:
    from rich.progress import Progress

    from spc.ir.ops.keypoints import canonical

    spec = plan.program.inputs[0]
    shape = [int(d) for d in spec.shape]
    roles = plan.program.roles
    height, width = (shape[-2], shape[-1]) if len(shape) >= 2 else (1, 1)
    if viz is not None and not any(r.get("role") == "keypoints" for r in roles.values()):
        raise SpcError("--viz draws keypoints, and this plan's outputs hold none (spc inspect lists its outputs)")
    npz_paths = output_paths(files, output, ".npz")
    viz_paths = output_paths(files, viz, ".png") if viz is not None else [None] * len(files)
    # read every input first: a bad file fails before anything is written
    arrays = [load_input(f, shape) for f in files]
    with Runner(plan, backend, trace) as runner, Progress(transient=True, disable=len(files) < 2) as bar:
        task = bar.add_task("running", total=len(files))
        for f, x, out, vz in zip(files, arrays, npz_paths, viz_paths):
            overflows = runner.overflows
            result = runner.run(x, dense=dense)
            arrays_out = dict(result.outputs)
            arrays_out.update({k: v for k, v in result.dense.items()})
            atomic_write(out, npz_bytes(arrays_out))
            if vz is not None:
                found = canonical(result.outputs, roles, height, width)
                assert found is not None
                grey = x.reshape(-1, height, width)[0]
                atomic_write(vz, overlay_png(grey, found[0], found[1]))
            bar.advance(task)
            note = " (more than the compact read-back holds: read densely)" if runner.overflows > overflows else ""
            print(f"{f}: {summary(result, roles, height, width)}{note} -> {out}" + (f", {vz}" if vz else ""))
