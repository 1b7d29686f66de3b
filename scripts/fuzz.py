"""The long fuzz run (``make fuzz``; figures in docs/fuzz.md).

Runs N cases per category (tests/fuzz/: plan bytes, plan members, ONNX models, inputs, output
paths), each in its own folder, in worker processes (a segfault or a hang is counted, not fatal),
and prints the table: how many cases gave a one-line error, ran ok, or gave an internal error, a
crash, a hang or data loss. Exits 1 when any case did one of the last four, listing each with
the command that reproduces it:

    python scripts/fuzz.py                                   # 10,000 cases on 2 workers
    python scripts/fuzz.py --cases 500 --jobs 1              # a shorter run
    python scripts/fuzz.py --category onnx --seed 17 --show  # one case, in this process, in full
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shlex
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the share of the cases each category gets (the ONNX and path cases cost the most per case)
SHARES = {"plan-bytes": 25, "plan-members": 25, "onnx": 15, "inputs": 20, "paths": 15}


def _counts(total: int, only: list[str] | None, per: list[str]) -> dict[str, int]:
    names = only or list(SHARES)
    weight = sum(SHARES[n] for n in names)
    counts = {n: round(total * SHARES[n] / weight) for n in names}
    for item in per:
        name, _, n = item.partition("=")
        if name not in SHARES:
            raise SystemExit(f"fuzz: no category {name!r} ({', '.join(SHARES)})")
        counts[name] = int(n)
    return counts


def _table(stats: dict[str, Counter], seconds: dict[str, float]) -> str:
    from tests.fuzz.harness import OUTCOMES

    head = ["category", "tried", *OUTCOMES, "seconds / case"]
    rows = []
    total: Counter = Counter()
    for name, c in stats.items():
        tried = sum(c.values())
        total.update(c)
        rows.append([name, str(tried), *(str(c[o]) for o in OUTCOMES), f"{seconds[name] / max(tried, 1):.3f}"])
    rows.append(["**total**", f"**{sum(total.values())}**", *(f"**{total[o]}**" for o in OUTCOMES),
                 f"{sum(seconds.values()) / max(sum(total.values()), 1):.3f}"])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = lambda r: "| " + " | ".join(v.ljust(w) for v, w in zip(r, widths)) + " |"
    return "\n".join([line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def _show(category: str, seed: int, fixtures: Path) -> int:
    from tests.fuzz.harness import Fixtures, run_in_fresh_folder

    r = run_in_fresh_folder(category, seed, Fixtures(fixtures))
    print(f"case      {category} {seed}: {r.what}")
    print(f"command   spc {shlex.join(r.args)}")
    print(f"outcome   {r.outcome}" + (f": {r.detail}" if r.detail else ""))
    print(f"seconds   {r.seconds:.2f}")
    if r.stdout.strip():
        print("stdout    " + r.stdout.strip().replace("\n", "\n          "))
    if r.stderr.strip():
        print("stderr    " + r.stderr.strip().replace("\n", "\n          "))
    return 1 if r.bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=10000, help="cases in all, shared as SHARES says (default 10000)")
    ap.add_argument("--per", action="append", default=[], metavar="CATEGORY=N", help="N cases of CATEGORY")
    ap.add_argument("--category", action="append", help="only this category (repeatable)")
    ap.add_argument("--start", type=int, default=0, help="the first seed (default 0)")
    ap.add_argument("--seed", type=int, default=None, help="run one case (with --category), in this process")
    ap.add_argument("--show", action="store_true", help="with --seed: print the case's command and output")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    ap.add_argument("--timeout", type=float, default=90.0, help="seconds a case may take (default 90)")
    ap.add_argument("--fixtures", type=Path, default=ROOT / "bench-out" / "fuzz",
                    help="where the export and its plans are built once (default bench-out/fuzz)")
    ap.add_argument("--json", type=Path, default=None, help="write every result as JSON lines here")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    from tests.fuzz.harness import BAD, OUTCOMES, Result, Worker, build_fixtures, snapshot

    t0 = time.perf_counter()
    build_fixtures(args.fixtures)
    print(f"fixtures in {args.fixtures} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    if args.seed is not None:
        if not args.category or len(args.category) != 1:
            raise SystemExit("fuzz: --seed runs one case: give its --category")
        return _show(args.category[0], args.seed, args.fixtures)

    fixtures_before = snapshot(args.fixtures)
    counts = _counts(args.cases, args.category, args.per)
    todo: queue.Queue = queue.Queue()
    for name, n in counts.items():
        for seed in range(args.start, args.start + n):
            todo.put((name, seed))
    stats: dict[str, Counter] = {name: Counter() for name in counts}
    seconds: dict[str, float] = defaultdict(float)
    bad: list = []
    lock = threading.Lock()
    out = args.json.open("w") if args.json else None
    done = [0]
    total = sum(counts.values())
    t1 = time.perf_counter()

    def work() -> None:
        worker = Worker(args.fixtures, args.timeout)
        try:
            while True:
                try:
                    name, seed = todo.get_nowait()
                except queue.Empty:
                    return
                r = worker.run(name, seed)
                with lock:
                    stats[name][r.outcome] += 1
                    seconds[name] += r.seconds
                    done[0] += 1
                    if r.bad:
                        bad.append(r)
                        print(f"BAD {r.outcome}: {name} {seed}: {r.detail} [{r.what}]", file=sys.stderr)
                    if out is not None:
                        out.write(r.as_json() + "\n")
                    if done[0] % 250 == 0:
                        rate = done[0] / (time.perf_counter() - t1)
                        print(f"{done[0]}/{total} cases, {rate:.1f}/s, about {(total - done[0]) / rate / 60:.0f} "
                              "min left", file=sys.stderr)
        finally:
            worker.close()

    threads = [threading.Thread(target=work) for _ in range(max(1, args.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t1
    if out is not None:
        out.close()
    changed = [p for p, e in fixtures_before.items() if snapshot(args.fixtures).get(p) != e]
    if changed:  # no case may reach past its own folder
        bad.append(Result("fixtures", 0, "data loss", f"the fixtures changed: {', '.join(changed)}"))
        stats.setdefault("fixtures", Counter())["data loss"] += 1
    print(_table(stats, seconds))
    print(f"\n{total} cases in {wall / 60:.1f} min on {args.jobs} worker(s) "
          f"(seeds {args.start}..{args.start + max(counts.values()) - 1} per category)")
    if bad:
        print(f"\n{len(bad)} bad case(s):")
        for r in sorted(bad, key=lambda r: (r.category, r.seed)):
            print(f"  {r.outcome}: {r.detail}\n    {r.what}\n    {r.repro()}")
    summary = {o: sum(c[o] for c in stats.values()) for o in OUTCOMES}
    print("\n" + json.dumps({"cases": total, "minutes": round(wall / 60, 1), **summary}), file=sys.stderr)
    return 1 if any(summary[o] for o in BAD) else 0


if __name__ == "__main__":
    sys.exit(main())
