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
    with collector_paused(resume=False):  # a process that ends then
        pass
    assert not gc.isenabled()
    gc.enable()
    gc.disable()  # a caller that had it off keeps it off
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize(("option", "collects"), [(["--precision", "balanced"], False),
                                                  (["--precision", "auto"], True), (["--batch", "auto"], True)])
def test_a_compile_runs_without_the_collector_but_a_search_with_it(
        option: list[str], collects: bool, small_onnx: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []

    def stopped(*args, **kwargs):
        seen.append(gc.isenabled())
        raise SpcError("stopped here")

    monkeypatch.setattr(compiler, "compile_onnx", stopped)
    monkeypatch.setattr(compiler, "choose_batch", stopped)
    code, _, err = spc("compile", small_onnx, "-o", tmp_path / "p.ttplan", *option)
    assert code == 1 and "stopped here" in err
    assert seen == [collects] and gc.isenabled()


def test_a_compile_that_ends_its_process_leaves_the_collector_off(small_onnx: Path, tmp_path: Path) -> None:
    """cli.entry ends the process after `spc compile` (os._exit, no teardown): the collector is not
    resumed only to collect everything the compile made (5-8 ms); an in-process caller gets it
    back (above)."""
    code = ("import gc, os, sys\nfrom spc import cli\nend, me = os._exit, os.getpid()\n"
            "def ending(code):\n    if os.getpid() == me:  # not the inference's forked child\n"
            "        print('collector on:', gc.isenabled(), flush=True)\n    end(code)\n"
            "os._exit = ending\nsys.argv = ['spc', '-q', 'compile', sys.argv[1], '-o', sys.argv[2]]\ncli.entry()\n")
    done = subprocess.run([sys.executable, "-c", code, str(small_onnx), str(tmp_path / "p.ttplan")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "collector on: False", done.stdout + done.stderr


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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's heap")
def test_a_forked_child_gives_back_the_reserved_heap_before_it_limits_itself() -> None:
    """The inference child limits its address space from its own size (frontend/shape_inference.py):
    the heap a compile reserves is given back first, so that the limit is not raised by it."""
    probe = ("from spc.process import tune_for_compile, release_free_heap\n"
             "tune_for_compile()\n"
             "def size():\n"
             "    return int(open('/proc/self/statm').read().split()[0]) * 4096\n"
             "before = size()\n"
             "release_free_heap()\n"
             "print(before - size())\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert int(done.stdout) > 512 << 20, done.stdout
