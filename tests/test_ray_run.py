"""`spc run PLAN DATASET --ray`: a real Ray cluster on 127.0.0.1 (a head and two workers, started and
stopped here by their own handles), 60 images and a bad one, a worker node killed mid-run with the
actor on it; every result exactly once and equal to a single-process `spc run`; a second run
skips them all."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from spc.files import file_sha256
from spc.tools.ray_run import dataset, output_name
from spc.tools.run import PLAN_KEY

RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # every socket on 127.0.0.1 (reference/ray-on-loopback.md)
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_timeout_ms": "1000",
}
STORE = 200 << 20


@pytest.fixture(scope="module")
def tree(images: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 crops of the natural images, of several sizes, in a folder tree, and one bad PNG."""
    from PIL import Image

    root = tmp_path_factory.mktemp("dataset")
    rng = np.random.default_rng(17)
    pictures = [Image.open(p).convert("L") for p in images.values()]
    for i in range(60):
        im = pictures[i % len(pictures)]
        w, h = int(rng.integers(100, 260)), int(rng.integers(80, 200))
        x, y = int(rng.integers(0, im.width - w)), int(rng.integers(0, im.height - h))
        folder = root / ("a" if i < 30 else "b/c")
        folder.mkdir(parents=True, exist_ok=True)
        im.crop((x, y, x + w, y + h)).save(folder / f"img{i:02d}.png")
    (root / "b" / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n not an image")
    return root


@pytest.fixture(scope="module")
def cluster():
    """A head and two workers, 1 CPU each (an actor and a read task fit on each), all on loopback."""
    saved = {k: os.environ.get(k) for k in [*RAY_ENV, "RAY_TMPDIR"]}
    temp = tempfile.mkdtemp(prefix="spcrt", dir="/tmp")  # short: Unix socket paths are length-limited
    os.environ.update(RAY_ENV)
    os.environ["RAY_TMPDIR"] = temp  # Ray's own files (ray_current_cluster) there, not in /tmp/ray
    os.mkdir(os.path.join(temp, "ray"))
    import ray
    from ray.cluster_utils import Cluster

    node = {"node_ip_address": "127.0.0.1", "object_store_memory": STORE}
    c = None
    try:
        c = Cluster(initialize_head=True, shutdown_at_exit=True,
                    head_node_args={**node, "num_cpus": 1, "include_dashboard": False,
                                    "temp_dir": os.path.join(temp, "ray")})
        workers = [c.add_node(**node, num_cpus=1) for _ in range(2)]
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False)
        yield c, workers
    finally:
        ray.shutdown()
        if c is not None:
            c.shutdown()  # its own processes only (never `ray stop`: that kills every Ray on the machine)
        shutil.rmtree(temp, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            todo.extend(k for k in kids if k not in found)
            found.update(kids)
    return found


def _listeners(pids: set[int]) -> tuple[int, list[str]]:
    """How many TCP sockets ``pids`` listen on, and those not on loopback."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=False).stdout
    seen, bad = 0, []
    for line in out.splitlines():
        owners = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        local = line.split()[3] if len(line.split()) > 3 else ""
        if owners & pids:
            seen += 1
            if not local.startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:", "[::1]:")):
                bad.append(line)
    return seen, bad


def _arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def test_dataset_listing(tree: Path, tmp_path: Path) -> None:
    root, paths = dataset(str(tree))
    got = [output_name(p, root) for p in paths]
    assert len(got) == 61 and got[0] == "a/img00.png" and "b/bad.png" in got and "b/c/img59.png" in got
    root, paths = dataset(str(tree / "b" / "**" / "*.png"))
    assert root == tree / "b" and sorted(output_name(p, root) for p in paths)[:2] == ["bad.png", "c/img30.png"]
    listing = tmp_path / "list.txt"
    listing.write_text(f"# two\n{tree / 'a' / 'img01.png'}\n\n{os.path.relpath(tree / 'a' / 'img02.png', tmp_path)}\n")
    root, paths = dataset(str(listing))
    assert [p.resolve() for p in paths] == [tree / "a" / "img01.png", tree / "a" / "img02.png"]


def test_ray_run_kill_resume(small_plan: Path, tree: Path, cluster, tmp_path: Path) -> None:
    from spc.tools.ray_run import run_ray

    c, workers = cluster
    good = sorted(p for p in tree.rglob("img*.png"))
    # the single-process run, on one thread as each actor is (Ray gives a 1-CPU actor
    # OMP_NUM_THREADS=1; torch's sums over 2 threads may round a bf16 descriptor differently)
    ref = tmp_path / "ref"
    plain = subprocess.run([sys.executable, "-m", "spc.cli", "run", str(small_plan), *map(str, good), "-o", str(ref),
                            "--json"], capture_output=True, text=True, check=True,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
    plain_rate = json.loads(plain.stdout.strip().splitlines()[-1])["summary"]["frames_per_second"]

    out = tmp_path / "out"
    killed: list[int] = []

    def kill_one(row: dict) -> None:
        """Once a dozen results are in: the worker node whose actor wrote this one, killed (its
        raylet and everything under it, by the cluster's own handle)."""
        if killed or row["status"] != "written" or sum(1 for _ in out.rglob("*.npz")) < 12:
            return
        for node in workers:
            raylet = node.all_processes["raylet"][0].process.pid
            if row["pid"] in _descendants(raylet):
                killed.append(row["pid"])
                c.remove_node(node, allow_graceful=False)
                return

    t0 = time.perf_counter()
    s = run_ray(small_plan, str(tree), out, actors=2, batch_size=4, on_result=kill_one)
    on_ray = time.perf_counter() - t0
    print(f"\nplain spc run (1 thread): {plain_rate:.2f} images/s; on Ray: {s.rate:.2f} images/s "
          f"({len(good) / on_ray:.2f} with start-up)")
    assert killed and s.images == 61 and s.written == 60 and s.skipped == 0
    assert list(s.failed) == [str(tree / "b" / "bad.png")] and "not a readable image" in s.failed[str(tree / "b" / "bad.png")]

    # every image's result exactly once, no half file, equal to the single-process run's
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(tree).as_posix() + ".npz" for p in good)
    sha = file_sha256(small_plan)
    for p in good:
        name = p.relative_to(tree).as_posix() + ".npz"
        got, want = _arrays(out / name), _arrays(ref / name)
        assert str(got.pop(PLAN_KEY)) == sha == str(want.pop(PLAN_KEY)) and got.keys() == want.keys()
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=f"{name}: {k}")

    # nothing of Ray listens beyond loopback
    seen, bad = _listeners(_descendants(os.getpid()))
    assert seen >= 3 and not bad, bad  # GCS, raylets, object managers, workers: all on 127.0.0.1

    # a second run, through the CLI at the cluster's address: all 60 skipped, the bad one reported again
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*.npz")}
    env = {**os.environ, **RAY_ENV}
    done = subprocess.run([sys.executable, "-m", "spc.cli", "run", str(small_plan), str(tree), "-o", str(out),
                           "--json", "--ray", c.address], capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])["summary"]
    assert (summary["images"], summary["skipped"], summary["written"], summary["failed"]) == (61, 60, 0, 1)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.npz")} == stamps


def test_ray_option_refusals(small_plan: Path, tree: Path, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "spc.cli", "run", str(small_plan), str(tree), str(tree),
                           "--ray"], capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "one DATASET" in done.stderr
    done = subprocess.run([sys.executable, "-m", "spc.cli", "run", str(small_plan), str(tree), "--format", "h5",
                           "--ray"], capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "--format h5" in done.stderr
