"""The recognisers' trial values (passes/trial_values.py): seeded, in numpy Generator's ranges,
and without the structure a probe must not have."""

from __future__ import annotations

import math

import numpy as np
import pytest

from spc.passes.trial_values import TrialValues, hashed_uniform


def test_a_seed_gives_the_same_values_and_another_seed_others() -> None:
    a, b, c = TrialValues(7), TrialValues(7), TrialValues(8)
    assert np.array_equal(a.random((3, 4)), b.random((3, 4)))
    assert np.array_equal(a.integers(0, 9, 20), b.integers(0, 9, 20))
    assert not np.array_equal(TrialValues(7).random(16), c.random(16))
    # each call continues the stream
    d = TrialValues(7)
    assert not np.array_equal(d.random(16), d.random(16))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_uniform_values_fill_the_half_open_unit_interval(dtype) -> None:
    x = TrialValues(1).random((200, 100), dtype=dtype)
    assert x.dtype == dtype and x.shape == (200, 100)
    assert x.min() >= 0 and x.max() < 1
    assert abs(float(x.mean()) - 0.5) < 0.01 and len(np.unique(x)) > 19_000  # no structure to speak of
    counts = np.histogram(x, bins=10, range=(0, 1))[0]
    assert counts.min() > 1800 and counts.max() < 2200


def test_integers_stay_in_their_range_and_reach_both_ends() -> None:
    k = TrialValues(2).integers(-3, 4, (50, 40))
    assert k.dtype == np.int64 and k.shape == (50, 40)
    assert set(np.unique(k).tolist()) == set(range(-3, 4))


def test_normal_values_have_mean_0_and_variance_1() -> None:
    z = TrialValues(3).standard_normal((100_000,), dtype=np.float32)
    assert z.dtype == np.float32 and np.isfinite(z).all()
    assert abs(float(z.mean())) < 0.02 and abs(float(z.std()) - 1) < 0.02
    assert abs(float((np.abs(z) < 1).mean()) - 0.6827) < 0.01


def test_permutation_and_choice_are_without_repeats() -> None:
    tv = TrialValues(4)
    p = tv.permutation(50)
    assert sorted(p.tolist()) == list(range(50)) and p.tolist() != list(range(50))
    picked = tv.choice(np.arange(100, 160), 12)
    assert len(set(picked.tolist())) == 12 and all(100 <= v < 160 for v in picked)
    with pytest.raises(ValueError, match="distinct"):
        tv.choice(np.arange(3), 4)


def _lowbias32(i: int, seed: int) -> float:
    """One value of hashed_uniform, by the hash's definition, in integers."""
    x = (i + seed * 0x9E3779B9) % 2**32
    x ^= x >> 16
    x = x * 0x7FEB352D % 2**32
    x ^= x >> 15
    x = x * 0x846CA68B % 2**32
    x ^= x >> 16
    return (x >> 8) * 2.0**-24


@pytest.mark.parametrize("shape", [(0,), (5, 7), (3, 1 << 16), (1, 2, 70_001)])
def test_hashed_uniform_is_the_hash_of_each_position_across_its_chunks(shape: tuple[int, ...]) -> None:
    x = hashed_uniform(shape, seed=12345).reshape(-1)
    assert x.dtype == np.float32 and x.size == math.prod(shape)
    picks = sorted({0, 1, x.size // 2, (1 << 16) - 1, 1 << 16, (1 << 16) + 1, x.size - 1} & set(range(x.size)))
    assert [float(x[i]) for i in picks] == [_lowbias32(i, 12345) for i in picks]
    assert x.size == 0 or (x.min() >= 0 and x.max() < 1)
    np.testing.assert_array_equal(hashed_uniform(shape, seed=12345).reshape(-1), x)  # the same every time
