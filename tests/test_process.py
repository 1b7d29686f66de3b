"""The compile command's process settings (spc/process.py)."""

from __future__ import annotations

import gc
import subprocess
import sys
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


def _thp_mode() -> str | None:
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return None
    return text[text.index("[") + 1:text.index("]")]


@pytest.mark.skipif(_thp_mode() not in ("always", "madvise"), reason="no transparent huge pages on this kernel")
def test_a_compile_process_keeps_its_heap_in_huge_pages() -> None:
    """In a fresh process the heap is reserved and advised for huge pages (smaps' ``hg`` flag);
    in one that imported numpy already (an in-process caller) nothing more is advised."""
    probe = ("import sys\n{first}"
             "def advised():\n"
             "    return sum('hg' in l.split() for l in open('/proc/self/smaps') if l.startswith('VmFlags'))\n"
             "before = advised()\n"
             "from spc.process import tune_for_compile\n"
             "tune_for_compile()\n"
             "print(before, advised())\n")
    for first, more in (("", True), ("import numpy\n", False)):
        done = subprocess.run([sys.executable, "-c", probe.format(first=first)], capture_output=True, text=True,
                              check=True)
        before, after = map(int, done.stdout.split())
        assert (after > before) is more, (first, done.stdout, done.stderr)
