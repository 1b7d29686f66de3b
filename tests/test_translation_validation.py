"""spc compile's translation validation (validation/translation.py): a plan that departs from its
source is never written. Planted wrong lowerings are caught and named; a fusion whose plan departs
is dropped for the op-by-op lowering; exporters' near misses of the score fold stay correct."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from spc.compiler import compile_onnx
from spc.errors import SpcError
from spc.lowering import registry
from spc.lowering.emitter import Emitter
from spc.plan.io import read_plan
from spc.ttnn.layout import DeviceLayout
from spc.validation import translation


def _fold_model(path: Path, *, mode: str = "DCR", channels_last: bool = True, axis: int = 1,
                h: int = 4, w: int = 6, k: int = 1) -> Path:
    """A detector head as TF exports it through tf2onnx: a 1x1 conv to 65 channels, softmax over
    the channels, the dustbin dropped, DepthToSpace, then the map channels-last [1, 8h, 8w, 1]."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((65, 1, k, k)).astype(np.float32) * 3, "w")
    bias = numpy_helper.from_array(rng.standard_normal(65).astype(np.float32), "b")
    consts = [numpy_helper.from_array(np.array(v, np.int64), n)
              for n, v in (("starts", [0]), ("ends", [64]), ("axes", [1]))]
    nodes = [helper.make_node("Conv", ["image", "w", "b"], ["logits"], kernel_shape=[k, k], pads=[k // 2] * 4),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=axis),
             helper.make_node("Slice", ["probs", "starts", "ends", "axes"], ["kept"]),
             helper.make_node("DepthToSpace", ["kept"], ["map"], blocksize=8, mode=mode)]
    out_shape = [1, 1, 8 * h, 8 * w]
    if channels_last:
        nodes.append(helper.make_node("Transpose", ["map"], ["scores"], perm=[0, 2, 3, 1]))
        out_shape = [1, 8 * h, 8 * w, 1]
    else:
        nodes.append(helper.make_node("Identity", ["map"], ["scores"]))
    graph = helper.make_graph(nodes, "fold", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, h, w])],
                              [helper.make_tensor_value_info("scores", TensorProto.FLOAT, out_shape)],
                              [weight, bias, *consts])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, path)
    return path


def _run(plan: Path, x: np.ndarray) -> np.ndarray:
    from spc.runtime.runner import Runner

    with Runner(read_plan(plan)) as r:
        return next(iter(r.run(x).outputs.values()))


def _ort(model: Path, x: np.ndarray, optimise: bool = True) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    if not optimise:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    return sess.run(None, {"image": x})[0]


@pytest.mark.parametrize("mode,channels_last,axis", [("DCR", True, 1), ("DCR", False, 1), ("CRD", True, 1),
                                                     ("CRD", False, 1), ("DCR", True, -3)])
def test_score_fold_near_misses_compute_what_onnxruntime_does(tmp_path: Path, mode: str, channels_last: bool,
                                                              axis: int) -> None:
    model = _fold_model(tmp_path / "fold.onnx", mode=mode, channels_last=channels_last, axis=axis)
    result = compile_onnx(model, tmp_path / "fold.ttplan")
    x = np.random.default_rng(1).random((1, 1, 4, 6), dtype=np.float32)
    got, want = _run(tmp_path / "fold.ttplan", x), _ort(model, x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=0.02)  # bf16 storage of the emulated device
    # CRD is another permutation of the channels, but not with one output channel: then both are the fold
    assert result.graph.op_counts().get("spc.ScoreFold", 0) == 1
    assert not [n for n in result.notes if n.startswith("validation:")]  # the fused plan held


def _planted(op_name: str, call: str, edit) -> registry.Lowering:
    """``op_name``'s lowering with each ``call`` it emits given ``edit(args)``'s arguments instead."""
    real = registry.lowering_for(op_name)
    assert real is not None

    def wrong(em: Emitter, n, ins):
        first = len(em.ops)
        out = real.fn(em, n, ins)
        for op in em.ops[first:]:
            if op.op == call:
                op.args = edit(op.args)
        return out

    return registry.Lowering(wrong, real.check, real.integers, real.conv_form)


