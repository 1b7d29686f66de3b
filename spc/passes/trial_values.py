"""Seeded trial values for the recognisers, without numpy.random.

A recogniser tells what a region computes by evaluating it on a few maps of numbers without
structure (fuse_keypoints, fuse_score_fold, fuse_l2norm, insert_device_nms): any such numbers do,
as long as a seed gives the same ones everywhere. ``import numpy.random`` is ~10 ms of the
``spc compile`` command (it loads every bit generator) for a few thousand numbers; these come from
the standard library's Mersenne Twister (``random.Random``: seeded, the same on every platform),
drawn as bytes in one call and shaped by numpy. The methods are the few of numpy's ``Generator``
the recognisers use, with its conventions: ``random`` in [0, 1), ``integers`` in [low, high).
"""

from __future__ import annotations

import math
import random as _random
from typing import Any

import numpy as np

_TWO_PI = 2 * math.pi


class TrialValues:
    """Numbers from ``seed``; each call continues the stream."""

    def __init__(self, seed: int) -> None:
        self._stream = _random.Random(seed)

    def _words(self, n: int, bits: int) -> np.ndarray:
        """``n`` uniformly distributed unsigned words of 32 or 64 bits."""
        return np.frombuffer(self._stream.randbytes(bits // 8 * n), dtype=f"<u{bits // 8}")

    def random(self, shape: int | tuple[int, ...] = (), dtype: Any = np.float64) -> np.ndarray:
        """Uniform in [0, 1): 24 random bits for float32, 53 for float64 (numpy's choice too)."""
        n = math.prod(shape) if isinstance(shape, tuple) else int(shape)
        if np.dtype(dtype) == np.float32:
            x = (self._words(n, 32) >> 8).astype(np.float32) * np.float32(2.0**-24)
        else:
            x = (self._words(n, 64) >> 11).astype(np.float64) * 2.0**-53
        return x.reshape(shape)

    def integers(self, low: int, high: int, shape: int | tuple[int, ...] = ()) -> np.ndarray:
        """Uniform int64 in [low, high) (a 64-bit word modulo the range: the bias is below 2**-40
        for the ranges a trial asks for)."""
        if high <= low:
            raise ValueError(f"integers: an empty range [{low}, {high})")
        n = math.prod(shape) if isinstance(shape, tuple) else int(shape)
        return (np.int64(low) + (self._words(n, 64) % np.uint64(high - low)).astype(np.int64)).reshape(shape)

    def standard_normal(self, shape: int | tuple[int, ...] = (), dtype: Any = np.float64) -> np.ndarray:
        """Normal with mean 0 and variance 1 (Box-Muller from two uniform draws, in ``dtype``)."""
        n = math.prod(shape) if isinstance(shape, tuple) else int(shape)
        # 1 - [0, 1) is (0, 1]: the log is finite
        radius = np.sqrt(np.float32(-2) * np.log1p(-self.random(n, dtype)), dtype=dtype)
        return (radius * np.cos(np.asarray(_TWO_PI, dtype) * self.random(n, dtype))).astype(dtype).reshape(shape)

    def permutation(self, n: int) -> np.ndarray:
        """0..n-1 in a random order."""
        return np.argsort(self.random(n), kind="stable")

    def choice(self, values: np.ndarray, size: int) -> np.ndarray:
        """``size`` distinct elements of ``values`` (numpy's ``replace=False``), in a random order."""
        values = np.asarray(values)
        if size > len(values):
            raise ValueError(f"cannot choose {size} distinct values of {len(values)}")
        return values[self.permutation(len(values))[:size]]


_CHUNK = 1 << 16  # values hashed at a time: each pass over them stays in the core's cache


def hashed_uniform(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Uniform float32 in [0, 1) from each position and ``seed`` by a 32-bit integer hash (Chris
    Wellons' lowbias32): millions of values in a few vectorised passes (the validation's seeded
    maps), the same on every platform. The passes go over 64 Ki values at a time in two scratch
    arrays, which stay in cache: 3.0 ms for 1.23 M values, 5.4 ms in passes over the whole."""
    n = math.prod(shape)
    out = np.empty(n, np.float32)
    x = np.empty(min(n, _CHUNK), np.uint32)
    t = np.empty_like(x)
    positions = np.arange(len(x), dtype=np.uint32)
    base = seed * 0x9E3779B9
    for start in range(0, n, _CHUNK):
        m = min(_CHUNK, n - start)
        xs, ts = x[:m], t[:m]
        np.add(positions[:m], np.uint32((start + base) % 2**32), out=xs)
        for shift, mul in ((16, 0x7FEB352D), (15, 0x846CA68B), (16, 1)):
            np.right_shift(xs, np.uint32(shift), out=ts)
            xs ^= ts
            if mul != 1:
                xs *= np.uint32(mul)
        xs >>= np.uint32(8)
        chunk = out[start:start + m]
        np.copyto(chunk, xs, casting="unsafe")
        chunk *= np.float32(2.0**-24)
    return out.reshape(shape)
