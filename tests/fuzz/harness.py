"""Fixtures, cases, outcomes and the worker pool of the fuzz suite.

A case is made from (category, seed) alone, in an empty work folder: the generator writes the
files it needs there and names the spc command line to run in it. Running the case calls spc's
CLI in-process (``click.testing.CliRunner`` on ``spc.cli.main``), with the work folder as the
current folder, and classifies what happened:

* ``ok``: exit 0, and what the command wrote is consistent (a run's .npz holds the plan's
  outputs with their declared types; a compiled plan reads back; an emitted program parses);
* ``one-line error``: exit 1 with exactly one stderr line, starting ``spc: error:`` (spc's
  deliberate ``note:`` lines aside);
* ``internal error``: ``spc: internal error`` or exit 2, an exception escaping the CLI, or an
  ok whose outputs are not consistent;
* ``crash``: a signal, or any other exit (exit 1 without a one-line error included);
* ``hang``: the case did not finish within its time;
* ``data loss``: a file that existed before the case changed or went away, unless it is an
  output the case names as replaceable (given ``--overwrite``) and the command succeeded.

In-process runs time out by SIGALRM; the :class:`Worker` runs cases in a child process, so that a
segfault or a hang in native code is counted rather than fatal.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import random
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUTCOMES = ("one-line error", "ok", "internal error", "crash", "hang", "data loss")
BAD = frozenset({"internal error", "crash", "hang", "data loss"})
CASE_SECONDS = 90.0  # in-process limit (SIGALRM); the worker's parent kills at twice that
# the plan variants compiled from the export: the plan reader and the runtime see each
PLAN_VARIANTS: dict[str, list[str]] = {"default": [], "dense": ["--dense", "--precision", "fast"],
                                       "kernels": ["--kernels", "on"]}


# -- fixtures -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fixtures:
    """A small SuperPoint export and its plans, built once; everything else is made per case."""

    folder: Path

    @property
    def onnx(self) -> Path:
        return self.folder / "sp.onnx"

    def plan(self, variant: str = "default") -> Path:
        return self.folder / f"sp_{variant}.ttplan"

    @functools.cache  # noqa: B019 (one Fixtures per process)
    def plan_bytes(self, variant: str = "default") -> bytes:
        return self.plan(variant).read_bytes()

    @functools.cache  # noqa: B019
    def members(self, variant: str = "default") -> dict[str, bytes]:
        """The plan's members by name, in the plan's order."""
        with zipfile.ZipFile(self.plan(variant)) as zf:
            return {i.filename: zf.read(i) for i in zf.infolist()}

    def manifest(self, variant: str = "default") -> dict[str, Any]:
        return json.loads(self.members(variant)["manifest.json"])

    def program(self, variant: str = "default") -> dict[str, Any]:
        return json.loads(self.members(variant)["program.json"])

    @functools.cache  # noqa: B019
    def input_shape(self, variant: str = "default") -> list[int]:
        return [int(d) for d in self.program(variant)["inputs"][0]["shape"]]

    @functools.cache  # noqa: B019
    def model_bytes(self) -> bytes:
        return self.onnx.read_bytes()


def _reads_back(plan: Path) -> bool:
    from spc.errors import SpcError
    from spc.plan.io import read_plan

    try:
        read_plan(plan)
    except (SpcError, OSError):
        return False
    return True


def build_fixtures(folder: Path, onnx: Path | None = None, height: int = 120, width: int = 160) -> Fixtures:
    """The export (``onnx``, or exported at ``height`` x ``width``: the size of the test suite's
    ``small_onnx``, so that a case is the same in both) and its plan variants in ``folder``;
    files already there are kept while they still read back with this spc."""
    from click.testing import CliRunner

    from spc.cli import main

    folder.mkdir(parents=True, exist_ok=True)
    fx = Fixtures(folder)
    if onnx is not None:
        if not fx.onnx.exists() or fx.onnx.read_bytes() != onnx.read_bytes():
            shutil.copyfile(onnx, fx.onnx)
            for variant in PLAN_VARIANTS:
                fx.plan(variant).unlink(missing_ok=True)
    elif not fx.onnx.exists():
        from spc.frontend.export import export_onnx

        export_onnx(fx.onnx, height, width)
    for variant, options in PLAN_VARIANTS.items():
        path = fx.plan(variant)
        if path.exists() and _reads_back(path) and path.stat().st_mtime >= fx.onnx.stat().st_mtime:
            continue
        result = CliRunner().invoke(main, ["compile", str(fx.onnx), "-o", str(path), "--overwrite", *options])
        if result.exit_code != 0:
            raise RuntimeError(f"cannot build the fuzz fixture {path}: {result.stderr or result.exception}")
    return fx


# -- cases ----------------------------------------------------------------------------------
Check = Callable[[Path], "str | None"]


@dataclass
class Case:
    """What a generator makes: the command to run in the work folder, and what may change."""

    what: str  # the mutation, one line
    args: list[str]  # spc's command line, paths relative to the work folder
    replaceable: frozenset[str] = frozenset()  # existing paths an ok run may replace (--overwrite given)
    check: Check | None = None  # on exit 0: None, or what is inconsistent
    category: str = ""
    seed: int = 0


Generator = Callable[[random.Random, Fixtures, Path], Case]


def _selftest_crash(rng: random.Random, fx: Fixtures, work: Path) -> Case:
    os.kill(os.getpid(), signal.SIGSEGV)
    raise AssertionError("unreachable")


def _selftest_hang(rng: random.Random, fx: Fixtures, work: Path) -> Case:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # as native code that never returns
    time.sleep(3600)
    raise AssertionError("unreachable")


@functools.cache
def generators() -> dict[str, Generator]:
    from tests.fuzz import inputs, models, paths, plans

    return {"plan-bytes": plans.plan_bytes, "plan-members": plans.plan_members, "onnx": models.onnx_case,
            "inputs": inputs.input_case, "paths": paths.path_case,
            # the harness's own test (tests/test_fuzz.py): a worker that dies, one that never answers
            "selftest-crash": _selftest_crash, "selftest-hang": _selftest_hang}


def category_names() -> tuple[str, ...]:
    return ("plan-bytes", "plan-members", "onnx", "inputs", "paths")


def rng_for(category: str, seed: int) -> random.Random:
    return random.Random(f"spc-fuzz:{category}:{seed}")


def make_case(category: str, seed: int, fx: Fixtures, work: Path) -> Case:
    case = generators()[category](rng_for(category, seed), fx, work)
    case.category, case.seed = category, seed
    return case


@dataclass
class Result:
    category: str
    seed: int
    outcome: str
    detail: str = ""
    what: str = ""
    args: list[str] = field(default_factory=list)
    seconds: float = 0.0
    stderr: str = ""
    stdout: str = ""

    def as_json(self) -> str:
        return json.dumps(vars(self))

    @property
    def bad(self) -> bool:
        return self.outcome in BAD

    def repro(self) -> str:
        return f"python scripts/fuzz.py --category {self.category} --seed {self.seed} --show"


# -- running one case -----------------------------------------------------------------------
class CaseTimeout(BaseException):
    """Raised by SIGALRM inside a case; a BaseException so that spc's handlers let it through."""


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    if seconds <= 0 or not hasattr(signal, "setitimer"):
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise CaseTimeout()

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def snapshot(folder: Path) -> dict[str, tuple]:
    """Every entry below ``folder`` (symlinks not followed): kind and content, to compare."""
    out: dict[str, tuple] = {}
    for root, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            p = Path(root) / name
            rel = os.path.relpath(p, folder)
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            elif stat.S_ISREG(st.st_mode):
                try:
                    digest = hashlib.blake2b(p.read_bytes(), digest_size=16).hexdigest()
                except OSError:
                    digest = "unreadable"
                out[rel] = ("file", digest, stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("other", stat.S_IFMT(st.st_mode))
    return out


def lost(before: dict[str, tuple], after: dict[str, tuple], replaceable: frozenset[str]) -> list[str]:
    """The entries of ``before`` that changed or went away, except ``replaceable`` ones."""
    allowed = {os.path.normpath(p) for p in replaceable}
    return [p for p, entry in before.items() if after.get(p) != entry and p not in allowed]


def classify(code: int | None, stderr: str, exc: BaseException | None) -> tuple[str, str]:
    if isinstance(exc, CaseTimeout):
        return "hang", f"no result within {CASE_SECONDS:.0f} s"
    if exc is not None and not isinstance(exc, SystemExit):
        return "internal error", f"escaped the CLI: {type(exc).__name__}: {str(exc)[:200]}"
    # spc's deliberate notes ("note: ...", e.g. an image resized) are not part of the error
    lines = [line for line in stderr.strip().splitlines() if not line.startswith("note: ")]
    internal = [line for line in lines if line.startswith("spc: internal error")]
    if internal or code == 2:
        return "internal error", (internal or lines or [f"exit {code}"])[0][:300]
    if code == 0:
        return "ok", ""
    if code == 1:
        if len(lines) == 1 and lines[0].startswith("spc: error:"):
            return "one-line error", lines[0][:300]
        return "crash", f"exit 1 without one `spc: error:` line: {' | '.join(lines)[:300]}"
    return "crash", f"exit {code}: {' | '.join(lines)[:300]}"


def run_case(category: str, seed: int, fx: Fixtures, work: Path, timeout: float = CASE_SECONDS) -> Result:
    """Make and run one case in ``work`` (an empty folder), in this process."""
    from click.testing import CliRunner

    from spc.cli import main

    t0 = time.perf_counter()
    result = Result(category, seed, "ok")
    try:
        with _alarm(timeout):
            case = make_case(category, seed, fx, work)
    except CaseTimeout:
        result.outcome, result.detail = "hang", "the fuzz generator did not finish"  # a bug of the suite
        return result
    except Exception as exc:  # a bug of the suite, reported as such
        result.outcome = "internal error"
        result.detail = f"the fuzz generator failed: {type(exc).__name__}: {exc}"
        result.stderr = traceback.format_exc()
        return result
    result.what, result.args = case.what, list(case.args)
    before = snapshot(work)
    exc: BaseException | None = None
    code: int | None = None
    stdout = stderr = ""
    with contextlib.chdir(work):
        try:
            with _alarm(timeout):
                got = CliRunner().invoke(main, case.args, catch_exceptions=True)
            code, stdout, stderr, exc = got.exit_code, got.stdout, got.stderr, got.exception
            if exc is not None and not isinstance(exc, SystemExit) and got.exc_info is not None:
                stderr += "".join(traceback.format_exception(*got.exc_info))  # SPC_DEBUG=1 lets it through
        except CaseTimeout as hang:  # fired outside the CLI's own frame
            exc = hang
        outcome, detail = classify(code, stderr, exc)
        if outcome == "ok" and case.check is not None:
            try:
                with _alarm(timeout):
                    why = case.check(work)
            except CaseTimeout:
                why = "the consistency check did not finish"
            except Exception as err:  # the check found what it could not read
                why = f"{type(err).__name__}: {str(err)[:200]}"
            if why:
                outcome, detail = "internal error", f"inconsistent output: {why}"
    gone = lost(before, snapshot(work), case.replaceable if code == 0 else frozenset())
    if gone:
        outcome, detail = "data loss", f"changed or removed: {', '.join(gone[:5])}" + (f" ({detail})" if detail else "")
    result.outcome, result.detail = outcome, detail
    result.stdout, result.stderr = stdout[-2000:], stderr[-2000:]
    result.seconds = time.perf_counter() - t0
    return result


def clear(folder: Path) -> None:
    """Remove ``folder`` whatever a case left in it (read-only folders included)."""
    def unlock(fn: Any, path: str, exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(path), 0o755)
            os.chmod(path, 0o755)
        with contextlib.suppress(OSError):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)

    for root, dirs, _ in os.walk(folder):
        for d in dirs:
            p = os.path.join(root, d)
            if not os.path.islink(p):
                with contextlib.suppress(OSError):
                    os.chmod(p, 0o755)
    shutil.rmtree(folder, onerror=unlock)


