"""Compile the matrix of plans a restructuring must leave byte-identical, and print a sha256 of
each plan's members: run it before and after a change and compare the two lists.

    .venv/bin/python scripts/plan_matrix.py bench-out/matrix > after.txt
    git worktree add /tmp/before HEAD~1
    .venv/bin/python scripts/plan_matrix.py bench-out/matrix --tree /tmp/before > before.txt
    diff before.txt after.txt

The demo model at 480x640 under each preset and each plan-changing option (dense, kernels, batch,
a 4-chip mesh, single-pass NMS, a keypoint capacity, a forced memory configuration, --no-verify),
every corpus export at 120x160 (the dynamic one with --input-shape), two at 480x640. Each
compile is `spc compile` in a fresh process, as a user runs it.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DEMO_OPTIONS = [[], ["--precision", "fast"], ["--precision", "balanced"], ["--dense"], ["--kernels", "on"],
                ["--batch", "2"], ["--target", "4xp150", "--batch", "4"], ["--nms-single-pass"],
                ["--keypoint-capacity", "512"], ["--memory-config", "encoder.*=dram:height=4"], ["--no-verify"]]
LARGE = ("superpoint_open_op17", "fixed_k_op20")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("work", type=Path, help="folder for the exports and plans")
    ap.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose spc compiles (default: this one)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "scripts"))
    from evalset import exported

    from tests.corpus.exports import CORPUS, build

    args.work = args.work.resolve()  # the manifest records the source's absolute path: the same in both trees
    args.work.mkdir(parents=True, exist_ok=True)
    jobs: list[tuple[str, Path, list[str]]] = [(f"demo {' '.join(o) or 'default'}", exported(args.work, 480, 640), o)
                                               for o in DEMO_OPTIONS]
    for name in sorted(CORPUS):
        dynamic = "dynamic" in name
        jobs.append((f"{name} 120x160", build(name, args.work, 120, 160),
                     ["--input-shape", "1,1,120,160"] if dynamic else []))
    jobs += [(f"{name} 480x640", build(name, args.work, 480, 640), []) for name in LARGE]
    failed = 0
    for i, (label, model, options) in enumerate(jobs):
        plan = args.work / f"matrix_{i:02d}.ttplan"
        proc = subprocess.run([sys.executable, "-m", "spc.cli", "compile", str(model), "-o", str(plan), "--overwrite",
                               "-q", *options], capture_output=True, text=True, cwd=args.tree)
        if proc.returncode:
            failed += 1
            why = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
            print(f"{label}: failed: {why}")
            continue
        print(f"{_members_digest(plan)}  {label}")
    return 1 if failed else 0


def _members_digest(plan: Path) -> str:
    """One sha256 over the plan's members by name: what the plan holds, whatever their order in
    the zip (the manifest moved last on 2026-12-06)."""
    h = hashlib.sha256()
    with zipfile.ZipFile(plan) as zf:
        for name in sorted(zf.namelist()):
            h.update(name.encode() + b"\0" + hashlib.sha256(zf.read(name)).digest())
    return h.hexdigest()


if __name__ == "__main__":
    sys.exit(main())
