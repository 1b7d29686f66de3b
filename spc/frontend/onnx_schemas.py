"""onnx's op schemas for the ops spc imports, as data: what the importer's checks read of them.

The first question to onnx's schema registry builds all of it (~10-15 ms of a fresh ``spc
compile``, a twentieth of it); spc asks about its own ~150 ops only. ``onnx_schemas.json`` holds,
for each of those ops, which schema version each opset from 11 to 23 takes and, for each version,
the input and output counts, the inputs' names and options, and the attributes' types and whether
they are required. It is written from the installed onnx (``python -m spc.frontend.onnx_schemas``)
and a test holds it equal to onnx's registry; an op it lacks is asked of the registry.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct

TABLE = Path(__file__).with_name("onnx_schemas.json")
OPSETS = range(11, 24)  # the opsets spc imports (reading.py's MIN_OPSET..MAX_OPSET), the table's rows
SINGLE = 0  # onnx's OpSchema.FormalParameterOption: Single, Optional, Variadic


class Formal(Struct, frozen=True):
    name: str
    option: int


class Attribute(Struct, frozen=True):
    type: int  # onnx's AttributeProto.AttributeType
    required: bool


class Schema(Struct, frozen=True):
    """What the checks read of one of onnx's OpSchema (its attribute names as onnx's)."""

    since_version: int
    min_input: int
    max_input: int
    min_output: int
    max_output: int
    inputs: tuple[Formal, ...]
    attributes: dict[str, Attribute]


@functools.cache
def _table() -> dict[str, Any]:
    return msgspec.json.decode(TABLE.read_bytes())  # json's own: 1.2 ms


@functools.lru_cache(maxsize=256)
def schema(op_type: str, opset: int) -> Schema | None:
    """onnx's schema of default-domain ``op_type`` at ``opset`` (None: onnx has none there)."""
    versions = _table()["opsets"].get(op_type)
    if versions is None or opset not in OPSETS:
        return live(op_type, opset)
    since = versions[opset - OPSETS.start]
    if since is None:
        return None
    s = _table()["schemas"][f"{op_type}-{since}"]
    return Schema(since, *s["counts"], tuple(Formal(n, o) for n, o in s["inputs"]),
                  {k: Attribute(t, bool(r)) for k, (t, r) in s["attributes"].items()})


@functools.lru_cache(maxsize=256)
def live(op_type: str, opset: int) -> Schema | None:
    """The same from onnx's registry (built on the first question)."""
    from spc.frontend import onnx_proto  # the C++ extension: only for ops the table lacks

    defs = onnx_proto.cpp().defs
    try:
        s = defs.get_schema(op_type, opset, "")
    except defs.SchemaError:
        return None
    return Schema(int(s.since_version), int(s.min_input), int(s.max_input), int(s.min_output), int(s.max_output),
                  tuple(Formal(f.name, int(f.option.value)) for f in s.inputs),
                  {k: Attribute(int(a.type.value), bool(a.required)) for k, a in s.attributes.items()})


def frozen(op_types: list[str]) -> dict[str, Any]:
    """The table for ``op_types`` from onnx's registry: what :data:`TABLE` holds."""
    opsets: dict[str, list[int | None]] = {}
    schemas: dict[str, Any] = {}
    for op in sorted(op_types):
        found = [live(op, v) for v in OPSETS]
        if all(s is None for s in found):
            continue
        opsets[op] = [None if s is None else s.since_version for s in found]
        for s in found:
            if s is not None:
                schemas[f"{op}-{s.since_version}"] = {
                    "counts": [s.min_input, s.max_input, s.min_output, s.max_output],
                    "inputs": [[f.name, f.option] for f in s.inputs],
                    "attributes": {k: [a.type, int(a.required)] for k, a in sorted(s.attributes.items())}}
    return {"onnx": _onnx_version(), "opsets": opsets, "schemas": schemas}


def _onnx_version() -> str:
    from spc.frontend import onnx_proto

    return onnx_proto.onnx_version()


def main() -> int:
    """Write :data:`TABLE` from the installed onnx."""
    from spc.ir import ops

    TABLE.write_text(json.dumps(frozen(ops.onnx_op_types()), sort_keys=True, indent=0) + "\n")
    print(f"wrote {TABLE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
