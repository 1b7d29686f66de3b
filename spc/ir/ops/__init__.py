"""Op definitions: one :class:`OpDef` per op, registered by its dialect-qualified name.

An OpDef knows how to infer its output types and how to evaluate itself on numpy arrays. The
same evaluators serve constant folding, the semantic checks of the fusion passes and the host
post-processing stage of the runtime, so an op has exactly one definition of what it means.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
from msgspec import Struct

from spc.ir.types import TensorType

if TYPE_CHECKING:
    from spc.ir.graph import Value

Evaluate = Callable[[list[Any], dict[str, Any]], list[np.ndarray]]
# (attrs, n_inputs, n_outputs, schema since_version) -> attrs: the importer's chance to make
# version-dependent or implicit ONNX semantics explicit (e.g. Split-13's equal parts = its output count)
Canonicalize = Callable[[dict[str, Any], int, int, int], dict[str, Any]]
Infer = Callable[[list["Value | None"], dict[str, Any]], "list[TensorType] | None"]


class OpDef(Struct, frozen=True):
    """An op: its numpy meaning, its type inference, and what the verifier and passes need to know."""

    name: str  # "onnx.Conv", "spc.Nms"
    evaluate: Evaluate
    infer: Infer | None = None
    # output shape depends on input values (NonZero): the op and all it feeds run on the host
    data_dependent: bool = False
    # min/max number of inputs, for the verifier
    arity: tuple[int, int] = (0, 99)
    doc: str = ""
    # ONNX schema versions (since_version) whose semantics ``evaluate`` implements; None: every
    # version within the importer's opset range (frontend/onnx_import.py)
    schemas: tuple[int, ...] | None = None
    canonicalize: Canonicalize | None = None

    @property
    def dialect(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def short_name(self) -> str:
        return self.name.split(".", 1)[1]

    def infer_types(self, inputs: list[Value | None], attrs: dict[str, Any]) -> list[TensorType]:
        types = self.infer(inputs, attrs) if self.infer else None
        if types is None:
            raise ValueError(f"{self.name}: cannot infer output types here; pass them explicitly")
        return types

    def __repr__(self) -> str:
        return f"OpDef({self.name})"


REGISTRY: dict[str, OpDef] = {}


def register(name: str, infer: Infer | None = None, *, data_dependent: bool = False,
             arity: tuple[int, int] = (0, 99), schemas: tuple[int, ...] | None = None,
             canonicalize: Canonicalize | None = None) -> Callable[[Evaluate], OpDef]:
    """Decorator: ``@register("onnx.Relu", same_type)`` on the evaluator defines the op."""

    def wrap(fn: Evaluate) -> OpDef:
        if name in REGISTRY:
            raise ValueError(f"op {name} registered twice")
        op = OpDef(name, fn, infer, data_dependent, arity, (fn.__doc__ or "").strip(), schemas, canonicalize)
        REGISTRY[name] = op
        return op

    return wrap


def get(name: str) -> OpDef:
    _load_all()
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown op {name}") from None


def onnx_op(op_type: str) -> OpDef | None:
    _load_all()
    return REGISTRY.get(f"onnx.{op_type}")


def onnx_op_types() -> list[str]:
    """The ONNX op types spc imports."""
    _load_all()
    return sorted(k.removeprefix("onnx.") for k in REGISTRY if k.startswith("onnx."))


def onnx_modules() -> tuple[ModuleType, ...]:
    """The modules that define the ONNX ops, imported. Each lists the conformance cases it refuses
    on purpose in ``CONFORMANCE_EXCEPTIONS`` (case name -> why; frontend/conformance.py)."""
    from spc.ir.ops import (
        onnx_conv,
        onnx_elementwise,
        onnx_generate,
        onnx_index,
        onnx_join,
        onnx_matmul,
        onnx_norm,
        onnx_pool,
        onnx_quant,
        onnx_reduce,
        onnx_resample,
        onnx_scan,
        onnx_select,
        onnx_shape,
    )

    return (onnx_conv, onnx_elementwise, onnx_generate, onnx_index, onnx_join, onnx_matmul, onnx_norm, onnx_pool,
            onnx_quant, onnx_reduce, onnx_resample, onnx_scan, onnx_select, onnx_shape)


def _load_all() -> None:
    # Imported for their registrations; done lazily to keep `import spc.ir` cheap.
    from spc.ir.ops import keypoints, spc_ops  # noqa: F401

    onnx_modules()
