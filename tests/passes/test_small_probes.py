"""Recognition on small probes (passes/semantic_match.py: small_probe, faithful, confirm_small,
confirm): the recognisers search on small trial maps and confirm a match on a second small size
when the small runs are the model's re-sized, at the model's size only where that cannot be shown,
and never evaluate a region that cannot match at full size; fuse-keypoints asks many peaks per
run and agrees with asking one peak at a time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import spc.passes.fuse_l2norm as l2_pass
import spc.passes.fuse_score_fold as fold_pass
import spc.passes.insert_device_nms as nms_pass
import spc.passes.semantic_match as semantic_match
from spc.frontend.onnx_import import import_onnx
from spc.ir.graph import Placement
from spc.ir.interpreter import evaluate_graph
from spc.ir.ops.spc_ops import l2_normalize, nms, score_fold
from spc.passes.keypoints import recognise, trial
from spc.passes.manager import PassContext, PassManager
from spc.passes.pipeline import default_pipeline
from spc.passes.semantic_match import evaluate, faithful, grow_region, small_probe
from tests.passes import test_fuse_l2norm as l2_cases
from tests.passes import test_fuse_score_fold as fold_cases
from tests.passes import test_insert_device_nms as nms_cases
from tests.passes.builder import Builder


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


@pytest.fixture
def confirmations(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, ...]]]:
    """The entry shapes of every run of a match's nodes at the model's size (semantic_match.confirm)."""
    seen: list[tuple[int, ...]] = []
    real = semantic_match.run_nodes

    def spy(nodes, env, *, quiet=False, constants=None):
        if constants is None:
            seen.extend(tuple(a.shape) for a in env.values())
        return real(nodes, env, quiet=quiet, constants=constants)

    monkeypatch.setattr(semantic_match, "run_nodes", spy)
    yield seen


def test_nms_is_searched_and_confirmed_small(monkeypatch: pytest.MonkeyPatch, full_size_evaluations: list,
                                             confirmations: list) -> None:
    monkeypatch.setattr(nms_cases, "SHAPE", (1, 60, 80))
    b = nms_cases.hf_nms(2)
    x = nms_cases.tie_heavy((1, 60, 80), seed=3)
    before = evaluate_graph(b.g, {"x": x})[0]
    assert nms_pass.InsertDeviceNms().run(b.g, PassContext()).stats == {"fused": 1, "source_rounds": [2]}
    # searched on one small map of four trials, confirmed on a second small size: nothing at 60 x 80
    assert full_size_evaluations == [] and confirmations == []
    assert np.array_equal(evaluate_graph(b.g, {"x": x})[0], before)
    assert np.array_equal(before, nms(x, nms_cases.R, 2))


def size_dependent_norm(extra: str) -> Builder:
    """x / (max(||x||, eps) + z), z computed from a sum over the width: x / max(||x||, eps) on
    maps up to 7 wide when ``extra`` is "beyond 7" (z = max(W - 7, 0)), on any map when it is
    "none" (z = 0 W)."""
    b = Builder((1, 8, 12, 16))
    n = b.op("Clip", b.op("ReduceL2", b.x, b.const([1]), keepdims=1), b.const(np.float32(1e-12)))
    width = b.op("ReduceSum", b.op("Add", b.op("Mul", b.x, b.const(np.float32(0))), b.const(np.float32(1))),
                 b.const([3]), keepdims=1)
    z = (b.op("Max", b.op("Add", width, b.const(np.float32(-7))), b.const(np.float32(0))) if extra == "beyond 7"
         else b.op("Mul", width, b.const(np.float32(0))))
    b.done(b.op("Div", b.x, b.op("Add", n, z)))
    return b


def test_a_match_that_reads_across_the_map_is_confirmed_at_the_models_size(confirmations: list) -> None:
    """A sum over a re-sized axis can make the region's function depend on the map's size (here:
    equal to the norm on maps up to 7 wide, both small sizes included): such a match is confirmed
    at the model's size, where this one fails; the same region without the size in it fuses."""
    near = size_dependent_norm("beyond 7")
    ctx = PassContext()
    assert not l2_pass.FuseL2Norm().run(near.g, ctx).modified
    assert (1, 8, 12, 16) in confirmations
    confirmations.clear()
    fine = size_dependent_norm("none")
    assert l2_pass.FuseL2Norm().run(fine.g, PassContext()).stats == {"fused": 1}
    assert (1, 8, 12, 16) in confirmations


def test_a_size_the_probe_does_not_follow_is_unfaithful() -> None:
    b = Builder((1, 30, 40))
    cut = b.op("Slice", b.x, b.const([0]), b.const([29]), b.const([1]))  # rows 0..28 of 30
    b.done(b.op("Relu", cut))
    region = grow_region(b.g, b.x, {"onnx.Slice", "onnx.Relu"})
    probe = small_probe(region, (5, 7))
    assert probe is not None
    env = evaluate(region, np.ones(probe.shape, np.float32), probe.constants)
    assert "is [1, 5, 7] on the small map, not [1, 29, 7]" in (faithful(probe, region.nodes, env) or "")


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


def _fast_and_slow(g, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, int, Any, int]:
    """fuse-keypoints' answer on ``g``'s host post-processing with its shortcuts and without, and
    the region runs each took."""
    post = [n for n in g.nodes if n.placement is Placement.HOST_POST]
    runs = {"n": 0}
    real = trial.Trial.__call__

    def counted(self, score_map, only=None):
        runs["n"] += 1
        return real(self, score_map, only)

    monkeypatch.setattr(trial.Trial, "__call__", counted)
    fast = recognise._recognise(post, g, None, fast=True)
    fast_runs, runs["n"] = runs["n"], 0
    slow = recognise._recognise(post, g, None, fast=False)
    return fast, fast_runs, slow, runs["n"]


def test_keypoints_many_peaks_per_run_agree_with_one_at_a_time(small_onnx: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    g = import_onnx(small_onnx)
    PassManager(default_pipeline(), [], stop_after="partition-host-device").run(g, PassContext())
    fast, fast_runs, slow, slow_runs = _fast_and_slow(g, monkeypatch)
    assert fast[3] == slow[3]
    assert fast_runs * 3 < slow_runs, (fast_runs, slow_runs)


@pytest.mark.parametrize("name", ["fixed_k_op20", "fixed_k_op18_variant"])
def test_fixed_k_window_and_fill_at_once_agree_with_one_at_a_time(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fixed-K export's window and fill come from one run (on a map just below its peaks that is
    not one value everywhere: TopK's cost), as asking one peak at a time finds them."""
    from tests.corpus.exports import cached

    g = import_onnx(cached(name, 120, 160))
    PassManager(default_pipeline(), [], stop_after="partition-host-device").run(g, PassContext())
    fast, fast_runs, slow, slow_runs = _fast_and_slow(g, monkeypatch)
    assert fast[3] == slow[3] and fast[3]["mode"] == "fixed"
    assert fast_runs == 3 < slow_runs, (fast_runs, slow_runs)