def _swap_permute(op_name: str, call: str, dims: list[int]) -> registry.Lowering:
    """A lowering of ``op_name`` that emits its ``call`` with ``dims`` (two axes swapped)."""
    return _planted(op_name, call, lambda args: {**args, "dims": dims})


def test_a_planted_wrong_fused_lowering_is_caught_and_the_fusion_dropped(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    model = _fold_model(tmp_path / "fold.onnx", channels_last=False)
    monkeypatch.setitem(registry.LOWERINGS, "spc.ScoreFold", _swap_permute("spc.ScoreFold", "ttnn.permute",
                                                                           [0, 3, 2, 1, 4]))
    result = compile_onnx(model, tmp_path / "fold.ttplan")
    notes = [n for n in result.notes if n.startswith("validation:")]
    assert len(notes) == 1 and "fuse-score-fold" in notes[0] and "%scores" in notes[0], result.notes
    assert "spc.ScoreFold" not in result.graph.op_counts()
    x = np.random.default_rng(2).random((1, 1, 4, 6), dtype=np.float32)
    np.testing.assert_allclose(_run(tmp_path / "fold.ttplan", x), _ort(model, x), atol=0.02)
    manifest = read_plan(tmp_path / "fold.ttplan").manifest
    assert manifest["validation"]["compared"] >= 1
    assert any("dropped" in r for r in manifest["recognised"])


def test_a_planted_wrong_conv_lowering_is_caught_on_a_small_map(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The convolutions are cut from the full-size run and checked on a small map: a lowering
    that swapped height and width departs there, and the conv is left to the host, op by op."""
    model = _fold_model(tmp_path / "fold.onnx", channels_last=False, k=3)
    monkeypatch.setitem(registry.LOWERINGS, "spc.Conv2d", _planted("spc.Conv2d", "ttnn.conv2d", lambda args: {
        **args, "input_height": args["input_width"], "input_width": args["input_height"]}))
    result = compile_onnx(model, tmp_path / "fold.ttplan")
    notes = [n for n in result.notes if n.startswith("validation:")]
    assert len(notes) == 1 and "%logits" in notes[0] and "fuse-conv-bias-relu dropped" in notes[0], result.notes
    x = np.random.default_rng(4).random((1, 1, 4, 6), dtype=np.float32)
    np.testing.assert_allclose(_run(tmp_path / "fold.ttplan", x), _ort(model, x), atol=0.02)


def _transposing_model(path: Path) -> Path:
    rng = np.random.default_rng(5)
    weight = numpy_helper.from_array(rng.standard_normal((4, 1, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["image", "w"], ["features"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Transpose", ["features"], ["out"], perm=[0, 3, 2, 1])]
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 4, 6])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 6, 4, 4])], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


@pytest.mark.parametrize("budget", [None, 0])
def test_a_planted_wrong_lowering_outside_any_fusion_refuses_the_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       budget: int | None) -> None:
    """No fusion to drop: a bug, reported as such with the node and the tensor, and no plan. Past
    the keep budget (0) only the fused ops' values are compared one by one: the wrong lowering
    still departs, at the model's outputs."""
    model = _transposing_model(tmp_path / "t.onnx")
    if budget is not None:
        monkeypatch.setattr(translation, "KEEP_BYTES", budget)
    real = registry.lowering_for("onnx.Transpose")
    monkeypatch.setitem(registry.LOWERINGS, "onnx.Transpose", _swap_permute("onnx.Transpose", "ttnn.permute",
                                                                            [0, 3, 1, 2]))
    out = tmp_path / "t.ttplan"
    where = r" at %out \(onnx\.Transpose" if budget is None else ""
    with pytest.raises(SpcError, match=r"spc bug: the plan departs from the model" + where):
        compile_onnx(model, out)
    assert not out.exists() and not list(tmp_path.glob("*.part"))  # the plan's file under way removed too
    monkeypatch.setitem(registry.LOWERINGS, "onnx.Transpose", real)
    compile_onnx(model, out)  # the real lowering holds
    x = np.random.default_rng(6).random((1, 1, 4, 6), dtype=np.float32)
    np.testing.assert_allclose(_run(out, x), _ort(model, x), atol=0.05, rtol=0.02)


def test_no_verify_is_recorded_in_the_manifest(tmp_path: Path) -> None:
    model = _fold_model(tmp_path / "fold.onnx")
    compile_onnx(model, tmp_path / "a.ttplan", verify=False)
    assert read_plan(tmp_path / "a.ttplan").manifest["validation"] == "skipped (--no-verify)"


def test_the_conv_layout_holds_only_maps_it_reads_as_maps() -> None:
    from spc.passes.fuse_score_fold import held_as_map

    assert held_as_map((1, 32, 48), 1, 32, 48)
    assert held_as_map((1, 1, 32, 48), 1, 32, 48)
    assert held_as_map((32, 48), 1, 32, 48)
    assert not held_as_map((1, 32, 48, 1), 1, 32, 48)  # the elements in order, but h read as channels
    assert DeviceLayout.of((1, 32, 48, 1)) == DeviceLayout(1, 48, 1, 32)


@pytest.mark.parametrize(("shape", "form"), [((2, 3, 4, 5), "nhwc"), ((2, 4, 5), "nhwc"), ((3, 4), "plain"),
                                              ((2, 3, 4, 5), "plain")])
def test_a_device_value_is_compared_in_the_devices_order(shape: tuple[int, ...], form: str) -> None:
    """The comparison reads the device's result and the source's value as views in the device's
    element order (DeviceTensor.paired): equal where the IR values are, and an element swapped in
    the IR's order shows at one index."""
    from spc.plan.program import DeviceTensor
    from spc.ttnn.layout import Form, layout_of

    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    lay = layout_of(Form(form), shape)
    t = DeviceTensor("v", list(shape), lay.device_shape, form)
    y = lay.to_device(x)
    got, want = t.paired(y, x)
    assert got.shape == want.shape and np.array_equal(got, want)
    assert np.shares_memory(got, y) and np.shares_memory(want, x)  # views: no copy
    swapped = x.copy().reshape(-1)
    swapped[[1, 2]] = swapped[[2, 1]]
    got, want = t.paired(y, swapped.reshape(shape))
    assert int(np.count_nonzero(got != want)) == 2
    assert translation._difference(got, want, selecting=False) is not None


def test_semantics_agree_with_the_interpreter_on_windows() -> None:
    """The convolution's and pools' meanings (ttnn/calls/window.py) against the IR's own ONNX meanings."""
    from spc.ir import ops
    from spc.ttnn.calls import MEANINGS
    from spc.ttnn.configs import Activation, ComputeConfig, Conv2dConfig
    from spc.ttnn.formats import DataFormat

    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 7, 9)).astype(np.float32)
    flat = DeviceLayout(2, 7, 9, 3).to_device(x)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    want = ops.get("onnx.Conv").evaluate([x, w, b], {"pads": [1, 0, 1, 2], "strides": [2, 1]})[0]
    args = {"batch_size": 2, "input_height": 7, "input_width": 9, "padding": [1, 1, 0, 2], "stride": [2, 1],
            "dilation": [1, 1], "groups": 1, "conv_config": Conv2dConfig(DataFormat.FLOAT32, None),
            "compute_config": ComputeConfig()}
    got = MEANINGS["ttnn.conv2d"]([flat], {"weight_tensor": w, "bias_tensor": b}, args)
    np.testing.assert_allclose(DeviceLayout.of(want.shape).from_device(got, want.shape), want, rtol=1e-5, atol=1e-5)
    args["conv_config"] = Conv2dConfig(DataFormat.FLOAT32, Activation.RELU)
    got = MEANINGS["ttnn.conv2d"]([flat], {"weight_tensor": w, "bias_tensor": b}, args)
    np.testing.assert_allclose(DeviceLayout.of(want.shape).from_device(got, want.shape), np.maximum(want, 0),
                               rtol=1e-5, atol=1e-5)
    for kernel, stride, pad, ceil in (([3, 3], [1, 1], [1, 1], False), ([2, 2], [2, 2], [0, 0], True),
                                      ([3, 2], [2, 1], [1, 0], False)):
        want = ops.get("onnx.MaxPool").evaluate([x], {"kernel_shape": kernel, "strides": stride,
                                                      "pads": [pad[0], pad[1], pad[0], pad[1]],
                                                      "ceil_mode": int(ceil)})[0]
        pool = {"batch_size": 2, "input_h": 7, "input_w": 9, "kernel_size": kernel, "stride": stride,
                "padding": pad, "dilation": [1, 1], "ceil_mode": ceil}
        got = MEANINGS["ttnn.max_pool2d"]([flat], {}, pool)
        np.testing.assert_array_equal(DeviceLayout.of(want.shape).from_device(got, want.shape), want)


