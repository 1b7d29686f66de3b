"""The kernels spc can place in a plan, by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msgspec import Struct

# (inputs, outputs, parameters) -> the stock ttnn calls the kernel replaces, as TtOp fields
Composed = Callable[[list[str], list[str], dict[str, Any]], list[dict[str, Any]]]


class Kernel(Struct, frozen=True):
    """A fused device kernel: its reference, the stock calls it replaces, its documentation."""

    name: str
    arity: int
    reference: Callable[..., Any]  # torch tensors (and the call's parameters) in, tensor(s) out: the emu backend
    composed: Composed
    doc: str


KERNELS: dict[str, Kernel] = {}


def register(kernel: Kernel) -> Kernel:
    KERNELS[kernel.name] = kernel
    return kernel
