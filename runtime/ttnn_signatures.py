"""Check that a program's calls are spelled as the installed ttnn spells them.

The lowering names every call and argument after the ttnn API (program.json). This reads the
nanobind signatures of the installed ttnn (``__nb_signature__``; ``inspect`` does not work on
ttnn ops) and reports every call whose keywords no overload accepts, and every
``conv_config`` / ``compute_config`` field that ``ttnn.Conv2dConfig`` /
``ttnn.init_device_compute_kernel_config`` do not take. Imports numpy and ttnn only.

    python -m spc.runtime.ttnn_signatures PLAN.ttplan     # under .venv-ttnn; exit 1 on a mismatch
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from spc.lowering.program import Program

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
    raise TypeError(f"{fn!r} has no nanobind signature")


def check(program: Program) -> list[str]:
    import ttnn

    problems: list[str] = []
    seen: set[tuple[str, frozenset[str]]] = set()
    for op in program.device_ops:
        name = op.op.removeprefix("ttnn.")
        keys = frozenset(op.args)
        if (name, keys) in seen:
            continue
        seen.add((name, keys))
        fn = getattr(ttnn, name, None)
        if fn is None:
            problems.append(f"{op.op}: ttnn has no such function")
            continue
        if not any(keys <= params for params in overloads(fn)):
            problems.append(f"{op.op} ({op.block}): no overload takes {sorted(keys)}")
        nested = (("conv_config", ttnn.Conv2dConfig), ("compute_config", ttnn.init_device_compute_kernel_config))
        for key, builder in nested:
            if key in op.args:
                fields = set(op.args[key])
                if not any(fields <= params for params in overloads(builder)):
                    problems.append(f"{op.op} ({op.block}): {key} fields {sorted(fields)} not all accepted")
    return problems


def main(argv: list[str]) -> int:
    from spc.lowering.plan import read_plan
    from spc.runtime.ttnn_mock.harness import prepare

    os.environ.update(prepare())  # importing ttnn needs its runtime root even without a device
    problems = check(read_plan(Path(argv[0])).program)
    for p in problems:
        print(p)
    print(f"{len(problems)} signature mismatch(es)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
