"""Shared fixtures: a real SuperPoint export at a small size, compiled once per test session.

The suite runs on two pytest-xdist workers (pyproject.toml: ``-n 2 --dist loadgroup``). Session
fixtures are made once per worker; the torch exports they start from once for all (``_export``).
A module whose module-scoped fixtures are costly runs on one worker (``GROUPS``), the rest test
by test on whichever worker is free.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import pickle
import shutil
import sys
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from spc.ir.graph import Graph
from spc.ir.parser import parse_graph
from spc.ir.verify import verify
from spc.plan.io import manifest_digest

SMALL = (120, 160)


def ir(text: str, **weights: np.ndarray) -> Graph:
    """A graph from IR text (tests are written as IR in, IR out)."""
    g = parse_graph(text, weights)
    verify(g)
    return g


def assert_ir(g: Graph, expected: str) -> None:
    """``g`` printed is ``expected`` (the IR after a pass, as its docstring shows it), line by line."""
    from spc.ir.printer import print_graph

    got, want = print_graph(g).strip().splitlines(), expected.strip().splitlines()
    assert got == want, "\n".join(["the IR is", *got, "", "expected", *want])


def spc(*args: object) -> tuple[int, str, str]:
    """The `spc` command run in this process (click's runner): exit code, stdout, stderr."""
    from click.testing import CliRunner

    from spc.cli import main

    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def one_line_error(code: int, err: str, contains: str) -> None:
    """Bad input's answer: exit 1 and one `spc: error:` line that says ``contains``."""
    assert code == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spc: error:") and contains in lines[0], err


def members(plan: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(plan) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def write_members(path: Path, data: dict[str, bytes], *, rehash: bool = True) -> Path:
    """The plan's members as given, with the manifest's hashes and digest made to match (an
    attacker's edit, not damage), unless ``rehash`` is off."""
    if rehash:
        manifest = json.loads(data["manifest.json"])
        if isinstance(manifest, dict) and isinstance(manifest.get("members"), dict):
            for name in manifest["members"]:
                if name in data:
                    manifest["members"][name] = hashlib.sha256(data[name]).hexdigest()
            manifest["digest"] = manifest_digest(manifest)
            data = dict(data, **{"manifest.json": json.dumps(manifest).encode()})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, body in data.items():
            zf.writestr(name, body)
    return path


# Modules (or tests) kept on one worker, in file order, each a group: their module-scoped
# fixtures (a wheel and its venvs, compiles) are made once. Longest first: a worker starts on
# them while the other takes the tests one by one.
# (xdist's own xdist_group mark does not group under pytest 9: it renames item._nodeid, which
# pytest 9 no longer reads.)
GROUPS = {
    "tests/test_wheel.py": "wheel",  # builds the wheel, two venvs, runs the README from them
    "tests/test_fuzz.py": "fuzz",  # compiles three plan variants
    "tests/test_emit_py_injection.py": "emit-py",  # emits and runs the clean program
    "tests/test_corpus.py": "corpus",  # compiles every export of the corpus
    "tests/test_multichip.py": "multichip",  # compiles the plans it runs on three mock clusters
    "tests/test_batch.py": "batch",  # compiles a batch-1 and a batch-2 plan
    "tests/test_run_outputs.py": "run-outputs",  # runs the small plan on two images three ways
    "tests/test_ray_run.py": "ray",  # a 3-node Ray cluster (module-scoped), 60 images twice
    "tests/kernels/test_nms_kernels.py": "nms-kernels",  # compiles four plans
    # one module-level RNG draws every test's data: the tests see the data they were written
    # against only when they run in file order, in one process
    "tests/test_lowering.py": "lowering",
    "tests/test_frontend.py": "frontend",
    "tests/passes/test_conv_passes.py": "conv-passes",
}
_ORDER = list(dict.fromkeys(GROUPS.values()))


def group_of(nodeid: str) -> str | None:
    for prefix, group in GROUPS.items():
        if nodeid == prefix or nodeid.startswith((prefix + "::", prefix + "[")):
            return group
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a worker: the groups first, in ``GROUPS``' order (the scheduler hands out work in
    collection order); both workers collect the same order."""
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: _ORDER.index(g) if (g := group_of(item.nodeid)) else len(_ORDER))


def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    """``--dist loadgroup`` with the groups above: a group is one unit of work, every other test
    its own; units go out in collection order."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class Groups(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid) or super()._split_scope(nodeid)

    config.option.loadscopereorder = False  # not by size: in collection order
    return Groups(config, log)


def pytest_configure(config: pytest.Config) -> None:
    # With workers (-n 2 on 2 cores), one thread each: with torch's default of a thread per core,
    # two workers' threads spin waiting for each other's cores (test_api, test_cli and
    # test_fuse_keypoints: 54 s of CPU and 72 s of wall time, against 28 s and 58 s). Set before
    # the workers start, so that they and the processes they start inherit it.
    if config.getoption("numprocesses", None) and not hasattr(config, "workerinput"):
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ.setdefault(var, "1")
    # before the conformance modules are collected: onnx's cases from the cache (_cached_node_cases)
    import onnx.backend.test.case.node as node_cases

    global _collect_testcases
    if node_cases.collect_testcases is not _cached_node_cases:
        _collect_testcases = node_cases.collect_testcases
        node_cases.collect_testcases = _cached_node_cases


def pytest_sessionstart(session: pytest.Session) -> None:
    """Fetch the demo weights once, before the workers start, so that two of them never download
    them into the same folder at once (a no-op when they are in the cache already)."""
    if hasattr(session.config, "workerinput"):
        return
    from spc.errors import SpcError
    from spc.frontend.weights import demo_weights_path

    with contextlib.suppress(SpcError, OSError):  # offline: the tests that need them say so
        demo_weights_path()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` across processes (the workers of this run and other runs)."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@functools.cache
def _export_key() -> str:
    """What `spc export` writes depends on: its code, the weights, spc's version, the exporters."""
    import spc
    from spc.files import file_sha256
    from spc.frontend import export, weights

    h = hashlib.sha256()
    for source in (export.__file__, weights.__file__):
        h.update(Path(source).read_bytes())
    h.update(file_sha256(weights.demo_weights_path()).encode())
    h.update(" ".join([spc.__version__, *(metadata.version(p) for p in ("torch", "transformers", "onnxscript",
                                                                       "onnx"))]).encode())
    return h.hexdigest()[:16]


@functools.cache
def _exports_folder() -> Path:
    """This install's folder of kept exports in spc's cache folder (``$SPC_CACHE`` or ~/.cache/spc,
    tests/): torch.onnx writes the paths of the files it traced (spc's checkout, the venv's
    transformers and torch) into the model, so another checkout's export is other bytes. The
    folders of installs that are gone are removed."""
    import spc
    from spc.frontend.weights import cache_dir

    install = f"{sys.prefix}\n{Path(spc.__file__).resolve().parent}\n"
    root = cache_dir() / "tests"
    folder = root / f"exports_{hashlib.sha256(install.encode()).hexdigest()[:12]}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "install.txt").write_text(install)
    for other in root.glob("exports_*"):
        with contextlib.suppress(OSError, IndexError):
            if not all(Path(p).exists() for p in (other / "install.txt").read_text().splitlines()[:2]):
                shutil.rmtree(other, ignore_errors=True)
    return folder


def _export(h: int, w: int, dest: Path, max_keypoints: int | None = None) -> Path:
    """`spc export` at h x w (``max_keypoints`` as ``--max-keypoints``) into ``dest``: the same
    bytes as exporting there, as the export is deterministic (test_say_what_it_is exports afresh
    each run and compares). An export takes torch 7-20 s, so the file is made once per install
    and kept (``_exports_folder``), keyed by what it depends on; under a lock, so that of the
    workers (and of runs side by side) one exports while the others wait for its file."""
    from spc.frontend.export import export_onnx

    folder = _exports_folder()
    name = f"sp_{h}x{w}" + ("" if max_keypoints is None else f"_top{max_keypoints}")
    kept = folder / f"{name}_{_export_key()}.onnx"
    with _locked(folder / f"{name}.lock"):
        if not kept.exists():
            export_onnx(kept, h, w, max_keypoints=max_keypoints)
            for old in folder.glob(f"{name}_{'[0-9a-f]' * 16}.onnx"):  # made by other code
                if old != kept:
                    old.unlink(missing_ok=True)
        shutil.copyfile(kept, dest)
    return dest


def _cached_node_cases(op_type: str | None = None) -> list:
    """onnx's node conformance cases (``collect_testcases``), which spc/frontend/conformance.py
    reads when test_onnx_conformance and test_device_conformance are collected: made once per
    onnx, numpy and protobuf version and kept in spc's cache folder. Making them runs onnx's
    reference ops for every expected output (11-17 s, in each worker); onnx seeds numpy before
    each case, so the cases are the same bytes every time."""
    if op_type is not None:
        return _collect_testcases(op_type)
    return _node_cases()


@functools.cache
def _node_cases() -> list:
    from spc.files import atomic_write
    from spc.frontend.weights import cache_dir

    versions = [sys.version.split()[0], *(metadata.version(p) for p in ("onnx", "numpy", "protobuf"))]
    folder = cache_dir() / "tests"
    folder.mkdir(parents=True, exist_ok=True)
    kept = folder / f"onnx-node-cases_{hashlib.sha256(' '.join(versions).encode()).hexdigest()[:16]}.pickle"
    with _locked(folder / "onnx-node-cases.lock"):
        if kept.exists():
            with contextlib.suppress(Exception):  # a damaged file is made again
                return pickle.loads(kept.read_bytes())
        found = _collect_testcases()
        with contextlib.suppress(OSError):  # a read-only cache: made again next time
            atomic_write(kept, pickle.dumps(found, protocol=pickle.HIGHEST_PROTOCOL))
    return found


@pytest.fixture(scope="session")
def ttnn_python() -> str:
    """The Python 3.12 environment with ttnn 0.81.1 (mock p150); missing it fails, never skips."""
    python = os.environ.get("SPC_TTNN_PYTHON") or str(Path(__file__).resolve().parents[1] / ".venv-ttnn" / "bin" / "python")
    if not Path(python).exists():
        pytest.fail("no ttnn environment: run `make mock-env` (the README's test command does)")
    return python


@pytest.fixture(scope="session")
def small_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _export(*SMALL, tmp_path_factory.mktemp("export") / "sp.onnx")


@pytest.fixture(scope="session")
def exports(tmp_path_factory: pytest.TempPathFactory):
    """export(h, w, max_keypoints=None) -> the HF model exported so, once per session."""
    folder = tmp_path_factory.mktemp("exports")
    done: dict[tuple[int, int, int | None], Path] = {}

    def export(h: int, w: int, max_keypoints: int | None = None) -> Path:
        key = (h, w, max_keypoints)
        if key not in done:
            top = "" if max_keypoints is None else f"_top{max_keypoints}"
            done[key] = _export(h, w, folder / f"sp_{h}x{w}{top}.onnx", max_keypoints)
        return done[key]

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
