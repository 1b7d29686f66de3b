"""The configuration objects ttnn's calls take, as types: ``ttnn.Conv2dConfig``, the compute
kernel config and the page layout of a tensor.

Each carries exactly the fields spc sets, and writes and reads the plan's JSON itself
(plan/program.py calls ``to_json``/``from_json``). Adding a ttnn option to a conv is one field
here with its default, and the place that decides it (docs/memory.md, "Adding a conv option").
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields, replace
from typing import Any

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


@dataclass(frozen=True)
class Conv2dConfig:
    """``ttnn.Conv2dConfig``: what spc sets of it."""

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

    def to_json(self) -> dict[str, Any]:
        activation = self.activation.value if self.activation else None
        return {"weights_dtype": self.weights_dtype.value, "activation": activation,
                "shard_layout": self.shard_layout.value, "output_layout": self.output_layout.name,
                "deallocate_activation": self.deallocate_activation, "act_block_h_override": self.act_block_h_override}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Conv2dConfig:
        unknown = set(d) - {f.name for f in fields(Conv2dConfig)}
        if unknown:
            raise ValueError(f"conv_config has unknown fields {sorted(unknown)}")
        return Conv2dConfig(DataFormat.parse(d["weights_dtype"], "weights_dtype"),
                            Activation(d["activation"]) if d.get("activation") else None,
                            TensorLayout(d["shard_layout"]), PageLayout[d["output_layout"]],
                            bool(d["deallocate_activation"]), int(d["act_block_h_override"]))

    def ttnn_kwargs(self) -> dict[str, Any]:
        """Field -> value as ``ttnn.Conv2dConfig`` takes it (markers for ttnn attributes: ttnn/calls.py)."""
        return {"weights_dtype": self.weights_dtype, "shard_layout": self.shard_layout,
                "output_layout": self.output_layout, "deallocate_activation": self.deallocate_activation,
                "act_block_h_override": self.act_block_h_override, "activation": self.activation}


@dataclass(frozen=True)
class ComputeConfig:
    """``ttnn.init_device_compute_kernel_config(arch, ...)``: the matrix engine's precision."""

    math_fidelity: MathFidelity = MathFidelity.HIFI4
    fp32_dest_acc_en: bool = True
    packer_l1_acc: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"math_fidelity": self.math_fidelity.value, "fp32_dest_acc_en": self.fp32_dest_acc_en,
                "packer_l1_acc": self.packer_l1_acc}

    @staticmethod
    def from_json(d: dict[str, Any]) -> ComputeConfig:
        if set(d) != {"math_fidelity", "fp32_dest_acc_en", "packer_l1_acc"}:
            raise ValueError(f"compute_config has fields {sorted(d)}")
        return ComputeConfig(MathFidelity.parse(d["math_fidelity"]), bool(d["fp32_dest_acc_en"]),
                             bool(d["packer_l1_acc"]))
