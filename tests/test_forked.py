"""spc/forked.py, and the validation through it (a forked child runs the source's side).

pytest-xdist's workers run threads, where :func:`spc.forked.can_fork` refuses: each case runs in
a fresh interpreter of its own (one thread), as `spc compile` does."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).parent


# a case's preamble: the compiler, the score-fold test model, and every forked child it starts
# (``started``), in an interpreter of its own
WATCHED_COMPILE = """
        import sys
        from pathlib import Path
        tmp, tests = Path(sys.argv[1]), sys.argv[2]
        sys.path.insert(0, tests)
        import spc.forked
        from spc.compiler import compile_onnx
        from test_translation_validation import _fold_model

        started = []
        real = spc.forked.Forked.start.__func__
        spc.forked.Forked.start = classmethod(lambda cls, fn: started.append(real(cls, fn)) or started[-1])
"""


def _py(code: str, tmp_path: Path) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(tmp_path), str(TESTS)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_a_forked_call_hands_back_arrays_and_raises_what_the_child_raised(tmp_path: Path) -> None:
    out = _py("""
        import os, threading
        import numpy as np
        from spc.errors import SpcError
        from spc.forked import ChildFailed, Forked, can_fork

        assert can_fork()
        big = np.arange(3_000_000, dtype=np.float32)
        f = Forked.start(lambda: {"a": big * 2, "b": [np.int64(7), "text"], "c": np.zeros((0, 3))})
        got = f.result()
        assert np.array_equal(got["a"], big * 2) and got["a"].flags.writeable
        got["a"][0] = 5  # copy on write: the parent's own
        assert got["b"] == [7, "text"] and got["c"].shape == (0, 3)
        assert Forked.start(lambda: np.zeros((0, 4), np.float32)).result().shape == (0, 4)  # only empty arrays

        def refuse():
            raise SpcError("model.onnx: node n1 is wrong; re-export it")
        try:
            Forked.start(refuse).result()
        except SpcError as exc:
            assert "node n1" in str(exc)
        else:
            raise AssertionError("no error")

        class Unpicklable(Exception):
            def __init__(self, a, b):
                super().__init__(f"{a} {b}")
        def odd():
            raise Unpicklable(1, 2)
        for fn in (odd, lambda: os._exit(3), lambda: threading.Lock()):
            try:
                Forked.start(fn).result()
            except ChildFailed as exc:
                print("failed:", exc)
            else:
                raise AssertionError("no failure")

        import time
        hung = Forked.start(lambda: time.sleep(60))
        try:
            hung.result(timeout=0.2)
        except ChildFailed as exc:
            print("failed:", exc)
        slow = Forked.start(lambda: time.sleep(60))
        slow.cancel()
        try:
            os.waitpid(slow.pid, os.WNOHANG)
        except ChildProcessError:
            print("reaped")
        t = threading.Thread(target=time.sleep, args=(1,))
        t.start()
        assert Forked.start(lambda: 1) is None  # another thread: no fork
        t.join()
        print("fds", len(os.listdir("/proc/self/fd")))
    """, tmp_path)
    assert out.count("failed:") == 4 and "Unpicklable: 1 2" in out and "status 3" in out, out
    assert "no result within 0.2 s" in out, out
    assert "reaped" in out


def test_the_validation_through_the_forked_child_catches_a_planted_wrong_lowering(tmp_path: Path) -> None:
    out = _py(WATCHED_COMPILE + """
        from spc.lowering import registry
        from test_translation_validation import _swap_permute

        model = _fold_model(tmp / "fold.onnx", channels_last=False)
        clean = compile_onnx(model, tmp / "clean.ttplan")
        assert not [n for n in clean.notes if n.startswith("validation:")], clean.notes
        registry.LOWERINGS["spc.ScoreFold"] = _swap_permute("spc.ScoreFold", "ttnn.permute", [0, 3, 2, 1, 4])
        result = compile_onnx(model, tmp / "fold.ttplan")
        notes = [n for n in result.notes if n.startswith("validation:")]
        assert len(notes) == 1 and "fuse-score-fold" in notes[0] and "%scores" in notes[0], result.notes
        assert started and all(f is not None for f in started), started
        print("forked", len(started))
    """, tmp_path)
    assert "forked" in out


def test_an_interrupted_validation_ends_its_child(tmp_path: Path) -> None:
    """Ctrl-C while this process runs the window checks (the child still on the source side):
    the child is ended and reaped, not left running."""
    out = _py(WATCHED_COMPILE + """
        import os
        from spc.validation import translation

        def interrupted(*args):
            raise KeyboardInterrupt
        translation._windows = interrupted
        try:
            compile_onnx(_fold_model(tmp / "fold.onnx", channels_last=False), tmp / "fold.ttplan")
        except KeyboardInterrupt:
            print("interrupted")
        assert started and started[-1] is not None, started
        try:
            os.waitpid(started[-1].pid, os.WNOHANG)
        except ChildProcessError:
            print("reaped")
        assert not (tmp / "fold.ttplan").exists()
    """, tmp_path)
    assert "interrupted" in out and "reaped" in out, out