def test_a_float16_model_with_casts_at_its_edges_compiles_and_matches_onnxruntime(tmp_path: Path) -> None:
    """A model converted to float16 as deployments convert it (onnxconverter-common's
    keep_io_types: float32 in and out, a Cast at each edge, float16 weights): the device formats
    come from the precision preset, as for a float32 model."""
    rng = np.random.default_rng(7)
    weight = numpy_helper.from_array(rng.standard_normal((8, 1, 3, 3)).astype(np.float16), "w")
    bias = numpy_helper.from_array(rng.standard_normal(8).astype(np.float16), "b")
    nodes = [helper.make_node("Cast", ["image"], ["half"], to=TensorProto.FLOAT16),
             helper.make_node("Conv", ["half", "w", "b"], ["conv"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["conv"], ["act"]),
             helper.make_node("Cast", ["act"], ["out"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "half", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 16, 24])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8, 16, 24])], [weight, bias])
    model = tmp_path / "half.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)
    result = compile_onnx(model, tmp_path / "half.ttplan")
    assert result.graph.op_counts().get("spc.Conv2d") == 1
    x = np.random.default_rng(8).random((1, 1, 16, 24), dtype=np.float32)
    np.testing.assert_allclose(_run(tmp_path / "half.ttplan", x), _ort(model, x), atol=0.05, rtol=0.02)


