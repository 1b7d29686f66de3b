"""choose-precision and the precision plan: presets, per-block overrides, what reaches ttnn."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from spc.errors import SpcError
from spc.lowering.lower import lower
from spc.passes.choose_precision import ChoosePrecision
from spc.passes.manager import PassContext, PipelineOptions
from spc.passes.partition_host_device import PartitionHostDevice
from spc.ttnn.configs import ComputeConfig
from spc.ttnn.formats import DataFormat, MathFidelity
from spc.ttnn.precision import BlockPrecision, PrecisionPlan, load_precision_config
from tests.conftest import ir

NET = """graph @t(%x: f32[1,4,8,8]) {
  %inner.encoder.conv_blocks.0.conv_a.weight: f32[4,4,3,3] = const @"ea"
  %inner.keypoint_decoder.conv_score_a.weight: f32[4,4,1,1] = const @"ka"
  %e: f32[1,4,8,8] = spc.Conv2d(%x, %inner.encoder.conv_blocks.0.conv_a.weight) {activation = "relu", dilations = [1, 1], group = 1, kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [1, 1]} #enc
  %k: f32[1,4,8,8] = spc.Conv2d(%e, %inner.keypoint_decoder.conv_score_a.weight) {activation = "none", dilations = [1, 1], group = 1, kernel_shape = [1, 1], pads = [0, 0, 0, 0], strides = [1, 1]} #det
  %n: f32[1,4,8,8] = spc.L2Norm(%k) {axis = 1, eps = 1e-12} #l2norm
  return %n
}
"""


def compiled(plan: PrecisionPlan):
    g = ir(NET, ea=np.ones((4, 4, 3, 3), np.float32), ka=np.ones((4, 4, 1, 1), np.float32))
    PartitionHostDevice().run(g, PassContext())
    result = ChoosePrecision().run(g, PassContext(PipelineOptions(precision=plan)))
    return g, result


def test_presets_and_block_names() -> None:
    g, result = compiled(PrecisionPlan("balanced"))
    enc, det, norm = g.nodes
    assert enc.block == "encoder.conv_blocks.0.conv_a" and det.block == "keypoint_decoder.conv_score_a"
    assert enc.precision.math_fidelity is MathFidelity.HIFI2 and enc.precision.weights_dtype is DataFormat.BFLOAT16
    # the decisions are not attributes: the op's meaning is untouched
    assert norm.attrs == {"axis": 1, "eps": 1e-12}
    assert norm.block == "l2norm" and norm.precision == BlockPrecision(output_dtype=DataFormat.BFLOAT16)
    assert result.stats["preset"] == "balanced"


def test_a_short_reduction_keeps_float32_weights() -> None:
    """The image's first conv (here 1 channel x 3x3 = 9 products per output) under every preset;
    the 36-product conv after it and the 1x1 head (4 products: short too) as measured; a rule wins."""
    first = NET.replace("%x: f32[1,4,8,8]", "%x: f32[1,1,8,8]").replace("f32[4,4,3,3]", "f32[4,1,3,3]")
    for preset in ("accurate", "fast"):
        g = ir(first, ea=np.ones((4, 1, 3, 3), np.float32), ka=np.ones((4, 4, 1, 1), np.float32))
        PartitionHostDevice().run(g, PassContext())
        ChoosePrecision().run(g, PassContext(PipelineOptions(precision=PrecisionPlan(preset))))
        assert [n.precision.weights_dtype for n in g.nodes[:2]] == [DataFormat.FLOAT32] * 2
    g, _ = compiled(PrecisionPlan("fast"))
    assert [n.precision.weights_dtype for n in g.nodes[:2]] == [DataFormat.BFLOAT8_B, DataFormat.FLOAT32]
    g, _ = compiled(PrecisionPlan("accurate").with_rule("keypoint_decoder.*", weights_dtype="bfloat16"))
    assert g.nodes[1].precision.weights_dtype is DataFormat.BFLOAT16


def test_decisions_print_and_parse_back() -> None:
    from spc.ir.parser import parse_graph
    from spc.ir.printer import print_graph, weight_store

    g, _ = compiled(PrecisionPlan("fast").with_rule("l2norm", output_dtype="float32"))
    text = print_graph(g)
    assert '#enc @device <"encoder.conv_blocks.0.conv_a" w:bfloat8_b LoFi fp32acc out:bfloat16>' in text
    assert '#l2norm @device <"l2norm" out:float32>' in text
    again = parse_graph(text, weight_store(g))
    assert [(n.block, n.precision) for n in again.nodes] == [(n.block, n.precision) for n in g.nodes]
    assert print_graph(again) == text


def test_overrides_reach_the_ttnn_calls(tmp_path: Path) -> None:
    cfg = tmp_path / "p.toml"
    cfg.write_text('preset = "accurate"\n'
                   '[blocks."encoder.*"]\nweights_dtype = "bfloat8_b"\nmath_fidelity = "LoFi"\n'
                   '[blocks."keypoint_decoder.*"]\noutput_dtype = "float32"\nfp32_dest_acc_en = false\n'
                   '[blocks."l2norm"]\noutput_dtype = "float32"\n')
    g, _ = compiled(load_precision_config(cfg))
    program, _ = lower(g)
    conv_enc, conv_det = [op for op in program.device_ops if op.op == "ttnn.conv2d"]
    assert conv_enc.args["conv_config"].weights_dtype is DataFormat.BFLOAT8_B
    assert conv_enc.args["compute_config"].math_fidelity is MathFidelity.LOFI
    assert conv_det.args["compute_config"] == ComputeConfig(MathFidelity.HIFI4, fp32_dest_acc_en=False,
                                                            packer_l1_acc=True)
    assert conv_det.args["dtype"] is DataFormat.FLOAT32 and conv_det.dtype is DataFormat.FLOAT32
    # the norm computes in its input's format (float32 here), so no cast is needed
    assert [op.dtype for op in program.device_ops if op.source == "l2norm"][-1] is DataFormat.FLOAT32
    assert "ttnn.typecast" not in [op.op for op in program.device_ops]


def test_output_dtype_of_a_post_op_casts(tmp_path: Path) -> None:
    g, _ = compiled(PrecisionPlan("accurate").with_rule("l2norm", output_dtype="float32"))
    program, _ = lower(g)
    assert program.device_ops[-1].op == "ttnn.typecast" and program.device_ops[-1].output == "n"
    assert program.device_ops[-2].output == "n/computed"


def test_plan_description_round_trips() -> None:
    plan = PrecisionPlan("balanced").with_rule("enc*", weights_dtype="bfloat8_b").with_rule("l2norm", output_dtype="float32")
    assert PrecisionPlan.from_description(plan.describe()) == plan


@pytest.mark.parametrize(("text", "message"), [
    ('preset = "fastest"\n', "not a preset"),
    ('[blocks."x"]\nmath_fidelity = "HiFi5"\n', "math fidelity 'HiFi5' is not one of"),
    ('[blocks."x"]\nweight_dtype = "bfloat16"\n', "may set only"),
    ('colour = "blue"\n', "unknown keys"),
    ("preset = \n", "not valid TOML"),
])
def test_bad_configs_say_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / "p.toml"
    cfg.write_text(text)
    with pytest.raises(SpcError, match=message):
        load_precision_config(cfg)
