"""The comparison metrics' own cases (tuning/metrics.py)."""

from __future__ import annotations

import numpy as np
import pytest

from spc.tuning.metrics import index_set_f1


@pytest.mark.parametrize("ours, theirs, f1", [
    ([[1, -1, 3, 0]], [[1, -1, 3, 0]], 1.0),
    ([[-1, -1]], [[-1, -1]], 1.0),  # no matches on either side: they agree
    ([[1, -1, 3, 0]], [[1, 2, 3, -1]], 2 * 2 / (3 + 3)),  # two shared, one only each side
    ([[2, -1]], [[-1, 2]], 0.0),  # the same index at another position is another match
    ([[5]], [[-1]], 0.0),
])
def test_index_set_f1(ours: list, theirs: list, f1: float) -> None:
    assert index_set_f1(np.array(ours), np.array(theirs)) == pytest.approx(f1)


def test_pair_set_f1_compares_matches_as_rows() -> None:
    """Matches as (i, j) rows, each side its own count (LightGlue-ONNX's [M, 2]): a set of rows."""
    from spc.tuning.metrics import pair_set_f1

    assert pair_set_f1(np.array([[0, 1], [2, 3]]), np.array([[2, 3], [0, 1]])) == 1.0
    assert pair_set_f1(np.array([[0, 1], [2, 3]]), np.array([[2, 3]])) == 2 / 3
    assert pair_set_f1(np.zeros((0, 2)), np.zeros((0, 2))) == 1.0
    assert pair_set_f1(np.array([[0, 1]]), np.zeros((0, 2))) == 0.0
