"""Models of several tensor inputs (a matcher's keypoints, descriptors and image sizes): compiled
with the validation, run from .npz files (`spc run`), compared with onnxruntime (`spc check`), on
the emulator and on the mock p150; every bad .npz one line, nothing written."""

from __future__ import annotations

import io
import json
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from spc.plan.io import read_plan
from spc.ttnn.formats import DataFormat
from tests.conftest import one_line_error, spc

N, M, D = 32, 24, 16
ROOT = Path(__file__).resolve().parents[1]


def matcher_like() -> onnx.ModelProto:
    """Two images' keypoints and descriptors: the keypoints normalised by the image size, the
    descriptors projected (MatMul by a weight), a similarity by Einsum, a dual softmax, a layer
    norm whose scale is an input (so it runs on the host, one output of three), and the best match
    per row."""
    rng = np.random.default_rng(3)
    w = helper.make_tensor("w", TensorProto.FLOAT, [D, D], rng.standard_normal((D, D)).astype(np.float32).ravel())
    nodes = [
        helper.make_node("Div", ["kpts0", "size0"], ["k0"]),
        helper.make_node("MatMul", ["desc0", "w"], ["p0"]),
        helper.make_node("MatMul", ["desc1", "w"], ["p1"]),
        helper.make_node("Einsum", ["p0", "p1"], ["sim"], equation="bmd,bnd->bmn"),
        helper.make_node("Softmax", ["sim"], ["rows"], axis=2),
        helper.make_node("Softmax", ["sim"], ["cols"], axis=1),
        helper.make_node("Mul", ["rows", "cols"], ["scores"]),
        helper.make_node("ArgMax", ["scores"], ["matches0"], axis=2, keepdims=0),
        helper.make_node("LayerNormalization", ["p0", "gamma"], ["normed"], axis=-1),
    ]
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    graph = helper.make_graph(
        nodes, "matcher_like",
        [helper.make_tensor_value_info("kpts0", f, [1, N, 2]), helper.make_tensor_value_info("size0", f, [1, 1, 2]),
         helper.make_tensor_value_info("desc0", f, [1, N, D]), helper.make_tensor_value_info("desc1", f, [1, M, D]),
         helper.make_tensor_value_info("gamma", f, [D])],
        [helper.make_tensor_value_info("k0", f, [1, N, 2]), helper.make_tensor_value_info("scores", f, [1, N, M]),
         helper.make_tensor_value_info("matches0", i64, [1, N]), helper.make_tensor_value_info("normed", f, [1, N, D])],
        [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def feeds(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"kpts0": (rng.random((1, N, 2)) * [160, 120]).astype(np.float32),
            "size0": np.array([[[160, 120]]], np.float32),
            "desc0": rng.standard_normal((1, N, D)).astype(np.float32),
            "desc1": rng.standard_normal((1, M, D)).astype(np.float32),
            "gamma": (1 + 0.1 * rng.standard_normal(D)).astype(np.float32)}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tensors")
    src = folder / "matcher_like.onnx"
    onnx.save(matcher_like(), src)
    plan = folder / "m.ttplan"
    code, _, err = spc("compile", src, "-o", plan)
    assert code == 0, err
    return src, plan


def test_compiles_with_the_products_on_the_device(model: tuple[Path, Path]) -> None:
    _, plan = model
    program = read_plan(plan).program
    assert [t.name for t in program.inputs] == ["kpts0", "size0", "desc0", "desc1", "gamma"]
    calls = [op.op for op in program.device_ops]
    assert calls.count("ttnn.matmul") == 3 and "ttnn.softmax" in calls
    host = {n.op for n in [*program.host_pre, *program.host_post]}
    assert "onnx.LayerNormalization" in host  # its scale is an input: the host's, with one output of three
    assert "onnx.Einsum" not in host
    # one upload per run: the host packs the inputs, the device's first calls cut them back
    assert len(program.device_inputs) == 1 and program.host_pre[-1].op == "spc.Pack"
    assert {op.output for op in program.device_ops[:16]} >= {"kpts0", "size0", "desc0", "desc1"}
    # tensors, not an image: uploaded in float32 (bf16 would hold a 160-pixel position to 1/2 pixel)
    assert program.input_storage == dict.fromkeys([t.name for t in program.device_inputs], DataFormat.FLOAT32)


def test_run_matches_onnxruntime(model: tuple[Path, Path], tmp_path: Path) -> None:
    src, plan = model
    x = feeds()
    np.savez(tmp_path / "pair.npz", **x)
    code, out, err = spc("run", plan, tmp_path / "pair.npz", "-o", tmp_path / "out.npz", "--json")
    assert code == 0, err
    assert json.loads(out.splitlines()[0])["outputs"]["scores"] == [1, N, M]
    ours = np.load(tmp_path / "out.npz")
    ref = dict(zip(["k0", "scores", "matches0", "normed"],
                   ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, x)))
    np.testing.assert_allclose(ours["k0"], ref["k0"], rtol=1 / 128)  # float32 positions, a bf16 quotient
    # on the host in float32, of the device's bf16 projection
    assert np.corrcoef(ours["normed"].ravel(), ref["normed"].ravel())[0, 1] > 0.9999
    assert np.corrcoef(ours["scores"].ravel(), ref["scores"].ravel())[0, 1] > 0.99  # bf16 products
    assert (ours["matches0"] == ref["matches0"]).mean() > 0.9
    assert ours["matches0"].dtype == np.int64


def test_positional_npz_and_check(model: tuple[Path, Path], tmp_path: Path) -> None:
    _, plan = model
    x = feeds(1)
    np.savez(tmp_path / "pos.npz", *x.values())  # arr_0 ... in the plan's input order
    code, out, err = spc("check", plan, tmp_path / "pos.npz", "--json", "--min-pcc", "0.9")
    assert code == 0, err
    (report,) = json.loads(out)
    assert set(report["outputs"]) == {"k0", "scores", "matches0", "normed"}
    assert report["exact"] == ["matches0"] and 0.9 < report["outputs"]["matches0"][0] <= 1
    equal, _, f1 = report["outputs"]["matches0"]
    assert f1 == pytest.approx(equal)  # ArgMax: every row matched, so the set F1 is the share equal
    code, _, err = spc("check", plan, tmp_path / "pos.npz", "--min-f1", "1.01")  # the match set is the bar
    assert code == 1 and "check failed on 1 of 1" in err
    assert report["outputs"]["k0"][0] > 0.9999 and report["outputs"]["scores"][0] > 0.99


def test_per_layer_on_tensor_inputs(model: tuple[Path, Path], tmp_path: Path) -> None:
    _, plan = model
    np.savez(tmp_path / "pair.npz", **feeds(2))
    code, out, err = spc("check", plan, tmp_path / "pair.npz", "--per-layer", "--json")
    assert code == 0, err
    (report,) = json.loads(out)
    tensors = {t["name"]: t for t in report["tensors"]}
    assert {"kpts0", "desc0", "desc1", "k0", "sim"} <= set(tensors), sorted(tensors)
    assert tensors["kpts0"]["max_abs"] == 0  # uploaded in float32: the positions as given
    assert tensors["k0"]["pcc"] > 0.9999 and tensors["sim"]["pcc"] > 0.999


def _npz_member(name: str, header_shape: tuple[int, ...], data: bytes) -> tuple[str, bytes]:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": header_shape})
    return name, buf.getvalue() + data


@pytest.mark.parametrize("case", ["missing", "extra", "shape", "padded", "bomb", "not-zip", "image", "pickle"])
def test_bad_npz_is_one_line(model: tuple[Path, Path], tmp_path: Path, case: str) -> None:
    _, plan = model
    x = feeds()
    path = tmp_path / "bad.npz"
    if case == "missing":
        np.savez(path, **{k: v for k, v in x.items() if k != "gamma"})
        want = "the file lacks gamma"
    elif case == "extra":
        np.savez(path, **x, other=np.zeros(3))
        want = "it has other, which the plan does not take"
    elif case == "shape":
        np.savez(path, **{**x, "desc1": np.zeros((1, M + 1, D), np.float32)})
        want = "bad.npz:desc1.npy: array shape [1, 25, 16] does not match the plan input [1, 24, 16]"
    elif case in ("padded", "bomb"):
        # a member whose data does not match its header; the bomb: deflated zeros that would
        # inflate to 1 GB, declared as the plan's small shape
        members = dict(_npz_member(f"{k}.npy", v.shape, v.astype("<f4").tobytes()) for k, v in x.items())
        name, blob = _npz_member("gamma.npy", (D,), bytes(4 * D + (1 << 30 if case == "bomb" else 4)))
        members[name] = blob
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            for k, v in members.items():
                z.writestr(k, v)
        want = "truncated or padded .npy"
    elif case == "not-zip":
        path.write_bytes(b"not a zip at all")
        want = "not an .npz (a zip archive)"
    elif case == "image":
        path = tmp_path / "img.png"
        path.write_bytes(b"\x89PNG")
        want = "give each run's as one .npz"
    else:
        with zipfile.ZipFile(path, "w") as z:
            for k, v in x.items():
                buf = io.BytesIO()
                np.save(buf, v.astype(object), allow_pickle=True)
                z.writestr(f"{k}.npy", buf.getvalue())
        want = "is not an integer or floating-point number"
    out = tmp_path / "out.npz"
    code, _, err = spc("run", plan, path, "-o", out)
    one_line_error(code, err, want)
    assert not out.exists()
    if case != "image":
        code, _, err = spc("check", plan, path)
        one_line_error(code, err, want)


def test_image_options_and_batch_are_refused(model: tuple[Path, Path], tmp_path: Path) -> None:
    src, plan = model
    np.savez(tmp_path / "pair.npz", **feeds())
    code, _, err = spc("run", plan, tmp_path / "pair.npz", "--viz", tmp_path / "v.png")
    one_line_error(code, err, "--viz is offered for image plans")
    code, _, err = spc("compile", src, "-o", tmp_path / "b.ttplan", "--batch", "2")
    one_line_error(code, err, "--batch 2 batches images, and the model takes 5 inputs")
    assert not (tmp_path / "b.ttplan").exists()


def test_runs_on_the_mock_p150(ttnn_python: str, model: tuple[Path, Path], tmp_path: Path) -> None:
    _, plan = model
    np.savez(tmp_path / "pair.npz", **feeds())
    done = subprocess.run([ttnn_python, "-m", "spc.cli", "run", str(plan), str(tmp_path / "pair.npz"), "-o",
                           str(tmp_path / "mock.npz"), "--backend", "ttnn-mock"],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert np.load(tmp_path / "mock.npz")["scores"].shape == (1, N, M)


def test_concat_of_an_input_and_a_device_result_takes_one_format(tmp_path: Path) -> None:
    """A float32 input joined with a bf16 result (SuperGlue concatenates keypoints and scores):
    the lowering casts to the first part's format, as ttnn's concat needs (the mock p150 refused
    it before), and the plan verifier refuses a plan that does not."""
    from spc.compiler import compile_onnx
    from spc.plan.verify import verify_plan

    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Concat", ["r", "b"], ["y"], axis=1)], "join",
        [helper.make_tensor_value_info("a", f, [1, 4, 8]), helper.make_tensor_value_info("b", f, [1, 3, 8])],
        [helper.make_tensor_value_info("y", f, [1, 7, 8])])
    src = tmp_path / "join.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), src)
    compile_onnx(src, tmp_path / "join.ttplan")
    plan = read_plan(tmp_path / "join.ttplan")
    ops = plan.program.device_ops
    concat = next(op for op in ops if op.op == "ttnn.concat")
    made = {op.output: op for op in ops}
    assert {made[n].dtype for n in concat.inputs if n in made} == {DataFormat.BFLOAT16}
    assert any(op.op == "ttnn.typecast" for op in ops)
    rng = np.random.default_rng(5)
    feeds = {"a": rng.normal(size=(1, 4, 8)).astype(np.float32), "b": rng.normal(size=(1, 3, 8)).astype(np.float32)}
    np.savez(tmp_path / "in.npz", **feeds)
    code, _, err = spc("run", tmp_path / "join.ttplan", tmp_path / "in.npz", "-o", tmp_path / "out.npz")
    assert code == 0, err
    want = np.concatenate([np.maximum(feeds["a"], 0), feeds["b"]], axis=1)
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], want, rtol=1e-2, atol=1e-2)
    cast = next(op for op in ops if op.op == "ttnn.typecast" and op.output in concat.inputs)
    cast.dtype = DataFormat.FLOAT32  # the cast undone: the formats meet again
    cast.args["dtype"] = DataFormat.FLOAT32
    with pytest.raises(Exception, match="joins tensors stored as bfloat16, float32"):
        verify_plan(plan.program, plan.weights)
