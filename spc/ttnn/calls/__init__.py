"""Every ttnn call a plan may hold, each defined once (definition.py says what a definition holds
and who reads it), one file per family of calls.

Adding a call is one ``define(...)`` in its family's file (its arguments, shape rule, meaning and
spelling), its emulation (emulator/device.py) and its test: tests/test_calls.py holds every call
to all of them, and to ttnn's golden function where it names one.
"""

from __future__ import annotations

from spc.errors import SpcError
from spc.ttnn.calls import elementwise, kernel, movement, reduce, select, window  # noqa: F401 (they define)
from spc.ttnn.calls.definition import (
    ARCH,
    CALLS,
    DEVICE,
    Attr,
    Call,
    CallDef,
    CallSpec,
    Meaning,
    Ref,
    ShapeError,
    Weight,
    spell,
)

__all__ = ["ARCH", "CALLS", "DEVICE", "MEANINGS", "Attr", "Call", "CallDef", "CallSpec", "Meaning", "Ref",
           "ShapeError", "Weight", "describe", "spell"]

# what each call computes (numpy, float32, no storage rounding): the validation's device side
MEANINGS: dict[str, Meaning] = {name: d.meaning for name, d in CALLS.items() if d.meaning is not None}


def describe(op: CallSpec) -> Call:
    """The ttnn call that executes ``op`` (the ttnn backend evaluates it, `spc emit-py` prints it)."""
    d = CALLS.get(op.op)
    if d is None or d.spell is None:
        raise SpcError(f"no ttnn spelling for {op.op} (from {op.source})")
    return d.spell(op)
