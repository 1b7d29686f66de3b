"""spc's records are msgspec Structs (spc/records.py): one kind of record, and ``asdict`` as
``dataclasses.asdict`` converts them."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
from msgspec import Struct, field
from msgspec.structs import replace

import spc
from spc.records import asdict
from spc.tools.inspect import CallRow, PlanReport


class _Leaf(Struct, frozen=True):
    a: int
    b: tuple[int, ...] = ()


class _Tree(Struct):
    leaf: _Leaf
    leaves: list[_Leaf] = field(default_factory=list)
    by_name: dict[str, _Leaf] = field(default_factory=dict)
    array: np.ndarray | None = None


def test_asdict_converts_nested_records_and_keeps_other_values() -> None:
    arr = np.arange(3)
    tree = _Tree(_Leaf(1, (2, 3)), [_Leaf(4)], {"x": _Leaf(5)}, arr)
    plain = asdict(tree)
    assert plain == {"leaf": {"a": 1, "b": (2, 3)}, "leaves": [{"a": 4, "b": ()}], "by_name": {"x": {"a": 5, "b": ()}},
                     "array": arr}
    assert plain["array"] is arr and isinstance(plain["leaf"]["b"], tuple)
    assert asdict([_Leaf(1), (_Leaf(2),)]) == [{"a": 1, "b": ()}, ({"a": 2, "b": ()},)]


def test_frozen_records_refuse_writes_and_replace_makes_a_new_one() -> None:
    leaf = _Leaf(1)
    with pytest.raises(AttributeError, match="immutable"):
        leaf.a = 2  # type: ignore[misc]
    assert replace(leaf, a=2) == _Leaf(2) and leaf == _Leaf(1) and hash(leaf) == hash(_Leaf(1))


def test_a_report_writes_as_json() -> None:
    row = CallRow(0, "ttnn.conv2d", "b", 1, "bfloat16", "L1", "32x64", 100, 10, 1.5, 0.5)
    report = PlanReport("p150", "accurate", [row], 0.1, 1, 2, 0, 1000)
    data = json.loads(json.dumps(report.as_dict()))
    assert data["calls"][0]["op"] == "ttnn.conv2d" and data["target"] == "p150"


def test_spc_defines_no_dataclasses() -> None:
    """One kind of record: a dataclass costs ~0.5 ms to define at import (spc/records.py)."""
    found = []
    for path in sorted(Path(spc.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                if "dataclasses" in names:
                    found.append(f"{path.relative_to(Path(spc.__file__).parent)}:{node.lineno}")
    assert not found, found
