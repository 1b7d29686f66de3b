"""Element types and tensor types of the IR.

A dimension is an ``int`` when static and a ``str`` (a symbol such as ``nz0``) when it depends on
data, as the keypoint count does after NonZero. Device code needs static shapes; the host stage
does not.
"""

from __future__ import annotations

import enum

import numpy as np
from msgspec import Struct

Dim = int | str


class DType(enum.Enum):
    F32 = "f32"
    F64 = "f64"
    F16 = "f16"
    BF16 = "bf16"
    I64 = "i64"
    I32 = "i32"
    I16 = "i16"
    I8 = "i8"
    U64 = "u64"
    U32 = "u32"
    U16 = "u16"
    U8 = "u8"
    BOOL = "i1"

    @property
    def numpy(self) -> np.dtype:
        if self is DType.BF16:
            raise TypeError("bf16 has no numpy dtype; host arrays carry it as f32")
        return np.dtype(_NUMPY[self])

    @property
    def host_numpy(self) -> np.dtype:
        """How host arrays carry it: its numpy dtype, float32 for bf16."""
        return np.dtype(np.float32) if self is DType.BF16 else self.numpy

    @property
    def is_float(self) -> bool:
        return self in (DType.F32, DType.F64, DType.F16, DType.BF16)

    @staticmethod
    def from_numpy(dtype: np.dtype) -> DType:
        for k, v in _NUMPY.items():
            if np.dtype(v) == np.dtype(dtype):
                return k
        raise TypeError(f"no IR dtype for numpy {dtype}")

    @property
    def is_int(self) -> bool:
        return self in (DType.I64, DType.I32, DType.I16, DType.I8, DType.U64, DType.U32, DType.U16, DType.U8)

    @staticmethod
    def from_onnx(code: int) -> DType:
        try:
            return _ONNX[code]
        except KeyError:
            raise TypeError(f"unsupported ONNX element type {onnx_type_name(code)}") from None

    @property
    def onnx(self) -> int:
        return {v: k for k, v in _ONNX.items()}[self]


_NUMPY = {DType.F32: "float32", DType.F64: "float64", DType.F16: "float16", DType.I64: "int64",
          DType.I32: "int32", DType.I16: "int16", DType.I8: "int8", DType.U64: "uint64", DType.U32: "uint32",
          DType.U16: "uint16", DType.U8: "uint8", DType.BOOL: "bool"}
# onnx.TensorProto codes
_ONNX = {1: DType.F32, 11: DType.F64, 10: DType.F16, 16: DType.BF16, 7: DType.I64, 6: DType.I32, 5: DType.I16,
         3: DType.I8, 13: DType.U64, 12: DType.U32, 4: DType.U16, 2: DType.U8, 9: DType.BOOL}
# the element types ONNX models may hold and spc does not take (strings, complex, 8- and 4-bit floats/ints)
_ONNX_NAMES = {0: "UNDEFINED", 8: "STRING", 14: "COMPLEX64", 15: "COMPLEX128", 17: "FLOAT8E4M3FN",
               18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4",
               23: "FLOAT4E2M1", 24: "FLOAT8E8M0", 25: "UINT2", 26: "INT2"}


def onnx_type_name(code: int) -> str:
    """``STRING (8)`` for an ONNX element type code."""
    return f"{_ONNX_NAMES.get(code, 'unknown')} ({code})"


class TensorType(Struct, frozen=True):
    """An element type and a shape; a dimension is a size or a symbol (a name)."""

    dtype: DType
    shape: tuple[Dim, ...]

    def __post_init__(self) -> None:
        for d in self.shape:
            if not (isinstance(d, str) and d.isidentifier()) and not (isinstance(d, int) and d >= 0):
                raise ValueError(f"bad dimension {d!r} in {self.shape}")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def static_shape(self) -> tuple[int, ...]:
        if not self.is_static:
            raise ValueError(f"{self} has symbolic dimensions")
        return tuple(int(d) for d in self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.static_shape:
            n *= d
        return n

    def with_shape(self, shape: tuple[Dim, ...]) -> TensorType:
        return TensorType(self.dtype, tuple(shape))

    def with_dtype(self, dtype: DType) -> TensorType:
        return TensorType(dtype, self.shape)

    def __str__(self) -> str:
        return f"{self.dtype.value}[{','.join(str(d) for d in self.shape)}]"

    @staticmethod
    def parse(text: str) -> TensorType:
        dt, _, rest = text.partition("[")
        if not rest.endswith("]"):
            raise ValueError(f"bad tensor type {text!r}")
        body = rest[:-1]
        dims = tuple(int(d) if d.lstrip("-").isdigit() else d for d in body.split(",")) if body else ()
        return TensorType(DType(dt), dims)

    @staticmethod
    def of(array: np.ndarray) -> TensorType:
        return TensorType(DType.from_numpy(array.dtype), tuple(int(d) for d in array.shape))
