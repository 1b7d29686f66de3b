"""Run many plans on the mock p150, one device per plan, and say what ttnn made of each.

    python -m spc.runtime.ttnn_mock.check_plans PLAN.ttplan ...   # under .venv-ttnn

Prints one line per plan: ``ok NAME`` or ``error NAME: ttnn's message``; exits 1 if any failed.
The inputs are zeros of each device input's shape (nothing executes on the mock: only whether
ttnn accepts every call, its arguments, layouts and memory, is checked). Imports numpy and ttnn
only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from spc.errors import SpcError
from spc.plan.io import read_plan
from spc.runtime.ttnn_backend import TtnnProgram


def main(paths: list[str]) -> int:
    failed = 0
    for path in paths:
        name = Path(path).stem
        try:
            plan = read_plan(Path(path))
            program = TtnnProgram(plan.program, plan.weights, mock=True)
            try:
                inputs = {t.name: np.zeros(t.device_shape, np.float32) for t in plan.program.device_inputs}
                program.run(inputs, [t.name for t in plan.program.device_outputs])
            finally:
                program.close()
            print(f"ok {name}", flush=True)
        except SpcError as exc:
            failed += 1
            print(f"error {name}: {exc}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
