"""Per-block precision: what each device op stores and how its matrix engine multiplies.

A *block* is a device op named after its source: a convolution by its weight (without
``.weight`` and the exporter's ``inner.`` prefix, e.g. ``encoder.conv_blocks.0.conv_a``), a
fused op by its kind (``score_fold``, ``nms``, ``l2norm``), a pool by its node.

Presets (``spc compile --precision``):

==========  ===========  ========  ========  ============  =======
preset      weights      fidelity  fp32 acc  L1 acc (K)    outputs
==========  ===========  ========  ========  ============  =======
accurate    bfloat16     HiFi4     yes       yes           bfloat16
balanced    bfloat16     HiFi2     yes       yes           bfloat16
fast        bfloat8_b    LoFi      yes       no            bfloat16
==========  ===========  ========  ========  ============  =======

Under every preset a convolution with a short reduction (fewer than 32 products per output: the
image's first conv) keeps float32 weights (:meth:`PrecisionPlan.for_block`); a rule overrides it.

``packer_l1_acc``: a conv reduces in K blocks of one kernel row; without L1 accumulation the
partial sum is packed in the *output* format (bf16) between blocks, with it in fp32 (if the
destination accumulates in fp32) — tt-metal conv2d_op_program_factory_common.cpp get_cb_info.

A TOML file (``--precision-config``) overrides blocks by glob, in order::

    preset = "balanced"
    [blocks."encoder.conv_blocks.0.*"]
    weights_dtype = "bfloat16"
    math_fidelity = "HiFi4"
    [blocks."keypoint_decoder.*"]
    output_dtype = "float32"
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any

from msgspec import Struct
from msgspec.structs import force_setattr, replace

from spc.errors import SpcError
from spc.ttnn.formats import OUTPUT_FORMATS, WEIGHT_FORMATS, DataFormat, MathFidelity


class BlockPrecision(Struct, frozen=True):
    """A block's precision; formats and fidelity may be given by name (a TOML file, a search move)."""

    weights_dtype: DataFormat = DataFormat.BFLOAT16
    math_fidelity: MathFidelity = MathFidelity.HIFI4
    fp32_dest_acc_en: bool = True
    output_dtype: DataFormat = DataFormat.BFLOAT16
    packer_l1_acc: bool = True

    def __post_init__(self) -> None:
        try:
            for name, parse, allowed in (("weights_dtype", DataFormat.parse, WEIGHT_FORMATS),
                                         ("math_fidelity", MathFidelity.parse, tuple(MathFidelity)),
                                         ("output_dtype", DataFormat.parse, OUTPUT_FORMATS)):
                value = getattr(self, name)
                if isinstance(value, str):
                    value = parse(value)
                    force_setattr(self, name, value)
                if value not in allowed:
                    raise ValueError(f"{value.value!r} is not one of {', '.join(a.value for a in allowed)}")
        except ValueError as exc:
            raise SpcError(f"precision {name}: {exc}") from None
        for name in ("fp32_dest_acc_en", "packer_l1_acc"):
            if not isinstance(getattr(self, name), bool):
                raise SpcError(f"precision {name} must be true or false, got {getattr(self, name)!r}")

    def spell(self, compute: bool = True) -> str:
        """``w:bfloat16 HiFi4 fp32acc l1acc out:bfloat16`` (the IR text, pass stats); without
        ``compute`` only what an op without a matrix engine uses: ``out:bfloat16``."""
        out = BlockPrecision.spell_output(self.output_dtype)
        if not compute:
            return out
        acc = "fp32acc" if self.fp32_dest_acc_en else "bf16acc"
        l1 = " l1acc" if self.packer_l1_acc else ""
        return f"w:{self.weights_dtype.value} {self.math_fidelity.value} {acc}{l1} {out}"

    @staticmethod
    def spell_output(fmt: DataFormat) -> str:
        """What :meth:`spell` says of an output format alone (any format: a call's result)."""
        return f"out:{fmt.value}"

    @staticmethod
    def parse(text: str) -> BlockPrecision:
        """The inverse of :meth:`spell` (fields it leaves out keep their defaults)."""
        fields_: dict[str, Any] = {}
        words = text.split()
        if not words:
            raise SpcError("precision: empty spelling")
        for word in words:
            if word.startswith("w:"):
                fields_["weights_dtype"] = word[2:]
            elif word.startswith("out:"):
                fields_["output_dtype"] = word[4:]
            elif word in ("fp32acc", "bf16acc"):
                fields_["fp32_dest_acc_en"] = word == "fp32acc"
            elif word == "l1acc":
                fields_["packer_l1_acc"] = True
            else:
                fields_["math_fidelity"] = word
        if "math_fidelity" in fields_:  # a full spelling: no "l1acc" means none
            fields_.setdefault("packer_l1_acc", False)
        return BlockPrecision(**fields_)


