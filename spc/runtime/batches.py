"""Plans that take B images at once (input ``[B, C, H, W]``, B > 1: ``spc compile --batch`` or a
batch-B export), or N*B on a target of N chips (each chip runs the plan's program on its own B):
frames are grouped N*B at a time, a short last group is padded with copies of its
last frame, and each result is split back into the images' own (the pad's dropped).

An image's result is its row of every output and batched dense map: ``[1, ...]``, as the batch-1 model
returns it, except that sizes the batch shares are the batch's (HF's keypoints, scores and
descriptors are padded with zeros to the batch's largest count; its mask says which are real).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

import numpy as np

from spc.errors import SpcError
from spc.runtime.runner import RunResult

T = TypeVar("T")


def image_shape(shape: list[int]) -> list[int]:
    """One image's input of a plan input ``[B, C, H, W]``: ``[1, C, H, W]``."""
    return [1, *shape[1:]] if len(shape) == 4 else list(shape)


def groups(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (the last may be shorter), read as they come."""
    group: list[T] = []
    for item in items:
        group.append(item)
        if len(group) == size:
            yield group
            group = []
    if group:
        yield group


def fill(images: list[np.ndarray], batch: int) -> np.ndarray:
    """One run's input from up to ``batch`` images ``[1, C, H, W]``; a short group is padded with
    copies of its last image (its results are dropped)."""
    return np.concatenate([*images, *[images[-1]] * (batch - len(images))], axis=0)


def image_of(result: RunResult, k: int, batch: int) -> RunResult:
    """Image ``k``'s result of a run on ``batch`` images: its row of every output and map. A run over
    N chips: the row of its chip's own result (the image's result itself when each chip has one)."""
    if result.chips:
        per_chip = batch // len(result.chips)
        own = result.chips[k // per_chip]
        return own if per_chip == 1 else image_of(own, k % per_chip, per_chip)
    def row(name: str, a: np.ndarray) -> np.ndarray:
        if a.ndim == 0 or a.shape[0] != batch:
            raise SpcError(f"output {name} is {list(a.shape)}: it has no batch axis of {batch} to split into the "
                           f"images' own; run the plan on .npy inputs of its whole input shape")
        return a[k:k + 1]

    # a dense map of one image's copy (an NMS map) is no image's row: left out
    return RunResult({n: row(n, a) for n, a in result.outputs.items()},
                     {n: a[k:k + 1] for n, a in result.dense.items() if a.ndim and a.shape[0] == batch},
                     dict(result.seconds))
