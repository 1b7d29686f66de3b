"""ONNX's own conformance cases, run through spc's importer and host interpreter.

The ``onnx`` wheel ships every node test of the ONNX backend suite (model, inputs, expected
outputs; ``onnx.backend.test.case.node.collect_testcases``). A case *belongs to* spc when every
node of its model is an op spc registers (ir/ops/); each such case must either

* import and evaluate to the expected outputs (same dtypes and shapes, within the case's
  tolerances), or
* be refused at import with one ``SpcError`` line whose reason is listed in :data:`EXCEPTIONS`
  (an element type or attribute value spc does not take, written down with why).

A case at an opset beyond the importer's range runs at :data:`MAX_OPSET` when every node means the
same there (the same schema, or one that differs only in the element types it allows: those the
importer does not take are refused as any model's would be); otherwise it is out of range.

``python -m spc.frontend.conformance [--markdown]`` prints the per-op table (docs/onnx-ops.md).
"""

from __future__ import annotations

import re
import sys
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from msgspec import Struct
from onnx import TensorProto, numpy_helper
from onnx.backend.test.case.node import collect_testcases

from spc.errors import SpcError
from spc.frontend.onnx_import import import_model
from spc.frontend.reading import MAX_OPSET, MIN_OPSET
from spc.ir import ops
from spc.ir.interpreter import evaluate_graph
from spc.ir.ops import onnx_modules

# refusals by what the importer says, whatever the case: element types spc does not take
REFUSED_MESSAGES: dict[str, str] = {
    r"unsupported ONNX element type (STRING|COMPLEX|FLOAT8|UINT4|INT4|FLOAT4|UINT2|INT2)":
        "strings, complex numbers, float8 and 4/2-bit types: spc takes 8 to 64-bit integers and 16 to 64-bit floats",
    r"unsupported ONNX element type UNDEFINED": "a value without an element type cannot be compiled",
    r"unsupported ONNX element type BFLOAT16": "bfloat16 is a device storage format in spc; models come in float32",
}


def exceptions() -> dict[str, str]:
    """Case name (or a prefix ending in "*") -> why spc refuses it, from the op modules."""
    out: dict[str, str] = {}
    for module in onnx_modules():
        out.update(module.CONFORMANCE_EXCEPTIONS)
    return out


class CaseResult(Struct):
    name: str
    ops: tuple[str, ...]
    status: str  # "pass" | "refused" | "fail" | "out-of-range"
    detail: str = ""


def exception_for(name: str, message: str = "") -> str | None:
    listed = exceptions()
    if name in listed:
        return listed[name]
    for key, why in listed.items():
        if key.endswith("*") and name.startswith(key[:-1]):
            return why
    for pattern, why in REFUSED_MESSAGES.items():
        if message and re.search(pattern, message):
            return why
    return None