def run_in_fresh_folder(category: str, seed: int, fx: Fixtures, base: Path | None = None,
                        timeout: float = CASE_SECONDS) -> Result:
    work = Path(tempfile.mkdtemp(prefix=f"{category}-{seed}-", dir=base))
    try:
        return run_case(category, seed, fx, work, timeout)
    finally:
        clear(work)


# -- the worker pool ------------------------------------------------------------------------
class Worker:
    """A child process running cases (tests/fuzz/worker.py): a segfault kills only the child,
    and a case that does not finish is killed with it; either way the case is counted and the
    next one gets a fresh child."""

    def __init__(self, fixtures: Path, timeout: float = CASE_SECONDS) -> None:
        self.fixtures, self.timeout = fixtures, timeout
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.warm = False  # a first case also imports spc, torch and onnx
        self.base = Path(tempfile.mkdtemp(prefix="spc-fuzz-"))  # the cases' folders; outlives a killed child

    def _start(self) -> subprocess.Popen:
        # one thread each: the workers run side by side, one per core
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                   PYTHONFAULTHANDLER="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        env.pop("SPC_DEBUG", None)
        # stderr: native code's noise (onnx, torch) goes nowhere; results come on stdout
        return subprocess.Popen([sys.executable, "-m", "tests.fuzz.worker", str(self.fixtures), str(self.timeout),
                                 str(self.base)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                cwd=ROOT, env=env, start_new_session=True)

    def run(self, category: str, seed: int) -> Result:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        t0 = time.perf_counter()
        try:
            proc.stdin.write(f"{category} {seed}\n".encode())
            proc.stdin.flush()
        except BrokenPipeError:
            pass
        line = self._readline(proc, t0 + 2 * self.timeout + (0 if self.warm else 60))
        if line is not None and line.strip():
            try:
                result = Result(**json.loads(line))
            except (ValueError, TypeError):
                pass
            else:
                self.warm = True
                return result
        # no result: the child died (its stdout closed) or hangs
        if line is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
        if proc.poll() is None:
            self._kill()
            return Result(category, seed, "hang", f"no result within {time.perf_counter() - t0:.0f} s (killed)",
                          seconds=time.perf_counter() - t0)
        code = proc.wait()
        self.proc, self.warm = None, False
        self.restarts += 1
        why = f"signal {signal.Signals(-code).name}" if code < 0 else f"worker exit {code}"
        return Result(category, seed, "crash", f"the process died ({why})", seconds=time.perf_counter() - t0)

    @staticmethod
    def _readline(proc: subprocess.Popen, deadline: float) -> bytes | None:
        """A line from the child; what it wrote before closing its stdout; None at the deadline."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        buf = b""
        while not buf.endswith(b"\n"):
            left = deadline - time.perf_counter()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return buf
            buf += chunk
        return buf

    def _kill(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc, self.warm = None, False
            self.restarts += 1

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._kill()
        self.proc = None
        clear(self.base)


# -- consistency checks shared by the generators --------------------------------------------
_NUMPY = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.float32, "i64": np.int64,
          "i32": np.int32, "i16": np.int16, "i8": np.int8, "u8": np.uint8, "u16": np.uint16, "u32": np.uint32,
          "u64": np.uint64, "i1": np.bool_}


def npz_consistent(npz: Path, plan: Path, dense: bool = False) -> str | None:
    """A run's .npz against the plan it ran: the plan's outputs, each with its declared element
    type, rank and static sizes (and the probes' maps with --dense)."""
    from spc.plan.io import read_plan

    program = read_plan(plan).program
    if not npz.is_file():
        return f"{npz.name} was not written"
    with np.load(npz, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    want = {o.name for o in program.outputs} | (set(program.probes) if dense else set())
    extra = set(arrays) - want - {"image_size", "spc_plan_sha256"}  # the size before resizing, the plan that made it
    if want - set(arrays) or extra:
        return f"{npz.name} holds {sorted(arrays)[:6]}, not the plan's outputs {sorted(want)[:6]}"
    for o in program.outputs:
        a = arrays[o.name]
        if a.dtype != _NUMPY[o.dtype] or a.ndim != len(o.shape) or any(
                isinstance(d, int) and d != n for d, n in zip(o.shape, a.shape)):
            return f"output {o.name} is {a.dtype}{list(a.shape)}, declared {o.dtype}{o.shape}"
    return None


def plan_consistent(plan: Path) -> str | None:
    from spc.errors import SpcError
    from spc.plan.io import read_plan

    if not plan.is_file():
        return f"{plan.name} was not written"
    try:
        read_plan(plan)
    except SpcError as exc:
        return f"the plan spc wrote does not read back: {exc}"
    return None


def python_consistent(source: Path) -> str | None:
    if not source.is_file():
        return f"{source.name} was not written"
    try:
        compile(source.read_text(), str(source), "exec")
    except (SyntaxError, ValueError, UnicodeDecodeError) as exc:
        return f"the program spc wrote does not parse: {exc}"
    return None


def save_npy(path: Path, a: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, a, allow_pickle=False)
