"""The L1 model (memory/) against ttnn's own allocator on the mock p150, call by call.

    .venv-ttnn/bin/python scripts/l1_agreement.py PLAN [--json OUT.json]

Runs the plan's ttnn program on the mock p150 (runtime/ttnn_mock) with ttnn's graph capture
around each call, which reports the circular buffers and L1 buffers the call allocated on its
busiest core; prints them beside the model's figures and both verdicts (fits / rejected). Stops
at the first call ttnn rejects. Needs only numpy + ttnn (Python 3.12 environment).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def measure(plan_path: Path) -> list[dict[str, Any]]:
    from spc.runtime.ttnn_mock.harness import prepare

    os.environ.update(prepare())
    import numpy as np
    import ttnn

    from spc.errors import SpcError
    from spc.memory.residency import walk
    from spc.plan.io import read_plan
    from spc.plan.program import TtOp
    from spc.runtime.ttnn_backend import TtnnProgram
    from spc.ttnn.targets import get_target

    plan = read_plan(plan_path)
    target = get_target(plan.manifest.get("target", "p150"))
    model = iter(walk(plan.program, target))
    tp = TtnnProgram(plan.program, plan.weights, mock=True)
    graph = ttnn._ttnn.graph  # the C++ capture: ttnn.graph's Python wrapper imports torch
    rows: list[dict[str, Any]] = []

    @contextlib.contextmanager
    def measured(op: TtOp) -> Iterator[None]:
        """ttnn's peak buffers on the busiest core during one call, beside the model's."""
        m = next(model).placed
        graph.begin_graph_capture(graph.RunMode.NORMAL)
        try:
            yield
        finally:
            usage = graph.extract_resource_usage_per_core(graph.end_graph_capture())
            rows.append({"index": len(rows), "op": op.op.removeprefix("ttnn."), "block": op.block or op.source,
                         # circular buffers, and Metal 2.0 dataflow buffers (ttnn.topk's) in the same region
                         "ttnn_cb": usage.peak_cb + usage.peak_dataflow_buffer, "ttnn_l1": usage.peak_l1,
                         "model_cb": m.use.cb, "model_l1": m.use.l1, "model_total": m.total,
                         "model_headroom": m.headroom, "model_fits": m.fits, "ttnn_fits": True, "error": None})

    try:
        tp.device.disable_and_clear_program_cache()  # a cached program allocates nothing to see
        tp.write({t.name: np.zeros(t.device_shape, np.float32) for t in plan.program.device_inputs}, 0)
        tp.execute({t.name for t in plan.program.device_outputs}, watch=measured)
    except SpcError as exc:  # ttnn's rejection, of the last call measured, is the measurement
        rows[-1].update(ttnn_fits=False, error=str(exc).split(": ", 1)[-1])
    finally:
        tp.close()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan", type=Path)
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = ap.parse_args()
    rows = measure(args.plan)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(f"{'#':>3} {'call':12} {'block':38} {'ttnn cb':>9} {'model cb':>9} {'ttnn L1':>9} {'model L1':>9} "
          f"{'headroom':>9}  fits (model/ttnn)")
    for r in rows:
        print(f"{r['index']:>3} {r['op']:12} {r['block'][:38]:38} {r['ttnn_cb']:>9} {r['model_cb']:>9} "
              f"{r['ttnn_l1']:>9} {r['model_l1']:>9} {r['model_headroom']:>9}  "
              f"{r['model_fits']!s:5}/{r['ttnn_fits']!s:5}"
              + (f"  {r['error'][:90]}" if r["error"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
