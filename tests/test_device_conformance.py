"""ONNX's conformance cases on the device path: every case whose ops all lower to ttnn is placed on
the device, lowered (lowering/lower_*.py, fused.py) and run by the emu backend with the device's
numerics, against the case's expected outputs. bf16 storage bounds how close it can be."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import numpy as np
import pytest

from spc.frontend.conformance import case_array, cases, restamped
from spc.frontend.onnx_import import import_model
from spc.ir.graph import Placement
from spc.lowering.lower import lower
from spc.lowering.registry import device_support
from spc.runtime.emu import EmuBackend
from spc.runtime.host import run_host

# where the device's bfloat16 storage cannot hold what the case checks
NUMERIC_LIMITS = {
    "test_softmax_large_number": "inputs 10000..10003 are one bfloat16 value (resolution 64 there)",
    "test_softmax_large_number_expanded": "inputs 10000..10003 are one bfloat16 value (resolution 64 there)",
    "test_softmax_large_number_expanded_ver18": "inputs 10000..10003 are one bfloat16 value",
    "test_logsoftmax_large_number": "inputs 10000..10003 are one bfloat16 value (resolution 64 there)",
    "test_logsoftmax_large_number_expanded": "inputs 10000..10003 are one bfloat16 value",
    "test_logsoftmax_large_number_expanded_ver18": "inputs 10000..10003 are one bfloat16 value",
    "test_tan": "tan near pi/2 magnifies the input's bfloat16 rounding past 2 %",
}


def with_constant_parameters(case, parameters_from: int = 99):
    """The case's model with its integer inputs (axes, pads, shapes: parameters, not data) made
    initializers, as exporters write them, and also every input from ``parameters_from`` on (a
    batch norm's statistics, a pad's value); the others stay inputs."""
    from onnx import numpy_helper

    model = restamped(case.model)
    if model is None:
        return None, []
    out = type(model)()
    out.CopyFrom(model)
    inputs = case.data_sets[0][0]
    kept, data = [], []
    for i, (vi, x) in enumerate(zip(list(out.graph.input), inputs)):
        x = case_array(x)
        if x.dtype.kind in "iu" or i >= parameters_from:
            out.graph.initializer.append(numpy_helper.from_array(x, vi.name))
        else:
            kept.append(vi)
            data.append(x)
    del out.graph.input[:]
    out.graph.input.extend(kept)
    return out, data


def _device_ready(case, parameters_from: int) -> bool:
    model, inputs = with_constant_parameters(case, parameters_from)
    if model is None:
        return False
    try:
        g = import_model(model, Path(case.name + ".onnx"), "case")
    except Exception:
        return False
    if not g.nodes or not inputs or any(x.dtype.kind not in "fb" for x in inputs):
        return False
    if any(o.type.dtype.value == "f64" for n in g.nodes for o in n.outputs):
        return False  # float64 models check digits bf16 does not have
    return all(device_support(n) is None for n in g.nodes)


def device_cases() -> list[tuple[object, int]]:
    """(case, where its parameters start) for the cases whose every node can run on the device:
    as written, or with every input but the first made a constant."""
    out = []
    for case in cases():
        for parameters_from in (99, 1):
            if _device_ready(case, parameters_from):
                out.append((case, parameters_from))
                break
    return out


def kept_device_cases() -> list[tuple[object, int]]:
    """``device_cases()``, kept in spc's cache folder under a hash of everything it depends on:
    spc's source, this file, the Python, onnx and numpy versions (onnx's cases are the same bytes
    for one onnx version: tests/conftest.py). Deciding takes each worker 6-7 s of collection."""
    import hashlib
    import json
    from importlib import metadata

    import spc
    from spc.files import atomic_write
    from spc.frontend.weights import cache_dir

    h = hashlib.sha256()
    package = Path(spc.__file__).parent
    for path in sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(f"{path.relative_to(package)}\0".encode() + path.read_bytes())
    h.update(Path(__file__).read_bytes())
    h.update(" ".join([sys.version, *(metadata.version(p) for p in ("onnx", "numpy", "protobuf"))]).encode())
    kept = cache_dir() / "tests" / f"device-cases_{h.hexdigest()[:16]}.json"
    by_name = {case.name: case for case in cases()}
    try:
        return [(by_name[name], parameters_from) for name, parameters_from in json.loads(kept.read_text())]
    except (OSError, ValueError, KeyError):  # not there yet (or damaged): decided afresh
        pass
    found = device_cases()
    with contextlib.suppress(OSError):
        kept.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(kept, json.dumps([[case.name, parameters_from] for case, parameters_from in found]).encode())
    return found


CASES = kept_device_cases()


def run_on_device(case, parameters_from: int) -> list[np.ndarray]:
    model, inputs = with_constant_parameters(case, parameters_from)
    g = import_model(model, Path(case.name + ".onnx"), "case")
    for n in g.nodes:
        n.placement = Placement.DEVICE
    program, tensors = lower(g, {}, compact=False)
    prepared = EmuBackend().prepare(program, tensors)
    feeds = {v.name: np.asarray(x) for v, x in zip(g.inputs, inputs)}
    run_host(program.host_pre, feeds, dict(tensors))  # several inputs: its spc.Pack makes the one upload
    dev_in = {t.name: t.layout.to_device(feeds[t.name].astype(np.float32)) for t in program.device_inputs}
    got = prepared.run(dev_in, [t.name for t in program.device_outputs])
    env = {t.name: t.to_host(got[t.name]) for t in program.device_outputs}
    run_host(program.host_post, env, dict(tensors))  # one read-back: its spc.Unpack gives each output back
    return [env[o.name] for o in g.outputs]


def test_there_are_device_cases() -> None:
    ops = {n.op_type for c, _ in CASES for n in c.model.graph.node}
    assert len(CASES) > 300 and {"BatchNormalization", "Softmax", "Transpose", "Concat", "Pad", "DepthToSpace",
                                 "ReduceL2", "Where", "MaxPool", "AveragePool"} <= ops


@pytest.mark.parametrize(("case", "parameters_from"), CASES, ids=[c.name for c, _ in CASES])
def test_case_on_the_device(case, parameters_from: int) -> None:
    if case.name in NUMERIC_LIMITS:
        pytest.xfail(NUMERIC_LIMITS[case.name])
    got = run_on_device(case, parameters_from)
    for a, b in zip(got, case.data_sets[0][1]):
        b = np.asarray(b)
        assert a.shape == b.shape
        if b.dtype == np.bool_:
            assert np.array_equal(a, b)
            continue
        finite = np.isfinite(b)
        assert np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(a[~finite], b[~finite])
        scale = float(np.abs(b[finite]).max()) if finite.any() else 1.0
        # inputs, intermediate results and outputs are stored in bfloat16 (8 significant bits)
        np.testing.assert_allclose(a[finite], b[finite], rtol=2e-2, atol=2e-2 * max(scale, 1e-3))


def one_per_op(found: list) -> list:
    """The first case of each set of ops: what the suite runs on the mock p150 (all of them:
    `make device-conformance`)."""
    seen: set[tuple[str, ...]] = set()
    out = []
    for case, parameters_from in found:
        ops = tuple(sorted({n.op_type for n in case.model.graph.node}))
        if ops not in seen:
            seen.add(ops)
            out.append((case, parameters_from))
    return out


def test_ttnn_accepts_every_lowered_case(ttnn_python: str, tmp_path: Path) -> None:
    """The same lowered programs on the real ttnn, on a mock p150: every call accepted."""
    import hashlib
    import os
    import subprocess

    from spc.plan.io import write_plan

    chosen = CASES if os.environ.get("SPC_ALL_DEVICE_CASES") else one_per_op(CASES)
    paths = []
    for case, parameters_from in chosen:
        model, _ = with_constant_parameters(case, parameters_from)
        g = import_model(model, Path(case.name + ".onnx"), "case")
        for n in g.nodes:
            n.placement = Placement.DEVICE
        program, tensors = lower(g, {}, compact=False)
        path = tmp_path / f"{case.name}.ttplan"
        source = {"file": case.name, "sha256": hashlib.sha256(model.SerializeToString()).hexdigest()}
        write_plan(path, program, tensors, "", {"target": "p150", "source": source})
        paths.append(str(path))
    done = subprocess.run([ttnn_python, "-m", "spc.runtime.ttnn_mock.check_plans", *paths], capture_output=True,
                          text=True, check=False, cwd=Path(__file__).resolve().parents[1])
    errors = [line for line in done.stdout.splitlines() if line.startswith("error")]
    assert not errors and done.returncode == 0, "\n".join(errors) or done.stderr[-2000:]
    assert done.stdout.count("ok ") == len(paths)