def _mutants(count: int, seed: int = 11) -> list[dict]:
    """Seeded edits of the fold region: an axis, a permutation, a constant, a mode."""
    rng = np.random.default_rng(seed)
    perms = [[0, 2, 3, 1], [0, 3, 2, 1], [0, 1, 3, 2], [0, 2, 1, 3]]
    out = []
    for _ in range(count):
        out.append({"axis": int(rng.choice([1, -3, 2, 3])), "end": int(rng.choice([64, 63, 65])),
                    "mode": str(rng.choice(["DCR", "CRD"])), "perm": perms[int(rng.integers(len(perms)))],
                    "start": int(rng.choice([0, 0, 1]))})
    return out


def _mutant_model(path: Path, m: dict) -> Path:
    h, w = 4, 6
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((65, 1, 1, 1)).astype(np.float32) * 3, "w")
    consts = [numpy_helper.from_array(np.array(v, np.int64), n)
              for n, v in (("starts", [m["start"]]), ("ends", [m["end"]]), ("axes", [1]))]
    kept = min(m["end"], 65) - m["start"]
    block = 8 if kept == 64 else 1
    nodes = [helper.make_node("Conv", ["image", "w"], ["logits"], kernel_shape=[1, 1]),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=m["axis"]),
             helper.make_node("Slice", ["probs", "starts", "ends", "axes"], ["kept"]),
             helper.make_node("DepthToSpace", ["kept"], ["map"], blocksize=block, mode=m["mode"]),
             helper.make_node("Transpose", ["map"], ["scores"], perm=m["perm"])]
    graph = helper.make_graph(nodes, "mutant", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, h, w])],
                              [helper.make_tensor_value_info("scores", TensorProto.FLOAT, None)], [weight, *consts])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def test_mutated_fold_regions_never_give_a_wrong_plan(tmp_path: Path) -> None:
    """The fusion-soundness property on seeded edits of the score-fold region: every mutant's
    plan computes what onnxruntime computes on it, fused or not (docs/validation.md)."""
    fused = 0
    for i, m in enumerate(_mutants(12)):
        model = _mutant_model(tmp_path / f"m{i}.onnx", m)
        result = compile_onnx(model, tmp_path / f"m{i}.ttplan")
        fused += result.graph.op_counts().get("spc.ScoreFold", 0)
        x = np.random.default_rng(i).random((1, 1, 4, 6), dtype=np.float32)
        got, want = _run(tmp_path / f"m{i}.ttplan", x), _ort(model, x)
        assert got.shape == want.shape, m
        np.testing.assert_allclose(got, want, atol=0.02, err_msg=str(m))
    assert fused  # some mutants are still the fold (another spelling), and were fused


