"""ONNX's own conformance cases (shipped in the onnx wheel) for every op spc imports: each passes
through the importer and the host interpreter, or is refused at import for a reason listed next
to the op (frontend/conformance.py; docs/onnx-ops.md has the table)."""

from __future__ import annotations

import pytest

from spc.frontend.conformance import cases, run_case

CASES = list(cases())


def test_the_cases_cover_the_ops_exports_use() -> None:
    ops = {n.op_type for c in CASES for n in c.model.graph.node}
    assert len(CASES) > 1000
    assert {"Conv", "MaxPool", "BatchNormalization", "Softmax", "CastLike", "Mod", "Div", "GatherElements", "ScatterND",
            "Pad", "Resize", "DepthToSpace", "SpaceToDepth", "InstanceNormalization", "LayerNormalization", "ArgMax",
            "LogSoftmax", "TopK", "NonZero", "GridSample", "ReduceL2"} <= ops


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case) -> None:
    result = run_case(case)
    assert result.status in ("pass", "refused", "out-of-range"), result.detail
