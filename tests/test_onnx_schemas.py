"""The importer's checks read onnx's op schemas from a table (frontend/onnx_schemas.py): it must
be the installed onnx's registry, for every op spc imports at every opset it takes."""

from __future__ import annotations

import msgspec
import pytest
from onnx import helper

from spc.frontend import onnx_schemas
from spc.ir import ops
from tests.test_import_hostile import in_fresh_process, model, vi, write


def test_the_table_is_what_onnxs_registry_says() -> None:
    table = msgspec.json.decode(onnx_schemas.TABLE.read_bytes())
    assert table == onnx_schemas.frozen(ops.onnx_op_types()), \
        "the schema table is stale: python -m spc.frontend.onnx_schemas"


@pytest.mark.parametrize("opset", list(onnx_schemas.OPSETS))
def test_each_lookup_gives_the_registrys_schema(opset: int) -> None:
    for op in ops.onnx_op_types():
        assert onnx_schemas.schema(op, opset) == onnx_schemas.live(op, opset), (op, opset)


def test_an_op_the_table_lacks_is_asked_of_the_registry() -> None:
    assert onnx_schemas.schema("LabelEncoder", 18) is None  # ai.onnx.ml's, not the default domain's
    assert onnx_schemas.schema("Conv", 18) == onnx_schemas.live("Conv", 18)


def test_onnxs_checker_runs_in_the_inference_child_and_its_refusal_is_one_line(tmp_path) -> None:
    """onnx's checker runs in the inference's forked child, before the inference (this process
    never builds onnx's schema registry); what it refuses is the compile's one line, reported only
    when this process's own checks pass. A refusal is planted in the checker to see the way back."""
    path = write(tmp_path, model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [4])], [vi("y", None)]))
    code = f"""
import os, sys
from spc.errors import SpcError
from spc.frontend import onnx_import, validate
where = []
def refuse(model, path):
    where.append(os.getpid())
    raise SpcError(f"{{path}}: node r (Relu) fails onnx's checker: planted; fix the node and re-export the model")
validate.onnx_check_nodes = refuse
try:
    onnx_import.import_onnx(__import__("pathlib").Path({str(path)!r}))
except SpcError as exc:
    print(str(exc), not where)  # `where` filled in the child only
"""
    assert in_fresh_process(code) == f"{path}: node r (Relu) fails onnx's checker: planted; fix the node and " \
        "re-export the model True"
