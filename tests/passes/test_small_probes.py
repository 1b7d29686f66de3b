"""Recognition on small probes (passes/semantic_match.py: small_probe, confirm): the recognisers
search on small trial maps, confirm a match once at the model's size, and never evaluate a region
that cannot match at full size; fuse-keypoints asks many peaks per run and agrees with asking one
peak at a time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import spc.passes.fuse_l2norm as l2_pass
import spc.passes.fuse_score_fold as fold_pass
import spc.passes.insert_device_nms as nms_pass
from spc.frontend.onnx_import import import_onnx
from spc.ir.graph import Placement
from spc.ir.interpreter import evaluate_graph
from spc.ir.ops.spc_ops import l2_normalize, nms, score_fold
from spc.passes import fuse_keypoints
from spc.passes.manager import PassContext, PassManager
from spc.passes.pipeline import default_pipeline
from spc.passes.semantic_match import grow_region, small_probe
from tests.passes import test_fuse_l2norm as l2_cases
from tests.passes import test_fuse_score_fold as fold_cases
from tests.passes import test_insert_device_nms as nms_cases


@pytest.fixture
def full_size_evaluations(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, ...]]]:
    """The entry shapes of every region evaluated at the model's size, by any of the three passes."""
    seen: list[tuple[int, ...]] = []
    for module in (nms_pass, l2_pass, fold_pass):
        real = module.evaluate

        def spy(region, data, constants=None, real=real):
            if constants is None:
                seen.append(tuple(data.shape))
            return real(region, data, constants)

        monkeypatch.setattr(module, "evaluate", spy)
    yield seen


def test_nms_is_searched_small_and_confirmed_at_full_size(monkeypatch: pytest.MonkeyPatch,
                                                          full_size_evaluations: list) -> None:
    monkeypatch.setattr(nms_cases, "SHAPE", (1, 60, 80))
    b = nms_cases.hf_nms(2)
    x = nms_cases.tie_heavy((1, 60, 80), seed=3)
    before = evaluate_graph(b.g, {"x": x})[0]
    assert nms_pass.InsertDeviceNms().run(b.g, PassContext()).stats == {"fused": 1, "source_rounds": [2]}
    assert full_size_evaluations == []  # the search ran on small maps; the confirmation runs only the match
    assert np.array_equal(evaluate_graph(b.g, {"x": x})[0], before)
    assert np.array_equal(before, nms(x, nms_cases.R, 2))


@pytest.mark.parametrize("compare", ["Less", "Greater"])
def test_a_near_miss_is_ruled_out_on_small_maps(monkeypatch: pytest.MonkeyPatch, full_size_evaluations: list,
                                                compare: str) -> None:
    monkeypatch.setattr(nms_cases, "SHAPE", (1, 60, 80))
    b = nms_cases.hf_nms(2, compare=compare)
    result = nms_pass.InsertDeviceNms().run(b.g, PassContext())
    # "Greater" is NMS with one round fewer (test_insert_device_nms): found small, confirmed
    assert result.modified == (compare == "Greater")
    assert full_size_evaluations == []


def test_small_probe_resizes_shape_constants_and_uniform_maps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nms_cases, "SHAPE", (1, 60, 80))
    b = nms_cases.hf_nms(1)
    region = grow_region(b.g, b.x, nms_pass.NMS_OPS)
    probe = small_probe(region, (11, 13))
    assert probe is not None and probe.shape == (1, 11, 13)
    assert sorted(a.shape for a in probe.constants.values()) == [(1, 11, 13)]  # the zeros map


def test_a_map_sized_constant_with_content_is_not_resized() -> None:
    from tests.passes.builder import Builder

    b = Builder((1, 30, 40))
    bias = np.arange(30 * 40, dtype=np.float32).reshape(1, 30, 40)
    b.done(b.op("Add", b.x, b.const(bias)))
    region = grow_region(b.g, b.x, {"onnx.Add"})
    assert small_probe(region, (5, 7)) is None  # the caller then probes at the model's size


def test_l2norm_is_searched_small(monkeypatch: pytest.MonkeyPatch, full_size_evaluations: list) -> None:
    shape = (1, 32, 12, 16)
    monkeypatch.setattr(l2_cases, "SHAPE", shape)
    b = l2_cases.reduce_l2()
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    assert l2_pass.FuseL2Norm().run(b.g, PassContext()).stats == {"fused": 1}
    assert full_size_evaluations == []
    np.testing.assert_allclose(evaluate_graph(b.g, {"x": x})[0], l2_normalize(x, 1, 1e-12), rtol=1e-6)


def test_score_fold_is_searched_small_with_the_cell_scaled(monkeypatch: pytest.MonkeyPatch,
                                                           full_size_evaluations: list) -> None:
    monkeypatch.setattr(fold_cases, "H", 6)
    monkeypatch.setattr(fold_cases, "W", 10)
    b = fold_cases.hf_fold()
    x = np.random.default_rng(2).normal(0, 3, (1, 65, 6, 10)).astype(np.float32)
    assert fold_pass.FuseScoreFold().run(b.g, PassContext()).stats == {"fused": 1}
    assert full_size_evaluations == []
    np.testing.assert_allclose(evaluate_graph(b.g, {"x": x})[0], score_fold(x, 8).reshape(1, 48, 80), rtol=1e-6)
    near = fold_cases.hf_fold(perm=(0, 1, 2, 3, 4))
    assert not fold_pass.FuseScoreFold().run(near.g, PassContext()).modified
    assert full_size_evaluations == []


def test_keypoints_many_peaks_per_run_agree_with_one_at_a_time(small_onnx: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    g = import_onnx(small_onnx)
    PassManager(default_pipeline(), [], stop_after="partition-host-device").run(g, PassContext())
    post = [n for n in g.nodes if n.placement is Placement.HOST_POST]
    runs = {"n": 0}
    real = fuse_keypoints._Trial.__call__

    def counted(self, score_map, only=None):
        runs["n"] += 1
        return real(self, score_map, only)

    monkeypatch.setattr(fuse_keypoints._Trial, "__call__", counted)
    fast = fuse_keypoints._recognise(post, g, None, fast=True)
    fast_runs, runs["n"] = runs["n"], 0
    slow = fuse_keypoints._recognise(post, g, None, fast=False)
    assert fast[3] == slow[3]
    assert fast_runs * 3 < runs["n"], (fast_runs, runs["n"])