def test_a_value_the_conv_layout_cannot_hold_keeps_its_node_on_the_host() -> None:
    """Placement asks a conv-layout lowering for every operand's rank: a rank-5 map (the fold as
    onnxsim leaves it, [1, 60, 8, 80, 8]) runs on the host, never an internal error."""
    from spc.ir import ops
    from spc.ir.graph import Graph
    from spc.ir.types import DType, TensorType
    from spc.lowering.registry import device_support

    g = Graph()
    x = g.add_input("x", TensorType(DType.F32, (1, 1, 6, 8, 4)))
    n = g.make_node(ops.get("onnx.MaxPool"), [x], {"kernel_shape": [3, 3, 3], "pads": [1] * 6}, name="pool")
    assert "conv layout holds ranks 2 to 4" in (device_support(n) or "")


def test_a_planted_wrong_batchnorm_fold_is_caught_against_the_source(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The conv checks compare with the source's own Conv -> BatchNormalization -> Relu, not with
    the folded conv: a fold that wrote a wrong bias is found, and no plan is written."""
    from spc.passes import fold_batchnorm

    rng = np.random.default_rng(9)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w", (4, 1, 3, 3)), ("scale", (4,)), ("shift", (4,)), ("mean", (4,)))]
    inits.append(numpy_helper.from_array(rng.random(4).astype(np.float32) + 0.5, "var"))
    nodes = [helper.make_node("Conv", ["image", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["out"])]
    graph = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 8, 12])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 8, 12])], inits)
    model = tmp_path / "bn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)
    real = fold_batchnorm.FoldBatchNorm.run

    def wrong(self, g, ctx):
        result = real(self, g, ctx)
        for n in g.nodes:
            if n.op.name == "onnx.Conv" and n.input(2) is not None:
                g.set_input(n, 2, g.add_const("wrong_bias", np.asarray(n.input(2).data) + np.float32(5)))
        return result

    monkeypatch.setattr(fold_batchnorm.FoldBatchNorm, "run", wrong)
    out = tmp_path / "bn.ttplan"
    with pytest.raises(SpcError, match="spc bug"):
        compile_onnx(model, out)
    assert not out.exists()
    monkeypatch.undo()
    compile_onnx(model, out)  # the real fold holds


def test_what_lies_between_two_convolutions_is_compared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tensor that only a convolution reads is computed and compared too (where what it needs is
    small): a planted wrong LeakyRelu between two convolutions is refused."""
    rng = np.random.default_rng(10)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w1", (4, 1, 3, 3)), ("w2", (2, 4, 3, 3)))]
    nodes = [helper.make_node("Conv", ["image", "w1"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["a"], ["b"], alpha=0.1),
             helper.make_node("Conv", ["b", "w2"], ["out"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "between", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 8, 12])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2, 8, 12])], inits)
    model = tmp_path / "between.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)
    monkeypatch.setitem(registry.LOWERINGS, "onnx.LeakyRelu",
                        _planted("onnx.LeakyRelu", "ttnn.leaky_relu", lambda args: {**args, "negative_slope": 0.9}))
    with pytest.raises(SpcError, match=r"spc bug: the plan departs from the model at %b"):
        compile_onnx(model, tmp_path / "between.ttplan")


