"""--explain: each candidate of a rule or fusion, how far it matched, why it stopped."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from spc.passes.explain import Explainer
from spc.passes.fuse_conv_bias_relu import RULES, FuseConvBiasRelu
from spc.passes.fuse_score_fold import FuseScoreFold
from spc.passes.manager import PassContext
from spc.passes.rewrite import apply_rules
from tests.conftest import ir
from tests.passes.test_fuse_score_fold import hf_fold

W = np.ones((4, 2, 3, 3), np.float32)


def explained(names: set[str]) -> PassContext:
    return PassContext(explainer=Explainer(frozenset(names)))


def test_a_rule_says_which_input_stopped_it() -> None:
    g = ir("""graph @t(%x: f32[1,2,6,7]) {
  %w: f32[4,2,3,3] = const @"w"
  %c: f32[1,4,6,7] = onnx.Conv(%x, %w) {pads = [1, 1, 1, 1]} #c
  %r: f32[1,4,6,7] = onnx.Relu(%c) #r
  %s: f32[1,2,6,7] = onnx.Relu(%x) #s
  return %r, %c, %s
}
""", w=W)
    ctx = explained({"conv-relu"})
    apply_rules(g, [r for r in RULES if r.name == "conv-relu"], explain=ctx.explainer)
    text = ctx.explainer.format()
    assert "conv-relu  #r (onnx.Relu)\n  root: onnx.Relu #r\n  stopped: at root.input[0]: %c has 1 user(s) and is a " \
           "graph output; fusing it away needs exactly one" in text
    assert "conv-relu  #s (onnx.Relu)\n  root: onnx.Relu #s\n  stopped: at root.input[0]: %x is a graph input" in text
    assert text.endswith("0 candidate(s) fired, 2 did not\n")


def test_a_check_says_why_and_a_pass_name_explains_all_its_rules() -> None:
    g = ir("""graph @t(%x: f32[1,2,6,7]) {
  %w: f32[4,2,3,3] = const @"w"
  %c: f32[1,4,6,7] = onnx.Conv(%x, %w) {pads = [1, 1, 1, 1]} #c
  %r: f32[1,4,6,7] = onnx.Relu(%c) #r
  return %r
}
""", w=W)
    ctx = explained({"fuse-conv-bias-relu"})
    FuseConvBiasRelu().run(g, ctx)
    text = ctx.explainer.format()
    assert "conv  #c (onnx.Conv)\n  root: onnx.Conv #c\n  stopped: the check: conv-relu will take it" in text
    assert "conv-relu  #r (onnx.Relu)" in text and "fired: %r from spc.Conv2d" in text


def test_a_fusion_names_its_nearest_miss() -> None:
    b = hf_fold(perm=(0, 1, 2, 3, 4))  # no interleave: not depth-to-space
    ctx = explained({"fuse-score-fold"})
    FuseScoreFold().run(b.g, ctx)
    attempt, after_softmax = ctx.explainer.attempts  # every 65-channel value is a candidate
    assert attempt.candidate == "%x (65 channels)" and after_softmax.candidate == "%softmax (65 channels)"
    assert attempt.steps[0].startswith("region: 6 node(s) from %x (onnx.Softmax, onnx.Slice, onnx.Transpose x2")
    assert attempt.outcome.startswith("stopped: no region value equals softmax over the channels")
    assert "of the wanted size; nearest %" in attempt.outcome and "max |diff|" in attempt.outcome


def test_nobody_listening_costs_nothing() -> None:
    b = hf_fold()
    ctx = PassContext()
    assert ctx.attempt("fuse-score-fold", "x") is None
    assert FuseScoreFold().run(b.g, ctx).stats == {"fused": 1}


def test_the_command_explains_a_fusion_without_writing_a_plan(small_onnx: Path, tmp_path: Path) -> None:
    from tests.conftest import one_line_error, spc

    code, out, err = spc("compile", small_onnx, "--explain", "fuse-keypoints")
    assert code == 0, err
    assert out.startswith("fuse-keypoints  the host post-processing (")
    assert "  outputs: " in out and "  fired: spc.Keypoints replaces" in out
    assert not small_onnx.with_suffix(".ttplan").exists() or small_onnx.with_suffix(".ttplan").stat().st_size
    code, out, err = spc("compile", small_onnx, "--explain", "conv-rleu")
    one_line_error(code, err, contains="--explain conv-rleu: no such rule or fusion")
