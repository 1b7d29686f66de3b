"""How IR tensors live on the device: two forms.

* :class:`DeviceLayout` (form ``nhwc``): ttnn's conv2d and max_pool2d take activations as NHWC
  flattened to ``[1, 1, N*H*W, C]``. Convolutions, pools and the fused SuperPoint ops keep their
  values this way; a map without a channel axis (the (N, H, W) score map) has C = 1.
* :class:`PlainLayout` (form ``plain``): the IR (ONNX) shape itself as ttnn's logical shape, in
  tiles. Any op that has no reason to use the conv layout (transposes, reductions over other
  axes, concatenations, pads) computes in this form; ttnn broadcasts numpy-style in it.

The lowering converts between them where an op needs the other (lowering/lower.py: to_plain,
to_nhwc); this module maps host arrays to each form and back.
"""

from __future__ import annotations

import enum
from typing import ClassVar

import numpy as np
from msgspec import Struct


class Form(enum.StrEnum):
    """Which of the two layouts a device tensor is held in; a ``str`` whose value the plan's JSON
    spells (``DeviceTensor.form``: "nhwc", "plain")."""

    NHWC = "nhwc"  # DeviceLayout
    PLAIN = "plain"  # PlainLayout


class DeviceLayout(Struct, frozen=True):
    """ttnn's conv layout [1, 1, N*H*W, C] of an N x C x H x W value."""

    n: int
    h: int
    w: int
    c: int

    form: ClassVar[Form] = Form.NHWC

    @staticmethod
    def fits(shape: tuple[int, ...] | list[int]) -> bool:
        """Whether a value of this IR shape can be held in the conv layout."""
        return 2 <= len(shape) <= 4

    @property
    def device_shape(self) -> list[int]:
        return [1, 1, self.n * self.h * self.w, self.c]

    @staticmethod
    def of(shape: tuple[int, ...] | list[int]) -> DeviceLayout:
        s = [int(d) for d in shape]
        if len(s) == 4:
            return DeviceLayout(s[0], s[2], s[3], s[1])
        if len(s) == 3:
            return DeviceLayout(s[0], s[1], s[2], 1)
        if len(s) == 2:
            return DeviceLayout(1, s[0], s[1], 1)
        raise ValueError(f"no device layout for rank-{len(s)} shape {s}")

    def to_device(self, x: np.ndarray) -> np.ndarray:
        """IR (NCHW or NHW) array -> [1, 1, N*H*W, C]."""
        return np.ascontiguousarray(self.in_device_order(x)).reshape(self.device_shape)

    def in_device_order(self, x: np.ndarray) -> np.ndarray:
        """IR (NCHW or NHW) array as an [N, H, W, C] view, no copy: at each index the element
        that :meth:`device_view` of its device array holds."""
        x4 = x.reshape(self.n, self.c, self.h, self.w) if x.ndim == 4 else x.reshape(self.n, 1, self.h, self.w)
        return x4.transpose(0, 2, 3, 1)

    def device_view(self, y: np.ndarray) -> np.ndarray:
        return y.reshape(self.n, self.h, self.w, self.c)

    def from_device(self, y: np.ndarray, shape: tuple[int, ...] | list[int], copy: bool = True) -> np.ndarray:
        """[1, 1, N*H*W, C] -> the IR shape; without ``copy`` a strided view of ``y`` (the
        transposed copy of 256 x 60 x 80 values takes ~8 ms)."""
        nchw = self.device_view(y).transpose(0, 3, 1, 2)
        return (np.ascontiguousarray(nchw) if copy else nchw).reshape(tuple(int(d) for d in shape))


class PlainLayout(Struct, frozen=True):
    """The IR shape as is (a rank-0 value is held as [1])."""

    shape: tuple[int, ...]

    form: ClassVar[Form] = Form.PLAIN

    @property
    def device_shape(self) -> list[int]:
        return [int(d) for d in self.shape] or [1]

    def to_device(self, x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(self.in_device_order(x))

    def in_device_order(self, x: np.ndarray) -> np.ndarray:
        return x.reshape(self.device_shape)

    def device_view(self, y: np.ndarray) -> np.ndarray:
        return y.reshape(self.device_shape)

    def from_device(self, y: np.ndarray, shape: tuple[int, ...] | list[int], copy: bool = True) -> np.ndarray:
        return (np.ascontiguousarray(y) if copy else y).reshape(tuple(int(d) for d in shape))


Layout = DeviceLayout | PlainLayout


def layout_of(form: Form, shape: tuple[int, ...] | list[int]) -> Layout:
    """The layout of an IR value of ``shape`` held in ``form``."""
    if form is Form.NHWC:
        return DeviceLayout.of(shape)
    if form is Form.PLAIN:
        return PlainLayout(tuple(int(d) for d in shape))
    raise ValueError(f"unknown device form {form!r}")