def cases() -> Iterator[Any]:
    """Every node case whose model uses only ops spc registers (Constant included)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the case generators overflow casts on purpose
        found = collect_testcases()
    for case in sorted(found, key=lambda c: c.name):
        if case.model is None or not case.data_sets:
            continue
        nodes = case.model.graph.node
        if nodes and all(n.domain in ("", "ai.onnx") and ops.onnx_op(n.op_type) is not None for n in nodes):
            yield case


def _default_opset(model) -> int | None:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return None


def same_semantics(op_type: str, a: int, b: int) -> bool:
    """Whether ``op_type`` means the same at opsets ``a`` and ``b``: the same schema, or schemas that
    differ only in the element types they allow (ONNX 24-25 added float8/int4 to many ops)."""
    try:
        sa, sb = onnx.defs.get_schema(op_type, a), onnx.defs.get_schema(op_type, b)
    except onnx.defs.SchemaError:
        return False
    if sa.since_version == sb.since_version:
        return True

    def shape(s: Any) -> tuple:
        attrs = tuple(sorted((k, v.type, v.required, v.default_value.SerializeToString())
                             for k, v in s.attributes.items()))
        io = tuple((f.name, f.option) for f in (*s.inputs, *s.outputs))
        return attrs, io, s.min_input, s.max_input, s.min_output, s.max_output, s.has_function

    return shape(sa) == shape(sb)


def restamped(model) -> Any | None:
    """The model at an opset the importer takes, or None when its schemas differ there."""
    opset = _default_opset(model)
    if opset is None:
        return None
    if MIN_OPSET <= opset <= MAX_OPSET:
        return model
    target = MIN_OPSET if opset < MIN_OPSET else MAX_OPSET
    if not all(same_semantics(n.op_type, opset, target) for n in model.graph.node):
        return None
    out = type(model)()
    out.CopyFrom(model)
    for o in out.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = target
    return out


def _same(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str | None:
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if want.dtype.kind in "fc":
        if not np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
            err = np.nanmax(np.abs(got.astype(np.float64) - want.astype(np.float64))) if got.size else 0.0
            return f"values differ (max abs error {err:.3g})"
    elif not np.array_equal(got, want):
        return "values differ"
    return None


def case_array(x: Any) -> np.ndarray:
    """Case data as numpy: newer cases store some tensors as TensorProto."""
    return numpy_helper.to_array(x) if isinstance(x, TensorProto) else np.asarray(x)


def run_case(case: Any) -> CaseResult:
    ops = tuple(sorted({n.op_type for n in case.model.graph.node}))
    model = restamped(case.model)
    if model is None:
        return CaseResult(case.name, ops, "out-of-range", f"opset {_default_opset(case.model)}")
    why = exception_for(case.name)
    try:
        g = import_model(model, Path(case.name + ".onnx"), "case")
        for inputs, outputs in case.data_sets:
            inputs, outputs = [case_array(x) for x in inputs], [case_array(x) for x in outputs]
            feeds = {v.name: x for v, x in zip(g.inputs, inputs)}
            got = evaluate_graph(g, feeds)
            if len(got) != len(outputs):
                return CaseResult(case.name, ops, "fail", f"{len(got)} outputs, expected {len(outputs)}")
            for i, (a, b) in enumerate(zip(got, outputs)):
                bad = _same(a, b, case.rtol, case.atol)
                if bad:
                    return CaseResult(case.name, ops, "fail", f"output {i}: {bad}")
    except SpcError as exc:
        why = why or exception_for(case.name, str(exc))
        if why is not None:
            return CaseResult(case.name, ops, "refused", f"{why} ({exc})")
        return CaseResult(case.name, ops, "fail", f"refused without a listed reason: {exc}")
    except Exception as exc:  # an evaluator that crashes is a bug, not a refusal
        return CaseResult(case.name, ops, "fail", f"{type(exc).__name__}: {str(exc)[:200]}")
    if why is not None:
        return CaseResult(case.name, ops, "fail", f"listed as refused ({why}) but passes: drop it from EXCEPTIONS")
    return CaseResult(case.name, ops, "pass")


def table(results: list[CaseResult]) -> str:
    per_op: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results:
        key = r.ops[0] if len(r.ops) == 1 else "(several ops: " + ", ".join(r.ops) + ")"
        per_op[key][r.status] += 1
    lines = ["| op | cases | pass | refused (listed) | out of opset range | fail |", "|---|---:|---:|---:|---:|---:|"]
    for op in sorted(per_op, key=lambda k: (k.startswith("("), k)):
        c = per_op[op]
        lines.append(f"| {op} | {sum(c.values())} | {c['pass']} | {c['refused']} | {c['out-of-range']} | {c['fail']} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    results = [run_case(c) for c in cases()]
    totals = Counter(r.status for r in results)
    print(f"{len(results)} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(totals.items())))
    if "--markdown" in argv:
        print(table(results))
    for r in results:
        if r.status in ("fail", "refused") and ("--all" in argv or r.status == "fail"):
            print(f"{r.status:8} {r.name}: {r.detail}")
    return 1 if totals["fail"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