PRESETS = {
    "accurate": BlockPrecision(DataFormat.BFLOAT16, MathFidelity.HIFI4, True, DataFormat.BFLOAT16, True),
    "balanced": BlockPrecision(DataFormat.BFLOAT16, MathFidelity.HIFI2, True, DataFormat.BFLOAT16, True),
    "fast": BlockPrecision(DataFormat.BFLOAT8_B, MathFidelity.LOFI, True, DataFormat.BFLOAT16, False),
}


# a reduction shorter than one tile row (32 values) is "short": see PrecisionPlan.for_block
SHORT_REDUCTION = 32


class PrecisionPlan(Struct, frozen=True):
    """A preset plus ordered (glob, field overrides) rules."""

    preset: str = "accurate"
    rules: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise SpcError(f"--precision {self.preset}: not a preset ({', '.join(PRESETS)})")

    def for_block(self, block: str, short_reduction: bool = False) -> BlockPrecision:
        """The preset's precision, then the rules matching ``block``. A convolution whose reduction is
        short (``short_reduction``: fewer than SHORT_REDUCTION products per output) starts from
        float32 weights: its result sums too few products for their bf16 roundings to average out
        (the image's first conv: 9-27), and its weights are a few KB, so the device time is the same."""
        p = PRESETS[self.preset]
        if short_reduction:
            p = replace(p, weights_dtype=DataFormat.FLOAT32)
        for pattern, changes in self.rules:
            if fnmatch.fnmatchcase(block, pattern):
                p = replace(p, **dict(changes))
        return p

    def with_rule(self, pattern: str, **changes: Any) -> PrecisionPlan:
        """``changes`` may name formats and fidelities (a TOML file) or give them typed (a search
        move); a rule holds them typed (a name that is none is left for BlockPrecision to refuse)."""
        typed = tuple(sorted((k, _typed(k, v)) for k, v in changes.items()))
        return replace(self, rules=(*self.rules, (pattern, typed)))

    def describe(self) -> dict[str, Any]:
        """The plan as JSON (a manifest): formats and fidelities by their spelling."""
        return {"preset": self.preset,
                "rules": [{"blocks": p, **{k: _spelled(v) for k, v in c}} for p, c in self.rules]}

    @staticmethod
    def from_description(d: dict[str, Any]) -> PrecisionPlan:
        """The inverse of :meth:`describe` (e.g. the plan `--precision auto` chose, from a manifest)."""
        plan = PrecisionPlan(d["preset"])
        for rule in d.get("rules", []):
            changes = {k: v for k, v in rule.items() if k != "blocks"}
            plan = plan.with_rule(rule["blocks"], **changes)
        return plan


_TYPED = {"weights_dtype": DataFormat, "output_dtype": DataFormat, "math_fidelity": MathFidelity}


def _typed(name: str, value: Any) -> Any:
    kind = _TYPED.get(name)
    if kind is not None and isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            return value
    return value


def _spelled(value: Any) -> Any:
    return value.value if isinstance(value, (DataFormat, MathFidelity)) else value


def load_precision_config(path: Path, preset: str | None = None) -> PrecisionPlan:
    """Read a TOML precision file; ``preset`` (from the command line) wins over the file's."""
    import tomllib  # here: ~3 ms that a compile without --precision-config need not pay

    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SpcError(f"{path}: no such precision config") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SpcError(f"{path}: not valid TOML ({exc})") from None
    unknown = set(data) - {"preset", "blocks"}
    if unknown:
        raise SpcError(f"{path}: unknown keys {sorted(unknown)} (expected preset, blocks)")
    plan = PrecisionPlan(preset or data.get("preset", "accurate"))
    known = set(BlockPrecision.__struct_fields__)
    for pattern, changes in (data.get("blocks") or {}).items():
        if not isinstance(changes, dict) or set(changes) - known:
            raise SpcError(f"{path}: [blocks.{pattern!r}] may set only {', '.join(sorted(known))}")
        try:
            replace(PRESETS[plan.preset], **changes)  # validates the values now, naming the file
        except SpcError as exc:
            raise SpcError(f"{path}: [blocks.{pattern!r}]: {exc}") from None
        plan = plan.with_rule(pattern, **changes)
    return plan
