"""spc bisect: names the block whose precision costs the accuracy."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import one_line_error, spc


def test_finds_the_planted_culprit(small_onnx: Path, small_plan: Path, tmp_path: Path,
                                   images: dict[str, Path]) -> None:
    cfg = tmp_path / "p.toml"
    cfg.write_text('[blocks."keypoint_decoder.conv_score_a"]\nweights_dtype = "bfloat4_b"\nmath_fidelity = "LoFi"\n'
                   '[blocks."encoder.conv_blocks.1.conv_a"]\nmath_fidelity = "HiFi2"\n')
    fast = tmp_path / "fast.ttplan"
    code, _, err = spc("compile", small_onnx, "-o", fast, "--precision-config", cfg)
    assert code == 0, err
    code, out, err = spc("bisect", small_plan, fast, images["astronaut"], "--json")
    assert code == 0, err
    result = json.loads(out)
    assert [d["block"] for d in result["culprits"]] == ["keypoint_decoder.conv_score_a"]
    assert sorted(d["block"] for d in result["differences"]) == ["encoder.conv_blocks.1.conv_a",
                                                                  "keypoint_decoder.conv_score_a"]
    assert "bfloat4_b LoFi" in result["culprits"][0]["fast"]


def test_refuses_what_it_cannot_compare(small_onnx: Path, small_plan: Path, tmp_path: Path,
                                        images: dict[str, Path]) -> None:
    code, _, err = spc("bisect", small_plan, small_plan, images["camera"])
    one_line_error(code, err, contains="same precision everywhere")
    other = tmp_path / "single.ttplan"
    spc("compile", small_onnx, "-o", other, "--nms-single-pass", "--precision", "balanced")
    code, _, err = spc("bisect", small_plan, other, images["camera"])
    one_line_error(code, err, contains="different ttnn programs")