def test_a_batch_plan_that_swaps_its_images_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A --batch plan is run on distinct images, each against the source on that image: a fold
    lowering that hands image 0 the map of image 1 departs."""
    model = _fold_model(tmp_path / "fold.onnx", channels_last=False, k=3)
    real = registry.lowering_for("spc.ScoreFold")
    assert real is not None

    def swapped(em: Emitter, n, ins):
        out = real.fn(em, n, ins)
        last = em.ops[-1]
        lay = em.layouts.pop(out)  # the name is made again below, by the concat
        rows = lay.device_shape[2] // 2
        last.output = out + "/in_order"
        em.layouts[last.output], em.dtypes[last.output] = lay, em.dtypes.pop(out)
        halves = [em.emit("ttnn.slice", [last.output], f"{out}/half{i}", lay, n.name, starts=[0, 0, i * rows, 0],
                          ends=[1, 1, (i + 1) * rows, 1], steps=[1, 1, 1, 1]) for i in (1, 0)]
        return em.emit("ttnn.concat", halves, out, lay, n.name, out_shape=lay.device_shape, dim=2)

    monkeypatch.setitem(registry.LOWERINGS, "spc.ScoreFold",
                        registry.Lowering(swapped, real.check, real.integers, real.conv_form))
    result = compile_onnx(model, tmp_path / "fold.ttplan", batch=2)
    notes = [n for n in result.notes if n.startswith("validation:")]
    assert len(notes) == 1 and "fuse-score-fold" in notes[0], result.notes
    assert "spc.ScoreFold" not in result.graph.op_counts()


def _quantized_model(path: Path) -> Path:
    """Two convolutions with a max pool between, quantized by onnxruntime's quantize_static (QDQ,
    int8 weights per channel, uint8 activations) as edge deployments prepare a model."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(9)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * k, n)
             for n, s, k in (("w1", (8, 1, 3, 3), 0.5), ("b1", (8,), 0.1), ("w2", (6, 8, 3, 3), 0.2),
                             ("b2", (6,), 0.1))]
    nodes = [helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["out"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 16, 24])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 6, 8, 12])], inits)
    plain = path.with_name("plain.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), plain)
    feeds = iter([{"image": rng.random((1, 1, 16, 24), dtype=np.float32)} for _ in range(4)])

    class Feeds(CalibrationDataReader):
        def get_next(self) -> dict | None:
            return next(feeds, None)

    quantize_static(str(plain), str(path), Feeds(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return path


def test_a_quantized_model_computes_what_onnxruntime_computes(tmp_path: Path) -> None:
    """The QDQ pairs become spc.FakeQuant, the convolutions integer convolutions with their scale;
    on the emulated device the outputs are onnxruntime's integer kernels' but for a few steps."""
    model = _quantized_model(tmp_path / "q.onnx")
    result = compile_onnx(model, tmp_path / "q.ttplan")
    counts = result.graph.op_counts()
    assert counts.get("spc.Conv2d") == 2 and "onnx.QuantizeLinear" not in counts, counts
    assert not [n for n in result.notes if n.startswith("validation:")], result.notes
    convs = [n for n in result.graph.nodes if n.op.name == "spc.Conv2d"]
    assert all(n.input(3) is not None and n.precision.output_dtype.value == "float32" for n in convs)
    np.testing.assert_array_equal(convs[0].inputs[1].data, np.round(convs[0].inputs[1].data))  # integers
    x = np.random.default_rng(10).random((1, 1, 16, 24), dtype=np.float32)
    got = _run(tmp_path / "q.ttplan", x)
    graph_meaning = _ort(model, x, optimise=False)  # the QDQ graph as written, step by step
    kernels = _ort(model, x)  # onnxruntime's QLinearConv kernels
    step = float(numpy_helper.to_array(next(i for i in onnx.load(model).graph.initializer
                                            if i.name == "out_scale")))
    # within a step of the graph's meaning, so within a step of the kernels' own slack against it:
    # a step or so, more where an x86 CPU without VNNI saturates u8 x s8 sums in 16 bits
    # (onnxruntime's quantization guide; 11 steps on an AVX2 EPYC), which is the kernels', not spc's
    off = np.abs(got - graph_meaning) / step
    assert off.max() <= 1.01 and np.mean(off > 0.5) < 0.02, (off.max(), np.mean(off > 0.5))
    assert np.abs(kernels - graph_meaning).max() / step < 64  # the same model: the kernels ran it


def test_a_planted_wrong_quantization_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _quantized_model(tmp_path / "q.onnx")
    monkeypatch.setitem(registry.LOWERINGS, "spc.FakeQuant", _planted("spc.FakeQuant", "ttnn.clamp", lambda args: {
        **args, "max": args["max"] - 100}))
    with pytest.raises(SpcError, match=r"spc bug: the plan departs from the model at %\S+ \(spc\.FakeQuant"):
        compile_onnx(model, tmp_path / "q.ttplan")
    assert not (tmp_path / "q.ttplan").exists()


def test_a_model_whose_declared_types_contradict_its_nodes_is_refused_as_inconsistent(tmp_path: Path) -> None:
    """onnxconverter-common's float16 conversion of the HF export retypes a Cast(to=FLOAT)'s output
    to float16 and leaves ``to``: onnxruntime refuses the file, and spc says why, naming the node."""
    nodes = [helper.make_node("Cast", ["image"], ["half"], to=TensorProto.FLOAT16, name="to_half"),
             helper.make_node("Cast", ["half"], ["back"], to=TensorProto.FLOAT, name="to_copy"),
             helper.make_node("Relu", ["back"], ["out"])]
    graph = helper.make_graph(nodes, "bad", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 4, 6])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT16, [1, 1, 4, 6])],
                              value_info=[helper.make_tensor_value_info("back", TensorProto.FLOAT16, [1, 1, 4, 6])])
    model = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)
    with pytest.raises(SpcError, match=r"node to_copy \(Cast\): its output back is declared f16, but the node "
                                       r"computes f32: the model is inconsistent"):
        compile_onnx(model, tmp_path / "bad.ttplan")
    assert not (tmp_path / "bad.ttplan").exists()


