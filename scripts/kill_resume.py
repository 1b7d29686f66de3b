"""An hloc-style tree through `spc run --keep-going --skip-existing --format h5`, killed and resumed.

    .venv/bin/python scripts/kill_resume.py PLAN                    # 200 images, 10 SIGKILLs (issue 27)
    .venv/bin/python scripts/kill_resume.py PLAN --images 40 --kills 3

The tree: ``db/`` and ``query/`` with N images (PNG and JPEG, 3 of them corrupt), 5 files that are
not images, a hidden file and a symlink back to the root (a loop). One uninterrupted run gives the
reference .h5; then runs on another .h5 with --skip-existing are each killed with SIGKILL at a
random moment once they write (0-0.8 s after their first group), and a last run completes it.
The two files must hold the same groups, each dataset equal; the summary must name the corrupt
files. Prints what it found; exit 1 if not so.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def make_tree(root: Path, images: int, seed: int = 0) -> list[str]:
    """The tree; returns the corrupt files' relative paths."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    corrupt = []
    for i in range(images):
        folder = root / ("db" if i % 2 else "query") / f"s{i % 5}"
        folder.mkdir(parents=True, exist_ok=True)
        suffix = ".jpg" if i % 3 == 0 else ".png"
        path = folder / f"{i:04d}{suffix}"
        if i in (7, images // 2, images - 3):
            path.write_bytes(rng.bytes(300))  # a corrupt file with an image's name
            corrupt.append(path.relative_to(root).as_posix())
        else:
            pixels = (rng.random((48 + i % 7, 64 + i % 5)) * 255).astype(np.uint8)
            Image.fromarray(pixels).save(path)
    for k, name in enumerate(("notes.txt", "list.json", "db/readme.md", "query/s1/labels.csv", "db/s2/model.onnx")):
        (root / name).write_text(f"not an image {k}\n")
    (root / ".DS_Store").write_bytes(b"x")
    os.symlink("..", root / "db" / "loop")
    return corrupt


def spc_run(plan: Path, tree: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "spc.cli", "run", str(plan), str(tree), "--format", "h5", "-o",
                             str(out), "--keep-going", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def groups(path: Path) -> dict[str, dict[str, np.ndarray]]:
    import h5py

    out: dict[str, dict[str, np.ndarray]] = {}
    with h5py.File(path, "r") as fd:
        def visit(name: str, obj) -> None:
            if isinstance(obj, h5py.Group) and "keypoints" in obj:
                out[name] = {k: obj[k][()] for k in obj}

        fd.visititems(visit)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plan", type=Path)
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--work", type=Path, default=Path("bench-out/kill_resume"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import shutil

    shutil.rmtree(args.work, ignore_errors=True)
    tree = args.work / "tree"
    corrupt = make_tree(tree, args.images, args.seed)
    t0 = time.perf_counter()
    ref = spc_run(args.plan, tree, args.work / "ref.h5")
    _, err = ref.communicate()
    took = time.perf_counter() - t0
    named = all(c in err for c in corrupt)
    print(f"uninterrupted: exit {ref.returncode} in {took:.1f} s, {len(groups(args.work / 'ref.h5'))} groups, "
          f"the {len(corrupt)} corrupt files named: {named}")
    rng = random.Random(args.seed)
    out = args.work / "killed.h5"
    journal = out.with_name(f".{out.name}.spc-journal")
    for k in range(args.kills):
        p = spc_run(args.plan, tree, out, "--skip-existing")
        while p.poll() is None and not journal.is_dir():  # writing: its first group is in the journal
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.8))  # then a random moment of the writing (or of the merge)
        p.send_signal(signal.SIGKILL)
        p.communicate()
        have = len(groups(out)) if out.exists() else 0
        print(f"kill {k + 1}: {'killed' if p.returncode == -signal.SIGKILL else f'exit {p.returncode}'}, "
              f"{have} groups in the file")
    last = spc_run(args.plan, tree, out, "--skip-existing")
    _, err = last.communicate()
    want, got = groups(args.work / "ref.h5"), groups(out)
    same = want.keys() == got.keys() and all(
        want[g].keys() == got[g].keys() and all(np.array_equal(want[g][d], got[g][d]) for d in want[g]) for g in want)
    print(f"resumed: exit {last.returncode}, {len(got)} groups, equal to the uninterrupted run group by group: {same}")
    expected = args.images - len(corrupt)
    ok = named and same and len(want) == expected and ref.returncode == 1 and last.returncode == 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
