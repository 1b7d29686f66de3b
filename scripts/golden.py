"""`make golden`: ttnn's own reference functions against spc's emulator, call by call.

    .venv/bin/python scripts/golden.py plans bench-out/golden      # compile the plans (main venv)
    .venv-golden/bin/python scripts/golden.py check bench-out/golden   # ttnn 0.81.1 + torch

Every corpus export at 120x160 is compiled twice: with the defaults (bfloat16 storage, the
`accurate` preset) and in a float32 configuration (every block's weights and outputs float32).
Each plan's program then runs on the emulator on a natural image, and every call is given, as
its inputs, the tensors the emulator gave it, to ttnn's golden function for that call
(``ttnn.get_golden_function``, with the call's arguments as spc spells them: ttnn/calls); the
golden's result, stored in the call's format as the device stores it, is compared with the
emulator's. Printed per call kind: calls, how many bit-equal, the largest difference relative
to the largest magnitude, the lowest PCC. docs/ttnn.md has the table and what it found.

The golden venv (`make golden-env`): ttnn 0.81.1 and torch 2.9.1 (PyPI's only build for Python
3.12 is CUDA's, ~6.7 GB installed); it runs on the CPU.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SIZE = (120, 160)
FP32 = """preset = "accurate"
[blocks."*"]
weights_dtype = "float32"
output_dtype = "float32"
"""


def make_plans(out: Path) -> int:
    """The corpus at 120x160, each export in both configurations, and a natural image's input."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "scripts"))
    from evalset import evaluation_images

    from spc.compiler import compile_onnx
    from spc.plan.io import read_plan
    from spc.plan.program import DEFAULT_IMAGE
    from spc.runtime.inputs import load_input
    from spc.ttnn.precision import load_precision_config
    from tests.corpus.exports import CORPUS, build

    out.mkdir(parents=True, exist_ok=True)
    (out / "fp32.toml").write_text(FP32)
    fp32 = load_precision_config(out / "fp32.toml")
    (image,) = evaluation_images(out, ("astronaut",))
    index = []
    for name in CORPUS:
        src = build(name, out, *SIZE)
        options = {"input_shape": [1, 1, *SIZE]} if "dynamic" in name else {}
        for config, precision in (("bf16", None), ("fp32", fp32)):
            plan = out / f"{name}_{config}.ttplan"
            plan.unlink(missing_ok=True)
            compile_onnx(src, plan, **({"precision": precision} if precision else {}), **options)
            shape = [int(d) for d in read_plan(plan).program.inputs[0].shape]
            np.save(plan.with_suffix(".input.npy"), load_input(image, shape, DEFAULT_IMAGE))
            index.append({"plan": plan.name, "export": name, "config": config})
    (out / "plans.json").write_text(json.dumps(index, indent=1) + "\n")
    print(f"{len(index)} plans in {out}; now: .venv-golden/bin/python scripts/golden.py check {out}")
    return 0


# -- the check (ttnn + torch) ---------------------------------------------------------------------

def _pool_helpers() -> None:
    """ttnn 0.81.1's pool goldens import two helpers from tt-metal's test tree, which the wheel
    does not ship: stand-ins of our own, doing what their docstrings say (the flat [1, 1, N*H*W, C]
    input as NCHW, a 4-sided padding applied with the fill value; the NCHW result flattened back)."""
    import torch

    def prepare_torch_pool_input(x: Any, n: int, h: int, w: int, c: int, padding: Any, pad_fill_value: float) -> Any:
        nchw = x.reshape(n, h, w, c).permute(0, 3, 1, 2)
        if isinstance(padding, (list, tuple)) and len(padding) == 4:
            top, bottom, left, right = padding
            return torch.nn.functional.pad(nchw, (left, right, top, bottom), value=pad_fill_value), 0
        return nchw, padding

    def pool_output_to_flat_nhwc(y: Any) -> Any:
        n, c, h, w = y.shape
        return y.permute(0, 2, 3, 1).reshape(1, 1, n * h * w, c)

    names = ["tests", "tests.sweep_framework", "tests.sweep_framework.sweep_utils",
             "tests.sweep_framework.sweep_utils.pool2d_common"]
    for name in names:
        sys.modules.setdefault(name, types.ModuleType(name))
    helpers = sys.modules[names[-1]]
    helpers.prepare_torch_pool_input = prepare_torch_pool_input  # type: ignore[attr-defined]
    helpers.pool_output_to_flat_nhwc = pool_output_to_flat_nhwc  # type: ignore[attr-defined]