def test_nms_pooled_in_4d_and_suppressed_in_3d_compiles_to_what_onnxruntime_computes(tmp_path: Path) -> None:
    """onnxsim's HF spelling of NMS: the pools read the (1, 1, H, W) map, the rest a (1, H, W)
    reshape of it; spc.Nms is fused with a view, and the plan (validated) equals onnxruntime."""
    h, w, r = 24, 32, 2
    zeros = numpy_helper.from_array(np.zeros((1, h, w), np.float32), "zeros")
    consts = [zeros, numpy_helper.from_array(np.array([1, h, w], np.int64), "flat"),
              numpy_helper.from_array(np.array([1], np.int64), "ax1"), numpy_helper.from_array(np.float32(0), "z")]
    nodes, k = [helper.make_node("Reshape", ["x", "flat"], ["s"])], [0]

    def pool(v: str) -> str:
        k[0] += 1
        nodes.append(helper.make_node("MaxPool", [v], [f"p{k[0]}"], kernel_shape=[2 * r + 1] * 2, pads=[r] * 4))
        nodes.append(helper.make_node("Squeeze", [f"p{k[0]}", "ax1"], [f"q{k[0]}"]))
        return f"q{k[0]}"

    def unsq(v: str) -> str:
        nodes.append(helper.make_node("Unsqueeze", [v, "ax1"], [v + "_4d"]))
        return v + "_4d"

    nodes.append(helper.make_node("Equal", ["s", pool("x")], ["m0"]))
    mask = "m0"
    for i in range(2):
        nodes.append(helper.make_node("Cast", [mask], [f"c{i}"], to=TensorProto.FLOAT))
        nodes.append(helper.make_node("Greater", [pool(unsq(f"c{i}")), "z"], [f"sup{i}"]))
        nodes.append(helper.make_node("Where", [f"sup{i}", "zeros", "s"], [f"rest{i}"]))
        nodes.append(helper.make_node("Equal", [f"rest{i}", pool(unsq(f"rest{i}"))], [f"new{i}"]))
        nodes.append(helper.make_node("Not", [f"sup{i}"], [f"ns{i}"]))
        nodes.append(helper.make_node("And", [f"new{i}", f"ns{i}"], [f"a{i}"]))
        nodes.append(helper.make_node("Or", [mask, f"a{i}"], [f"m{i + 1}"]))
        mask = f"m{i + 1}"
    nodes.append(helper.make_node("Where", [mask, "s", "zeros"], ["nms"]))
    graph = helper.make_graph(nodes, "nms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, h, w])],
                              [helper.make_tensor_value_info("nms", TensorProto.FLOAT, [1, h, w])], consts)
    model = tmp_path / "nms.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)
    result = compile_onnx(model, tmp_path / "nms.ttplan")
    assert result.graph.op_counts().get("spc.Nms") == 1, result.graph.op_counts()
    assert not [n for n in result.notes if n.startswith("validation:")], result.notes
    rng = np.random.default_rng(3)
    x = (rng.integers(0, 4, (1, 1, h, w)) / 3.0 * (rng.random((1, 1, h, w)) < 0.5)).astype(np.float32)
    import onnxruntime as ort

    want = ort.InferenceSession(str(model)).run(None, {"x": x})[0]
    np.testing.assert_allclose(_run(tmp_path / "nms.ttplan", x), want, atol=0.02)  # bf16 storage of the device


