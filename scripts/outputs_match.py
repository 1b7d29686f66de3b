"""The emulator's outputs of this checkout against another's, option set by option set, with what
`spc inspect` says of each plan's uploads and read-backs and whether the mock p150 takes it: for a
change that must not change what a plan computes (docs/end-to-end.md).

    git worktree add /tmp/before HEAD~1
    .venv/bin/python scripts/outputs_match.py /tmp/before [SET ...]

Each plan is compiled and run (`spc compile`, `spc run` on the six natural images) by each
checkout's spc in a fresh process; every output but the plan's own hash must be equal, bit for bit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SETS = {"b1": [], "b4": ["--batch", "4"], "b8": ["--batch", "8"], "mesh4": ["--target", "4xp150", "--batch", "4"],
        "dense": ["--dense"], "b2dense": ["--batch", "2", "--dense"], "kernels": ["--kernels", "on"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", type=Path, help="the other checkout")
    ap.add_argument("sets", nargs="*", help=f"option sets (default: all of {', '.join(SETS)})")
    ap.add_argument("--work", type=Path, default=Path("bench-out/outputs_match"))
    args = ap.parse_args()
    unknown = [s for s in args.sets if s not in SETS]
    if unknown:
        ap.error(f"no option set {unknown[0]!r} (sets: {', '.join(SETS)})")
    sys.path.insert(0, str(ROOT / "scripts"))
    from evalset import evaluation_images, exported

    src = exported(Path("bench-out"), 480, 640).resolve()
    images = [str(p.resolve()) for p in evaluation_images(Path("bench-out"))]
    args.work.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args.sets or list(SETS):
        opts = SETS[name]
        outputs = {}
        for tag, tree in (("before", args.before.resolve()), ("after", ROOT)):
            plan, out = (args.work / f"{name}_{tag}.ttplan").resolve(), (args.work / f"{name}_{tag}").resolve()
            spc = [sys.executable, "-m", "spc.cli"]
            subprocess.run([*spc, "compile", str(src), "-o", str(plan), "--overwrite", *opts], cwd=tree, check=True,
                           capture_output=True)
            target = ["--target", "4xp150"] if "4xp150" in opts else []
            subprocess.run([*spc, "run", str(plan), *images, "-o", str(out), "--overwrite", "-q", *target], cwd=tree,
                           check=True, capture_output=True)
            outputs[tag] = {f.name: dict(np.load(f)) for f in sorted(out.rglob("*.npz"))}
        t = json.loads(subprocess.run([*spc, "inspect", str(plan), "--json"], cwd=ROOT, capture_output=True, text=True,
                                      check=True).stdout)["throughput"]
        mock = subprocess.run([str(ROOT / ".venv-ttnn" / "bin" / "python"), "-m", "spc.runtime.ttnn_mock.check_plans",
                               str(plan)], cwd=ROOT, capture_output=True, text=True)
        same = outputs["before"].keys() == outputs["after"].keys() and all(
            np.array_equal(v, outputs["after"][f][k]) for f, arrays in outputs["before"].items()
            for k, v in arrays.items() if k != "spc_plan_sha256")
        failed += not same or mock.returncode != 0
        print(f"{name}: {len(outputs['after'])} images, outputs {'identical' if same else 'DIFFERENT'}; "
              f"{t['uploads']} upload(s), {t['readbacks']} read-back(s) per run; mock p150 "
              f"{'ok' if mock.returncode == 0 else mock.stdout[-300:]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
