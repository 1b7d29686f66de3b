"""ttnn's data formats and math fidelities: the one table every part of spc reads.

A format is how the device stores a tensor: its bytes per 32x32 tile (what L1 and DRAM budgets
count), whether it is block-float (values of a 16-wide face row share an exponent) and with how
many magnitude bits, and its ttnn spelling. Facts: shared/reference/tenstorrent-facts.md
(tt_metal/impl/data_format/blockfloat_common.cpp: a bfp8_b tile is 1088 bytes, bfp4_b 576).
"""

from __future__ import annotations

import enum

from msgspec import Struct


class _Format(Struct, frozen=True):
    """What a data format is on the device: tile size, block-float bits, where it may be used."""

    tile_bytes: int
    block_float_bits: int  # magnitude bits of a block-float value; 0: not block-float
    weights: bool  # a conv's weights may be stored so
    outputs: bool  # a conv's output may be stored so


class DataFormat(enum.Enum):
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"
    BFLOAT8_B = "bfloat8_b"
    BFLOAT4_B = "bfloat4_b"
    UINT32 = "uint32"
    UINT16 = "uint16"

    @property
    def tile_bytes(self) -> int:
        return _FORMATS[self].tile_bytes

    @property
    def bytes_per_value(self) -> float:
        """Bytes per value in tiles (a block-float tile carries its exponents)."""
        return self.tile_bytes / 1024

    @property
    def block_float_bits(self) -> int:
        return _FORMATS[self].block_float_bits

    @property
    def ttnn(self) -> str:
        """How ttnn spells it: ``ttnn.bfloat16``."""
        return f"ttnn.{self.value}"

    @staticmethod
    def parse(text: str, what: str = "format") -> DataFormat:
        try:
            return DataFormat(text)
        except ValueError:
            raise ValueError(f"{what} {text!r} is not one of {', '.join(f.value for f in DataFormat)}") from None


_FORMATS = {
    DataFormat.FLOAT32: _Format(4096, 0, True, True),
    DataFormat.BFLOAT16: _Format(2048, 0, True, True),
    DataFormat.BFLOAT8_B: _Format(1088, 7, True, True),
    DataFormat.BFLOAT4_B: _Format(576, 3, True, False),
    DataFormat.UINT32: _Format(4096, 0, False, False),
    DataFormat.UINT16: _Format(2048, 0, False, False),
}
WEIGHT_FORMATS = tuple(f for f in DataFormat if _FORMATS[f].weights)
OUTPUT_FORMATS = tuple(f for f in DataFormat if _FORMATS[f].outputs)


class MathFidelity(enum.Enum):
    """How many phases the matrix engine multiplies in (each takes a slice of the operands' bits)."""

    LOFI = "LoFi"
    HIFI2 = "HiFi2"
    HIFI3 = "HiFi3"
    HIFI4 = "HiFi4"

    @property
    def phases(self) -> int:
        return {"LoFi": 1, "HiFi2": 2, "HiFi3": 3, "HiFi4": 4}[self.value]

    @property
    def ttnn(self) -> str:
        return f"ttnn.MathFidelity.{self.value}"

    @staticmethod
    def parse(text: str) -> MathFidelity:
        try:
            return MathFidelity(text)
        except ValueError:
            raise ValueError(f"math fidelity {text!r} is not one of {', '.join(f.value for f in MathFidelity)}") \
                from None