def test_the_source_sides_failure_is_the_compiles_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The source's side runs in a thread beside the device's: what it raises is raised by the
    compile, and no thread is left running."""
    import threading

    from spc.ir.interpreter import NodeFailed

    def fails(self, *args, **kwargs):
        raise NodeFailed("n7", "onnx.Relu", ValueError("planted"))

    monkeypatch.setattr(translation.Source, "run", fails)
    before = threading.active_count()
    with pytest.raises(SpcError, match=r"validation: the source graph does not run on a seeded image \(node n7"):
        compile_onnx(_fold_model(tmp_path / "fold.onnx", channels_last=False), tmp_path / "fold.ttplan")
    assert threading.active_count() == before
    assert not (tmp_path / "fold.ttplan").exists() and not list(tmp_path.glob("*.part"))


def test_an_interrupted_validation_waits_for_its_thread_and_writes_nothing(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while this thread runs the window checks (the source's side still running beside
    it): the interrupt goes on, the source's thread is waited for (none is left beside a later
    fork), and no plan is written."""
    import threading

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(translation, "_windows", interrupted)
    before = threading.active_count()
    with pytest.raises(KeyboardInterrupt):
        compile_onnx(_fold_model(tmp_path / "fold.onnx", channels_last=False), tmp_path / "fold.ttplan")
    assert threading.active_count() == before
    assert not (tmp_path / "fold.ttplan").exists() and not list(tmp_path.glob("*.part"))


def test_an_error_on_the_device_side_stops_the_source_side_at_its_next_node(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A refusal (or Ctrl-C) on this side does not wait for the source's whole run: its thread is
    asked to stop between nodes and waited for."""
    import threading
    import time

    from spc.ir.interpreter import Stopped

    def slow(self, feeds, given, also=(), keep=None, stop=None):
        for _ in range(3000):  # 30 s unless stopped
            if stop is not None and stop():
                raise Stopped("n")
            time.sleep(0.01)
        raise AssertionError("never stopped")

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(translation.Source, "run", slow)
    monkeypatch.setattr(translation, "_windows", interrupted)
    before, t0 = threading.active_count(), time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        compile_onnx(_fold_model(tmp_path / "fold.onnx", channels_last=False), tmp_path / "fold.ttplan")
    assert time.perf_counter() - t0 < 10 and threading.active_count() == before
