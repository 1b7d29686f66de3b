"""A minute of the fuzz suite (tests/fuzz/; the long run is `make fuzz`, docs/fuzz.md): hostile
plans, ONNX models, inputs and output paths, each case made from (category, seed), must give a
one-line error or run consistently: never an internal error, a crash, a hang, or a changed input.

Hypothesis draws the seeds (derandomised, no example database: the same cases every run); a
failure names the case and the command that replays it with its output in full. The ONNX cases
run in a worker process, as onnx's C++ code may take a process down with it.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.harness import Fixtures, Result, Worker, build_fixtures, classify, lost, run_in_fresh_folder

# cases per category: about 30 s of tests on the 2-core machine the suite is timed on
EXAMPLES = {"plan-bytes": 40, "plan-members": 55, "inputs": 40, "paths": 40, "onnx": 35}
SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


def _settings(category: str) -> settings:
    return settings(max_examples=EXAMPLES[category], deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=False)


def _explain(r: Result) -> str:
    return (f"{r.category} seed {r.seed}: {r.outcome}: {r.detail}\n  case: {r.what}\n  spc {shlex.join(r.args)}\n"
            f"  stderr: {r.stderr.strip()[:2000]}\n  replay: {r.repro()}")


@pytest.fixture(scope="module")
def fuzz(small_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> Fixtures:
    """The fixtures of scripts/fuzz.py (the same export: a seed is the same case in both)."""
    return build_fixtures(tmp_path_factory.mktemp("fuzz"), onnx=small_onnx)


@pytest.fixture(scope="module")
def one_thread():
    """Cases are small: torch's threads would only fight each other (and the rest of the machine)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("category", ["plan-bytes", "plan-members", "inputs", "paths"])
def test_fuzz(category: str, fuzz: Fixtures, one_thread: None, tmp_path: Path) -> None:
    @_settings(category)
    @given(seed=SEEDS)
    def case(seed: int) -> None:
        r = run_in_fresh_folder(category, seed, fuzz, tmp_path)
        assert not r.bad, _explain(r)

    case()


def test_fuzz_onnx(fuzz: Fixtures) -> None:
    worker = Worker(fuzz.folder)
    try:
        @_settings("onnx")
        @given(seed=SEEDS)
        def case(seed: int) -> None:
            r = worker.run("onnx", seed)
            assert not r.bad, _explain(r)

        case()
    finally:
        worker.close()


def test_a_dead_or_silent_worker_is_counted(fuzz: Fixtures) -> None:
    """A segfault is a crash and a case that never answers a hang, and the next case runs."""
    worker = Worker(fuzz.folder, timeout=2.0)
    try:
        assert worker.run("selftest-crash", 0).outcome == "crash"
        assert worker.run("plan-bytes", 0).outcome in ("ok", "one-line error")
        hang = worker.run("selftest-hang", 0)
        assert hang.outcome == "hang" and "killed" in hang.detail
        assert worker.run("plan-bytes", 1).outcome in ("ok", "one-line error")
    finally:
        worker.close()


def test_outcomes_are_classified_as_the_issue_measures_them() -> None:
    assert classify(1, "spc: error: x.npy: no such file\n", SystemExit(1))[0] == "one-line error"
    assert classify(1, "note: x.png resized\nspc: error: y.png: not an image\n", SystemExit(1))[0] == "one-line error"
    assert classify(1, "spc: error: a\nspc: error: b\n", SystemExit(1))[0] == "crash"
    assert classify(1, "Traceback (most recent call last):\n", SystemExit(1))[0] == "crash"
    assert classify(2, "spc: internal error: KeyError: 'x'\n", SystemExit(2))[0] == "internal error"
    assert classify(2, "Usage: spc run\n", SystemExit(2))[0] == "internal error"
    assert classify(None, "", KeyError("x"))[0] == "internal error"
    assert classify(-11, "", SystemExit(-11))[0] == "crash"
    assert classify(0, "", None)[0] == "ok"
    before = {"in.npy": ("file", "a", 0o644), "out.npz": ("file", "b", 0o644), "link": ("link", "in.npy")}
    assert lost(before, {**before, "out.npz": ("file", "c", 0o644)}, frozenset({"out.npz"})) == []
    assert lost(before, {**before, "in.npy": ("file", "c", 0o644)}, frozenset({"out.npz"})) == ["in.npy"]
    assert lost(before, {k: v for k, v in before.items() if k != "link"}, frozenset()) == ["link"]
