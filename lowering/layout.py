"""How IR tensors live on the device.

ttnn's conv2d and max_pool2d take activations as NHWC flattened to ``[1, 1, N*H*W, C]``. Every
device value here uses that layout; this module maps an IR (ONNX, NCHW) shape to it and back.
A map without a channel axis (the (N, H, W) score map) has C = 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DeviceLayout:
    n: int
    h: int
    w: int
    c: int

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
        x4 = x.reshape(self.n, self.c, self.h, self.w) if x.ndim == 4 else x.reshape(self.n, 1, self.h, self.w)
        return np.ascontiguousarray(x4.transpose(0, 2, 3, 1)).reshape(self.device_shape)

    def from_device(self, y: np.ndarray, shape: tuple[int, ...] | list[int]) -> np.ndarray:
        """[1, 1, N*H*W, C] -> the IR shape."""
        nchw = y.reshape(self.n, self.h, self.w, self.c).transpose(0, 3, 1, 2)
        return np.ascontiguousarray(nchw).reshape(tuple(int(d) for d in shape))
