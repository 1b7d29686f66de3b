"""spc check --per-layer: every device tensor that holds an ONNX value, against onnxruntime's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from msgspec.structs import replace

from spc.compiler import compile_onnx
from spc.errors import SpcError
from spc.plan.io import Plan, read_plan
from spc.plan.program import DEFAULT_IMAGE
from spc.runtime.inputs import load_input
from spc.tuning.per_layer import PerLayerReport, per_layer
from tests.conftest import one_line_error, spc

PLANTED = "encoder.conv_blocks.1.conv_b"  # a mid-encoder conv: 64 -> 64 channels at 60x80


def _run(plan_path: Path, image: Path, onnx: Path | None = None) -> PerLayerReport:
    plan = read_plan(plan_path)
    x = load_input(image, [int(d) for d in plan.program.inputs[0].shape], DEFAULT_IMAGE)
    return per_layer(plan, plan_path, x, onnx)


def test_the_accurate_plan_tracks_onnxruntime_tensor_by_tensor(small_plan: Path, images: dict[str, Path]) -> None:
    r = _run(small_plan, images["astronaut"])
    ops = [t.op for t in r.tensors]
    # the device input, 12 convs, 3 pools and the three fused ops' outputs (named as the values they replace)
    assert ops.count("spc.Conv2d") == 12 and ops.count("onnx.MaxPool") == 3, ops
    assert {"spc.ScoreFold", "spc.Nms", "spc.L2Norm"} <= set(ops) and len(r.tensors) == 19
    assert [t.call for t in r.tensors] == sorted(t.call for t in r.tensors)  # program order
    assert r.internal > 50 and not r.skipped  # the fused ops' insides and the read-back have no counterpart
    assert r.first_under is None, [(t.name, t.pcc) for t in r.under()]  # issue 15: no tensor under 0.99
    # every continuous map is far above the bar; the NMS output is a map of peaks, where each
    # near-tie bf16 resolves the other way is a whole peak moved (0.992 here, 0.987 on coffee.png)
    assert all(t.pcc >= 0.999 for t in r.tensors if t.op != "spc.Nms"), [(t.name, t.pcc) for t in r.tensors]
    conv = next(t for t in r.tensors if t.block == PLANTED)
    assert conv.precision == "w:bfloat16 HiFi4 fp32acc l1acc out:bfloat16" and conv.rel_err < 0.02
    d = r.as_dict()
    assert json.loads(json.dumps(d, allow_nan=False)) == d


def test_a_planted_precision_error_is_found_at_its_block(small_onnx: Path, small_plan: Path, tmp_path: Path,
                                                          images: dict[str, Path]) -> None:
    cfg = tmp_path / "p.toml"
    cfg.write_text(f'[blocks."{PLANTED}"]\nweights_dtype = "bfloat8_b"\nmath_fidelity = "LoFi"\n')
    planted = tmp_path / "planted.ttplan"
    code, _, err = spc("compile", small_onnx, "-o", planted, "--precision-config", cfg)
    assert code == 0, err
    r = _run(planted, images["astronaut"], small_onnx)
    assert r.worst_block == PLANTED, [(b.block, b.local_error) for b in r.blocks]
    own = {b.block: b.local_error for b in r.blocks}
    assert own[PLANTED] > 3 * max(e for b, e in own.items() if b != PLANTED), own
    assert next(t for t in r.tensors if t.block == PLANTED).precision.startswith("w:bfloat8_b LoFi")
    # the same block on the accurate plan adds a tenth of that
    assert _run(small_plan, images["astronaut"]).blocks[[b.block for b in r.blocks].index(PLANTED)].local_error \
        < own[PLANTED] / 5


def test_a_model_whose_fusions_did_not_fire(tmp_path: Path, images: dict[str, Path]) -> None:
    """MagicLeap's own graph (raw heads: no score fold, NMS or keypoint extraction; TorchScript's
    value names), and a small model nothing in spc recognises, held partly in the plain layout."""
    from tests.corpus.exports import cached

    src = cached("magicleap_legacy_op11", 120, 160)
    plan = tmp_path / "ml.ttplan"
    result = compile_onnx(src, plan)
    assert not {"spc.ScoreFold", "spc.Nms"} & {n.op.name for n in result.graph.nodes}
    r = _run(plan, images["camera"], src)
    names = {t.name for t in r.tensors}
    assert {"input.1", "/relu/Relu_output_0", "46", "52"} <= names and len(r.tensors) == 17, names
    assert r.first_under is None and r.worst_block is not None

    onnx_path = _unrecognised_model(tmp_path / "tiny.onnx")
    plan = tmp_path / "tiny.ttplan"
    compile_onnx(onnx_path, plan)
    loaded = read_plan(plan)
    assert {t.form.value for t in loaded.program.values.values()} == {"nhwc", "plain"}
    x = np.random.default_rng(1).random((1, 1, 16, 24), dtype=np.float32)
    r = per_layer(loaded, plan, x, onnx_path)
    assert [(t.name, t.op) for t in r.tensors] == [("x", "(input)"), ("r", "spc.Conv2d"), ("t", "onnx.Transpose"),
                                                  ("y", "onnx.Softmax")]
    assert all(t.pcc > 0.999 for t in r.tensors) and r.worst_block == "w"


def _unrecognised_model(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("Softmax", ["t"], ["y"], axis=-1)]
    weights = [numpy_helper.from_array(rng.normal(0, 0.3, (8, 1, 3, 3)).astype(np.float32), "w"),
               numpy_helper.from_array(rng.normal(0, 0.1, (8,)).astype(np.float32), "b")]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 16, 24])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 24, 8])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what the installed onnxruntime reads
    onnx.save(model, path)
    return path


def test_cli_json_marks_and_errors(small_plan: Path, small_onnx: Path, images: dict[str, Path]) -> None:
    code, out, err = spc("check", small_plan, images["camera"], "--per-layer", "--json")
    assert code == 0, err
    (r,) = json.loads(out)
    assert r["input"] == "camera.png" and r["min_pcc"] == 0.99 and len(r["tensors"]) == 19
    assert set(r["tensors"][0]) == {"name", "op", "block", "precision", "call", "shape", "pcc", "max_abs", "rel_err"}
    assert {"first_under", "worst_block", "blocks", "skipped", "internal"} <= set(r)
    # a bar above what bf16 reaches: the first tensor under it is marked, and the check fails
    code, out, err = spc("check", small_plan, images["camera"], "--per-layer", "--json", "--min-pcc", "0.99999")
    assert code == 1 and "check failed on 1 of 1" in err
    (r,) = json.loads(out)
    assert r["first_under"] == next(t["name"] for t in r["tensors"] if t["pcc"] < 0.99999)
    code, out, err = spc("check", small_plan, images["camera"], "--per-layer")
    assert code == 0 and "adds the most error" in out and "in program order" in out, err

    code, _, err = spc("check", small_plan, images["camera"], "--per-layer", "--backend", "ttnn-mock")
    one_line_error(code, err, contains="emu")
    code, _, err = spc("check", small_plan, images["camera"], "--per-layer", "--min-f1", "0.9")
    one_line_error(code, err, contains="--min-f1")
    code, _, err = spc("check", small_plan, images["camera"].with_name("missing.png"), "--per-layer")
    one_line_error(code, err, contains="missing.png")
    code, _, err = spc("check", small_plan, images["camera"], "--per-layer", "--onnx", small_plan)
    assert code == 1 and err.startswith("spc: error:"), err


def test_a_plan_without_the_record_is_refused(small_plan: Path, images: dict[str, Path]) -> None:
    plan = read_plan(small_plan)
    old = Plan(plan.manifest, replace(plan.program, values={}), plan.weights, plan.ir_text)
    with pytest.raises(SpcError, match="recompile"):
        per_layer(old, small_plan, load_input(images["camera"], [1, 3, 120, 160], DEFAULT_IMAGE), None)


def test_an_edited_record_is_refused(small_plan: Path, tmp_path: Path) -> None:
    from tests.test_untrusted_plans import edited, refused

    def rename(p: dict) -> dict:
        p["values"]["relu"]["name"] = "nothing"
        return p

    def resize(p: dict) -> dict:
        p["values"]["relu"].update(shape=[1, 64, 240, 160], device_shape=[1, 1, 38400, 64])
        return p

    refused(edited(small_plan, tmp_path / "a.ttplan", program=rename), "held value relu: no call or input makes")
    refused(edited(small_plan, tmp_path / "b.ttplan", program=resize), "held value relu: declared")
