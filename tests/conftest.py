"""Shared fixtures: a real SuperPoint export at a small size, compiled once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from spc.ir.graph import Graph
from spc.ir.parser import parse_graph
from spc.ir.verify import verify

SMALL = (120, 160)


def ir(text: str, **weights: np.ndarray) -> Graph:
    """A graph from IR text (tests are written as IR in, IR out)."""
    g = parse_graph(text, weights)
    verify(g)
    return g


@pytest.fixture(scope="session")
def ttnn_python() -> str:
    """The Python 3.12 environment with ttnn 0.81.1 (mock p150); missing it fails, never skips."""
    python = os.environ.get("SPC_TTNN_PYTHON") or str(Path(__file__).resolve().parents[1] / ".venv-ttnn" / "bin" / "python")
    if not Path(python).exists():
        pytest.fail("no ttnn environment: run `make mock-env` (the README's test command does)")
    return python


@pytest.fixture(scope="session")
def small_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from spc.frontend.export import export_onnx

    return export_onnx(tmp_path_factory.mktemp("export") / "sp.onnx", *SMALL)


@pytest.fixture(scope="session")
def exports(tmp_path_factory: pytest.TempPathFactory):
    """export(h, w) -> the HF model exported at that size, once per session."""
    from spc.frontend.export import export_onnx

    folder = tmp_path_factory.mktemp("exports")
    done: dict[tuple[int, int], Path] = {}

    def export(h: int, w: int) -> Path:
        if (h, w) not in done:
            done[(h, w)] = export_onnx(folder / f"sp_{h}x{w}.onnx", h, w)
        return done[(h, w)]

    return export


@pytest.fixture(scope="session")
def small_plan(small_onnx: Path) -> Path:
    from spc.compiler import compile_onnx

    out = small_onnx.with_suffix(".ttplan")
    compile_onnx(small_onnx, out)
    return out


@pytest.fixture(scope="session")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Natural images from scikit-image, written as PNG/JPEG files."""
    from PIL import Image
    from skimage import data

    folder = tmp_path_factory.mktemp("images")
    out = {}
    for name in ("camera", "astronaut", "coffee"):
        path = folder / f"{name}.png"
        Image.fromarray(getattr(data, name)()).save(path)
        out[name] = path
    return out
