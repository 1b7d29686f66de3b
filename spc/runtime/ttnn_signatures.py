"""Check that a program's calls are spelled as the installed ttnn spells them.

The lowering names every call and argument after the ttnn API (program.json). This reads the
nanobind signatures of the installed ttnn (``__nb_signature__``; ``inspect`` does not work on
ttnn ops) and reports every call whose keywords no overload accepts, and every
``conv_config`` / ``compute_config`` field that ``ttnn.Conv2dConfig`` /
``ttnn.init_device_compute_kernel_config`` do not take. Imports numpy and ttnn only.

    python -m spc.runtime.ttnn_signatures PLAN.ttplan     # under .venv-ttnn; exit 1 on a mismatch
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from pathlib import Path
from typing import Any

from spc.plan.io import read_plan
from spc.plan.program import Program, TtOp
from spc.runtime.ttnn_backend import RUNTIME_CALLS
from spc.runtime.ttnn_mock.harness import prepare
from spc.ttnn.calls import Call, describe

_PARAM = re.compile(r"[(,]\s*(\w+)\s*:")


def overloads(fn: Any) -> list[set[str]]:
    """Parameter names of each overload of a ttnn op, function or class constructor."""
    target = getattr(fn, "function", fn)
    for get in (lambda: type(target).__call__.__nb_signature__, lambda: target.__nb_signature__,
                lambda: target.__init__.__nb_signature__):
        try:
            signatures = get()
        except AttributeError:
            continue
        return [set(_PARAM.findall(text)) - {"self"} for text, *_ in signatures]
    try:  # a plain Python function (ttnn.open_mesh_device)
        return [set(inspect.signature(target).parameters)]
    except (TypeError, ValueError):
        raise TypeError(f"{fn!r} has no signature") from None


def check_runtime_calls() -> list[str]:
    """The runtime's own calls (trace capture, events, queues: RUNTIME_CALLS in
    runtime/ttnn_backend.py), which the mock device cannot run, against the installed ttnn."""
    import ttnn  # only in the ttnn environment, and after main() set its runtime root (harness.prepare)

    problems = []
    for name, keywords in RUNTIME_CALLS.items():
        fn = getattr(ttnn, name, None)
        if fn is None:
            problems.append(f"ttnn.{name}: ttnn has no such function")
        elif not any(set(keywords) <= params for params in overloads(fn)):
            problems.append(f"ttnn.{name}: no overload takes {sorted(keywords)}")
    return problems


def _calls(x: Any) -> list[Call]:
    """Every call in a description, nested ones (ttnn.Conv2dConfig(...)) included."""
    if isinstance(x, Call):
        return [x] + [c for v in (*x.args, *x.kwargs.values()) for c in _calls(v)]
    if isinstance(x, (list, tuple)):
        return [c for v in x for c in _calls(v)]
    return []


def check(program: Program) -> list[str]:
    """The keywords of every call the program makes (as ttnn/calls describes it,
    i.e. as the backend and emit-py spell it) against the installed ttnn's signatures."""
    import ttnn  # as in check_runtime_calls

    problems: list[str] = []
    seen: set[tuple[str, frozenset[str]]] = set()
    ops = [TtOp.from_step(step, op.source, op.block) if op.op == "spc.kernel" else op for op in program.device_ops
           for step in (op.args["composed"] if op.op == "spc.kernel" else [None])]
    for op in ops:
        for call in _calls(describe(op)):
            keys = frozenset(call.kwargs)
            if (call.fn, keys) in seen:
                continue
            seen.add((call.fn, keys))
            fn: Any = ttnn
            for part in call.fn.split(".")[1:]:
                fn = getattr(fn, part, None)
            if fn is None:
                problems.append(f"{call.fn}: ttnn has no such function")
            elif not any(keys <= params for params in overloads(fn)):
                problems.append(f"{call.fn} ({op.block or op.source}): no overload takes {sorted(keys)}")
    return problems


def main(argv: list[str]) -> int:
    os.environ.update(prepare())  # importing ttnn needs its runtime root even without a device
    problems = check(read_plan(Path(argv[0])).program) + check_runtime_calls()
    for p in problems:
        print(p)
    print(f"{len(problems)} signature mismatch(es)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
