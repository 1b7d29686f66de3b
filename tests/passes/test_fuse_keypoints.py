"""fuse-keypoints on the real HF export: the host post-processing is recognised by probing, and the
compact read-back it enables gives the dense path's keypoints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from spc.compiler import compile_onnx
from spc.frontend.onnx_import import import_onnx
from spc.ir.graph import Placement
from spc.passes.manager import PassContext, PassManager
from spc.passes.pipeline import default_pipeline
from spc.plan.io import read_plan
from spc.plan.program import DEFAULT_IMAGE
from spc.runtime.runner import Runner
from tests.conftest import ir


def fused(onnx: Path):
    g = import_onnx(onnx)
    ctx = PassContext()
    PassManager(default_pipeline(), [], stop_after="fuse-keypoints").run(g, ctx)
    return g, ctx


def test_the_hf_post_processing_is_one_op(small_onnx: Path) -> None:
    g, ctx = fused(small_onnx)
    post = [n for n in g.nodes if n.placement is Placement.HOST_POST]
    assert [n.op.name for n in post] == ["spc.Keypoints"] and not ctx.notes
    attrs = post[0].attrs
    # HF removes only the near borders (it compares with 8x the map's size): limits are H and W
    assert (attrs["border"], attrs["limit_y"], attrs["limit_x"]) == (4, 120, 160)
    assert attrs["threshold"] == float(np.float32(0.005))  # kept iff > 0.005f, as the model compares
    assert attrs["max_keypoints"] == -1 and attrs["cell"] == 8
    assert [v.name for v in g.outputs] == ["keypoints", "scores", "descriptors", "mask"]


def test_something_else_is_left_alone() -> None:
    g = ir("""graph @t(%x: f32[1,16,16], %d: f32[1,4,2,2]) {
  %n: f32[1,16,16] = spc.Nms(%x) {iterations = 2, radius = 4} #nms
  %l: f32[1,4,2,2] = spc.L2Norm(%d) {axis = 1, eps = 1e-12} #l2
  %a: f32[1,16,16] = onnx.Relu(%n) #r1
  %b: f32[1,4,2,2] = onnx.Relu(%l) #r2
  %c: f32[1,16,16] = onnx.Relu(%a) #r3
  %e: f32[1,4,2,2] = onnx.Relu(%b) #r4
  return %a, %b, %c, %e
}
""")
    from spc.passes.fuse_keypoints import FuseKeypoints
    from spc.passes.partition_host_device import PartitionHostDevice

    PartitionHostDevice().run(g, PassContext())
    for n in g.nodes:  # pretend the relus are host post-processing
        if n.op.name == "onnx.Relu":
            n.placement = Placement.HOST_POST
    ctx = PassContext()
    result = FuseKeypoints().run(g, ctx)
    assert not result.modified
    # the reason is the first question without an answer: what the first output is
    assert "not recognised" in ctx.notes[0] and "output %a [1, 16, 16] is none of keypoints" in result.stats["why_not"]


@pytest.fixture(scope="module")
def plans(small_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("readback")
    out = {"dense": folder / "dense.ttplan", "compact": folder / "compact.ttplan", "tight": folder / "tight.ttplan"}
    compile_onnx(small_onnx, out["dense"], dense=True)
    compile_onnx(small_onnx, out["compact"])
    compile_onnx(small_onnx, out["tight"], keypoint_capacity=32)
    return out


def image(images: dict[str, Path], name: str) -> np.ndarray:
    from spc.runtime.inputs import load_input

    return load_input(images[name], [1, 3, 120, 160], DEFAULT_IMAGE)


def test_compact_read_back_gives_the_dense_keypoints(plans: dict[str, Path], images: dict[str, Path]) -> None:
    program = read_plan(plans["compact"]).program
    assert [h.op for h in program.host_post] == ["spc.Unpack", "spc.KeypointsFromTopK"]
    assert [h.op for h in program.fallback_post] == ["spc.Keypoints"]
    x = image(images, "astronaut")
    with Runner(read_plan(plans["dense"])) as dense, Runner(read_plan(plans["compact"])) as compact:
        want, got = dense.run(x).outputs, compact.run(x).outputs
        assert compact.overflows == 0
    assert want["keypoints"].shape[1] > 32
    np.testing.assert_array_equal(got["keypoints"], want["keypoints"])
    np.testing.assert_array_equal(got["scores"], want["scores"])
    np.testing.assert_array_equal(got["mask"], want["mask"])
    # sampled on the device and stored in bfloat16 there, against float32 on the host
    np.testing.assert_allclose(got["descriptors"], want["descriptors"], atol=4e-3)


def test_a_frame_with_more_keypoints_than_slots_is_read_densely(plans: dict[str, Path],
                                                                images: dict[str, Path]) -> None:
    x = image(images, "astronaut")
    with Runner(read_plan(plans["dense"])) as dense, Runner(read_plan(plans["tight"])) as tight:
        want, got = dense.run(x).outputs, tight.run(x).outputs
        assert tight.overflows == 1  # 32 slots, more keypoints: nothing is cut
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_top_n_exports_read_back_n(exports, tmp_path: Path, images: dict[str, Path]) -> None:
    from spc.tuning.comparison import OrtReference

    onnx = exports(120, 160, max_keypoints=50)
    g, _ = fused(onnx)
    assert [n.attrs["max_keypoints"] for n in g.nodes if n.op.name == "spc.Keypoints"] == [50]
    plan = tmp_path / "top50.ttplan"
    compile_onnx(onnx, plan)
    x = image(images, "astronaut")
    with Runner(read_plan(plan)) as runner:
        got = runner.run(x).outputs
    assert got["keypoints"].shape == (1, 50, 2)
    ref = OrtReference(onnx, []).run(x)
    assert ref["keypoints"].shape == (1, 50, 2)
    # the 50 best of the device's scores against onnxruntime's float32 ones: nearly the same set
    ours, theirs = {tuple(k) for k in np.rint(got["keypoints"][0] * [160, 120])}, \
        {tuple(k) for k in np.rint(ref["keypoints"][0] * [160, 120])}
    assert len(ours & theirs) >= 45


def test_a_limit_above_the_count_keeps_every_keypoint_in_order(small_onnx: Path, exports,
                                                                images: dict[str, Path]) -> None:
    """The export's branch-free top-K (frontend/export.py) keeps HF's other branch: all, in raster order."""
    from spc.tuning.comparison import OrtReference

    onnx = exports(120, 160, max_keypoints=5000)
    x = image(images, "astronaut")
    got, want = OrtReference(onnx, []).run(x), OrtReference(small_onnx, []).run(x)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.parametrize("mode", ["threshold", "fixed"])
def test_the_read_back_does_not_depend_on_the_order_of_equal_scores(mode: str) -> None:
    """ttnn's topk leaves the order of equal values open (its golden is torch.topk's); the host
    tail reads the same keypoints whichever order the device gives them in."""
    from spc.ir.ops.keypoints import from_top_k

    rng = np.random.default_rng(5)
    values = np.array([0.9, 0.5, 0.5, 0.5, 0.3, 0.3, 0.1, 0.0], np.float32)
    positions = np.array([40, 7, 3, 22, 15, 9, 30, 1], np.float32)
    descriptors = rng.normal(size=(8, 4)).astype(np.float32)
    attrs = {"mode": mode, "threshold": 0.2, "border": 2, "limit_x": 10, "max_keypoints": 4, "height": 12,
             "width": 12, "cell": 8, "outputs": ["keypoints", "scores", "descriptors"]}
    want = from_top_k(values, positions, descriptors, attrs)
    for _ in range(5):
        order = np.lexsort((rng.random(8), -values))  # best first, equal values shuffled
        got = from_top_k(values[order], positions[order], descriptors[order], attrs)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    scores = list(want[1].reshape(-1))
    assert len(scores) == (4 if mode == "threshold" else 8) and scores == sorted(scores, reverse=True)
