"""The plan schema (plan/schema.py) on a real plan's program and manifest, edited one field at a
time: JSON types are strict, every refusal names its place (nested arguments included), and what
the schema lets through is what the compiler writes."""

from __future__ import annotations

import copy
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from spc.errors import SpcError
from spc.plan.schema import validate_manifest, validate_program


@pytest.fixture(scope="module")
def parts(small_plan: Path) -> tuple[dict, dict]:
    with zipfile.ZipFile(small_plan) as zf:
        return json.loads(zf.read("program.json")), json.loads(zf.read("manifest.json"))


def refusal(program: dict) -> str:
    with pytest.raises(SpcError) as info:
        validate_program(program, "p.ttplan")
    text = str(info.value)
    assert text.startswith("p.ttplan: program.json is not a valid program: ") and "\n" not in text
    return text


def first(program: dict, op: str) -> tuple[int, dict]:
    return next((i, c) for i, c in enumerate(program["device_ops"]) if c["op"] == op)


def test_the_compilers_program_and_manifest_validate(parts: tuple[dict, dict]) -> None:
    program, manifest = parts
    validate_program(program, "p")
    checked = validate_manifest(manifest, "p")
    assert checked.target == manifest["target"] and checked.members == manifest["members"]


@pytest.mark.parametrize("key, value, says", [
    ("stride", [True, 1], "Expected `int`, got `bool`"),  # a bool is not an int
    ("stride", [1.0, 1], "Expected `int`, got `float`"),
    ("stride", [0, 1], "Expected `int` >= 1"),
    ("stride", [1, 1, 1], "Expected `array` of length <= 2"),
    ("groups", "1", "Expected `int`, got `str`"),
    ("launch", 1, "unknown field `launch`"),
])
def test_a_call_argument_is_refused_at_its_place(parts: tuple[dict, dict], key: str, value: Any, says: str) -> None:
    program = copy.deepcopy(parts[0])
    i, conv = first(program, "ttnn.conv2d")
    conv["args"][key] = value
    text = refusal(program)
    assert f"device_ops[{i}].args" in text and says in text, text
    if key == "stride":
        assert f"device_ops[{i}].args.stride" in text, text


def test_a_missing_argument_is_named(parts: tuple[dict, dict]) -> None:
    program = copy.deepcopy(parts[0])
    i, conv = first(program, "ttnn.conv2d")
    del conv["args"]["groups"]
    assert f"device_ops[{i}].args: Object missing required field `groups`" in refusal(program)


@pytest.mark.parametrize("name", ["a\x00b", "a\nb", "ab\n", "x\u2028", "\x85", "x\ud800", ""])
def test_names_are_printable_and_not_empty(parts: tuple[dict, dict], name: str) -> None:
    program = copy.deepcopy(parts[0])
    program["device_ops"][0]["output"] = name
    text = refusal(program)
    assert "device_ops[0].output" in text, text
    if name:
        assert "Expected a name without control characters" in text and "\\x" not in text, text


def test_a_name_may_hold_any_printable_character(parts: tuple[dict, dict]) -> None:
    program = copy.deepcopy(parts[0])
    program["device_ops"][0]["output"] = "été \U0001F600 卷积"
    validate_program(program, "p")


def test_a_refusal_names_a_bad_key_and_shows_control_characters_escaped(parts: tuple[dict, dict]) -> None:
    with pytest.raises(SpcError) as info:
        validate_manifest(dict(parts[1], members={**parts[1]["members"], "evil": "0" * 64}), "p")
    assert "members (a key): Invalid enum value 'evil'" in str(info.value)
    program = copy.deepcopy(parts[0])
    program["device_ops"][0]["\x1b[31mred"] = 1
    text = refusal(program)
    assert "\x1b" not in text and "unknown field `\\x1b[31mred`" in text, text


def test_a_symbolic_size_is_an_identifier(parts: tuple[dict, dict]) -> None:
    program = copy.deepcopy(parts[0])
    program["outputs"][0]["shape"] = ["N", 2]
    validate_program(program, "p")
    program["outputs"][0]["shape"] = ["N-1", 2]
    assert "outputs[0]: shape: a symbolic size is a name" in refusal(program)


def test_a_host_attribute_array_is_checked_where_it_is(parts: tuple[dict, dict]) -> None:
    program = copy.deepcopy(parts[0])
    k, node = next((k, n) for k, n in enumerate(program["host_post"]) if n["attrs"])
    key = sorted(node["attrs"])[0]
    node["attrs"][key] = {"__array__": "float32", "shape": [2], "data": [1.0]}
    assert f"host_post[{k}].attrs.{key}: array of shape [2] holds 1 values" in refusal(program)
    node["attrs"][key] = {"__array__": "object", "shape": [1], "data": [1.0]}
    assert f"host_post[{k}].attrs.{key}.__array__: Invalid enum value 'object'" in refusal(program)
    node["attrs"][key] = [[[[[[1]]]]]]
    assert "nested deeper than" in refusal(program)


def test_a_kernels_composed_call_is_checked_as_a_call(parts: tuple[dict, dict]) -> None:
    program = copy.deepcopy(parts[0])
    step = {"op": "ttnn.multiply", "inputs": ["x"], "output": "y", "args": {"scalar": 2.0}}
    program["device_ops"].append({"op": "spc.kernel", "inputs": ["x"], "output": "k", "shape": [1, 1, 16, 1],
                                  "args": {"kernel": "nms_suppress", "composed": [step]}})
    n = len(program["device_ops"]) - 1
    validate_program(program, "p")  # the schema alone: that x is never made is plan/verify.py's to say
    step["args"]["scalar"] = "two"
    assert f"device_ops[{n}].args.composed[0].args.scalar: Expected `int | float`, got `str`" in refusal(program)
    step["op"] = "spc.kernel"
    assert f"device_ops[{n}]: args.composed: a kernel's composed calls cannot hold kernels" in refusal(program)
    program["device_ops"][n]["args"]["kernel"] = "launch"
    assert f"device_ops[{n}]: args.kernel: no kernel 'launch'" in refusal(program)


def test_the_manifest_keeps_unknown_fields_as_data_and_types_the_rest(parts: tuple[dict, dict]) -> None:
    manifest = dict(parts[1], something_new={"a": [1, 2]})
    validate_manifest(manifest, "p")
    for field, value, says in [("target", "p9000", "target: Invalid enum value 'p9000'"),
                               ("digest", "ABC", "digest: Expected a sha256 (64 lowercase hex digits)"),
                               ("digest", "a" * 64 + "\n", "digest: Expected a sha256 (64 lowercase hex digits)"),
                               ("format_version", True, "format_version: Expected `int`, got `bool`")]:
        with pytest.raises(SpcError, match=r"manifest\.json is not a valid manifest") as info:
            validate_manifest(dict(manifest, **{field: value}), "p")
        assert says in str(info.value), str(info.value)
