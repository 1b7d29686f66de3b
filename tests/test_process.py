"""The compile command's process settings (spc/process.py)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from spc import compiler
from spc.errors import SpcError
from spc.process import collector_paused
from tests.conftest import spc


def test_the_collector_is_paused_inside_and_restored_after() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), collector_paused():
        raise ValueError
    assert gc.isenabled()
    with collector_paused(pause=False):
        assert gc.isenabled()
    gc.disable()  # a caller that had it off keeps it off
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("precision", ["balanced", "auto"])
def test_a_compile_runs_without_the_collector_but_a_precision_search_with_it(
        precision: str, small_onnx: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []

    def compile_onnx(*args, **kwargs):
        seen.append(gc.isenabled())
        raise SpcError("stopped here")

    monkeypatch.setattr(compiler, "compile_onnx", compile_onnx)
    code, _, err = spc("compile", small_onnx, "-o", tmp_path / "p.ttplan", "--precision", precision)
    assert code == 1 and "stopped here" in err
    assert seen == [precision == "auto"] and gc.isenabled()
