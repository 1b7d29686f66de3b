"""The configuration objects ttnn's calls take, as types: ``ttnn.Conv2dConfig``, the compute
kernel config and the page layout of a tensor.

Each carries exactly the fields spc sets, and writes and reads the plan's JSON itself
(plan/program.py calls ``to_json``/``from_json``). Adding a ttnn option to a conv is one field
here with its default, and the place that decides it (docs/memory.md, "Adding a conv option").
"""

from __future__ import annotations

import enum
import typing
from typing import Any, ClassVar, Self

from msgspec import Struct
from msgspec.structs import replace

from spc.ttnn.formats import DataFormat, MathFidelity
from spc.ttnn.memory import TensorLayout


class PageLayout(enum.Enum):
    """How a tensor's pages are laid out: in 32x32 tiles or row by row."""

    TILE = "TILE_LAYOUT"
    ROW_MAJOR = "ROW_MAJOR_LAYOUT"

    @property
    def ttnn(self) -> str:
        return f"ttnn.{self.value}"


class Activation(enum.Enum):
    RELU = "relu"


class _Config:
    """A ttnn configuration object as a frozen record: every field is one ttnn field, written to
    and read from the plan's JSON by its type (enums by value: one spelling per concept), so adding a
    field is adding a line."""

    json_name: ClassVar[str]  # the call argument it is (conv_config), for errors

    def to_json(self) -> dict[str, Any]:
        return {name: _encode(getattr(self, name)) for name in self.__struct_fields__}  # type: ignore[attr-defined]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Self:
        what = cls.json_name
        names = set(cls.__struct_fields__)  # type: ignore[attr-defined]
        if set(d) - names:
            raise ValueError(f"{what} has unknown fields {sorted(set(d) - names)}")
        if names - set(d):
            raise ValueError(f"{what} lacks fields {sorted(names - set(d))}")
        hints = typing.get_type_hints(cls)
        return cls(**{name: _decode(hints[name], d[name], f"{what}.{name}") for name in names})

    def ttnn_kwargs(self) -> dict[str, Any]:
        """Field -> value as ttnn takes it (ttnn/calls spells the typed ones)."""
        return {name: getattr(self, name) for name in self.__struct_fields__}  # type: ignore[attr-defined]


def _encode(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def _decode(hint: Any, raw: Any, what: str) -> Any:
    options = [a for a in typing.get_args(hint) if a is not type(None)]
    if options:  # X | None
        if raw is None:
            return None
        hint = options[0]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(raw)
        except ValueError:
            raise ValueError(f"{what}: {raw!r} is not one of {', '.join(str(e.value) for e in hint)}") from None
    if hint is bool and isinstance(raw, bool):
        return raw
    if hint is int and isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    raise ValueError(f"{what}: {raw!r} is not a {getattr(hint, '__name__', hint)}")


class Conv2dConfig(_Config, Struct, frozen=True):
    """``ttnn.Conv2dConfig``: what spc sets of it."""

    json_name: ClassVar[str] = "conv_config"

    weights_dtype: DataFormat = DataFormat.BFLOAT16
    activation: Activation | None = None
    shard_layout: TensorLayout = TensorLayout.HEIGHT_SHARDED
    output_layout: PageLayout = PageLayout.TILE
    deallocate_activation: bool = False
    act_block_h_override: int = 0  # rows of the activation block, a multiple of 32 (0: ttnn's default)

    def with_act_block_tiles(self, tiles: int) -> Conv2dConfig:
        return replace(self, act_block_h_override=32 * tiles)

    @property
    def act_block_tiles(self) -> int:
        return self.act_block_h_override // 32


class ComputeConfig(_Config, Struct, frozen=True):
    """``ttnn.init_device_compute_kernel_config(arch, ...)``: the matrix engine's precision."""

    json_name: ClassVar[str] = "compute_config"

    math_fidelity: MathFidelity = MathFidelity.HIFI4
    fp32_dest_acc_en: bool = True
    packer_l1_acc: bool = True