def _golden_result(op: Any, env: dict[str, Any], weights: dict[str, np.ndarray], ttnn: Any) -> Any:
    """ttnn's golden function of ``op`` on the emulator's tensors, with the arguments as spc spells
    the call; the nested configurations (Conv2dConfig, compute configs) made by ttnn itself."""
    import torch

    from spc.emulator.numerics import conv_weight_storage
    from spc.ttnn.calls import describe
    from spc.ttnn.calls.definition import attribute, evaluate, markers

    def weight(m: Any) -> Any:  # as the device stores it
        w = torch.from_numpy(np.asarray(weights[m.key], np.float32))
        return w if m.bias else conv_weight_storage(w, op.args["conv_config"].weights_dtype)

    leaf = markers(ttnn, env, None, lambda: ttnn.device.Arch.BLACKHOLE, weight)

    spec = describe(op)
    args = [evaluate(a, leaf, lambda fn, a, k: attribute(ttnn, fn)(*a, **k)) for a in spec.args]
    kwargs = {k: evaluate(v, leaf, lambda fn, a, kw: attribute(ttnn, fn)(*a, **kw)) for k, v in spec.kwargs.items()
              if k != "memory_config"}  # where the result lives, not what it is (reshape's golden refuses it)
    golden = ttnn.get_golden_function(attribute(ttnn, spec.fn))
    result = golden(*args, **kwargs)
    if op.op == "ttnn.conv2d" and isinstance(result, (list, tuple)):  # return_weights_and_bias: [out]
        result = result[0]
    return result


def _compare(got: Any, want: Any) -> tuple[int, int, float, float]:
    """(values, bit-equal values, max |diff| / max |want|, PCC)."""
    g, w = np.asarray(got, np.float64).ravel(), np.asarray(want, np.float64).ravel()
    both = np.isfinite(g) & np.isfinite(w)
    equal = int(np.sum((g == w) | (np.isnan(g) & np.isnan(w))))
    scale = float(np.max(np.abs(w[both]))) if both.any() else 0.0
    diff = float(np.max(np.abs(g[both] - w[both]))) / scale if scale else 0.0
    if g[both].std() == 0 or w[both].std() == 0:
        pcc = 1.0 if np.array_equal(g[both], w[both]) else 0.0
    else:
        pcc = float(np.corrcoef(g[both], w[both])[0, 1])
    return g.size, equal, diff, pcc


def check(folder: Path) -> int:
    import torch
    import ttnn

    from spc.emulator.numerics import round_storage
    from spc.plan.io import read_plan
    from spc.runtime.emu import EmuBackend
    from spc.runtime.host import run_host

    _pool_helpers()
    index = json.loads((folder / "plans.json").read_text())
    rows: dict[tuple[str, str], list[tuple[int, int, float, float]]] = {}
    missing: dict[str, str] = {}
    for entry in index:
        plan = read_plan(folder / entry["plan"])
        program, weights = plan.program, plan.weights
        spec = program.inputs[0]
        x = np.load((folder / entry["plan"]).with_suffix(".input.npy"))
        host = {spec.name: x}
        run_host(program.host_pre, host, dict(weights))
        emu = EmuBackend().prepare(program, weights)
        env = emu.resume(emu.environment({t.name: t.layout.to_device(host[t.name]) for t in program.device_inputs}),
                         {})
        env = {k: v.to(torch.float32) for k, v in env.items()}
        for op in program.device_ops:
            if op.op == "spc.kernel":
                continue
            try:
                result = _golden_result(op, env, weights, ttnn)
            except Exception as exc:  # a golden that does not run: said once per call kind
                missing.setdefault(op.op, f"{type(exc).__name__}: {str(exc)[:120]}")
                continue
            results = result if isinstance(result, tuple) else (result,)
            for k, (name, r) in enumerate(zip(op.results, results)):
                got = torch.as_tensor(r).to(torch.float32).reshape(env[name].shape)
                kind, emulated = op.op, env[name]
                if op.op == "ttnn.topk" and k == 1:
                    # positions: the order of equal values is open in ttnn's reference (torch.topk);
                    # compared by the values they pick
                    row = env[op.inputs[0]].reshape(-1)
                    kind, got, emulated = "ttnn.topk positions", row[got.long().reshape(-1)], \
                        row[emulated.long().reshape(-1)]
                else:
                    got = round_storage(got, op.dtype)
                rows.setdefault((entry["config"], kind), []).append(_compare(emulated, got))
        emu.close()
    print(f"ttnn {ttnn.__version__ if hasattr(ttnn, '__version__') else '0.81.1'}, torch {torch.__version__}; "
          f"{len(index)} plans; each call on the emulator's inputs, the golden's result stored in the call's format\n")
    print("| config | call | calls | bit-equal values | max diff / max | min PCC |\n|---|---|---:|---:|---:|---:|")
    for (config, name), found in sorted(rows.items()):
        n, eq = sum(f[0] for f in found), sum(f[1] for f in found)
        print(f"| {config} | {name} | {len(found)} | {100 * eq / n:.2f} % | {max(f[2] for f in found):.2e} | "
              f"{min(f[3] for f in found):.6f} |")
    for name, why in sorted(missing.items()):
        print(f"no golden run for {name}: {why}")
    return 0 if not missing and all(math.isfinite(f[3]) for v in rows.values() for f in v) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=("plans", "check"))
    ap.add_argument("folder", type=Path)
    args = ap.parse_args()
    return make_plans(args.folder) if args.step == "plans" else check(args.folder)


if __name__ == "__main__":
    sys.exit(main())
