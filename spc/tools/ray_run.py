"""`spc run PLAN DATASET --ray [ADDRESS]`: a dataset of images run on Ray Data, resumable.

The dataset is a folder tree, a glob or a list file (one image path a line, relative lines from the
list's folder); it is listed lazily into a spool file in the output folder (paths only: memory does
not grow with the dataset), which read tasks take in chunks. Each read task decodes and resizes its
images as `spc run` does (:func:`spc.runtime.frames.image_frame`); the device stage runs in an actor
pool (``map_batches`` with a callable class that opens one :class:`Runner`: one actor per CPU core for
``emu``), and each actor writes every result as it finishes, one ``.npz`` per image named as `spc run`
names them (the image's path relative to the dataset's root, plus ``.npz``), through a temporary file
and a rename (a killed actor leaves no half file; its stale temporary files are removed at the end).

Resuming: every ``.npz`` also holds ``spc_plan_sha256`` (the plan file's sha256), and an image whose
``.npz`` exists with the same plan's hash is skipped (the read task looks, without decoding it). An
image that does not decode (or does not run) is reported with its reason and skipped; the run goes on.

Ray is imported only here, and only when a run starts: ``pip install 'spc[ray]'``.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import math
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from msgspec import Struct, field

from spc import console
from spc.errors import SpcError
from spc.files import atomic_write, file_sha256
from spc.plan.io import read_plan
from spc.plan.program import ImageInput
from spc.records import asdict
from spc.runtime.batches import fill, groups, image_of, image_shape
from spc.runtime.extraction import has_keypoints
from spc.runtime.frames import Frame, Geometry, Source, image_frame
from spc.runtime.inputs import IMAGE_SUFFIXES, image_size, read_picture, walk_tree
from spc.runtime.runner import Runner
from spc.tools.run import _progress, done_for, failure_reason, in_original, keypoints_of, npz_arrays, npz_bytes
from spc.ttnn.targets import DEFAULT_TARGET

CHUNK = 16  # paths per read task
# the CPUs an actor and a read task claim: a core holds one of each, so one actor per core (emu)
# leaves the read tasks room on every node
ACTOR_CPUS, TASK_CPUS = 0.8, 0.2
_RAY_EXTRA = "--ray needs Ray Data: pip install 'spc[ray]'"
_WILDCARDS = "*?["


# --- the dataset, listed lazily -------------------------------------------------------------------

def _is_image(path: str) -> bool:
    return os.path.splitext(path)[1].lower() in IMAGE_SUFFIXES


def _list_file(path: Path) -> Iterator[Path]:
    with open(path, encoding="utf-8") as fd:
        for line in fd:
            line = line.strip()
            if line and not line.startswith("#"):
                p = Path(line)
                yield p if p.is_absolute() else path.parent / p


def dataset(spec: str) -> tuple[Path, Iterator[Path]]:
    """The dataset's root (outputs are named by the images' paths relative to it) and its images,
    listed lazily: a folder (its tree), a glob (``**`` recurses; the root is its fixed leading
    folders) or a list file (one path a line, ``#`` comments; the root is the list's folder)."""
    p = Path(spec)
    if p.is_dir():
        return p, walk_tree(p, IMAGE_SUFFIXES)
    if p.is_file():
        if _is_image(spec):
            raise SpcError(f"{spec}: one image; --ray runs a dataset (a folder, a glob or a list file)")
        return p.parent, _list_file(p)
    if any(c in spec for c in _WILDCARDS):
        parts = p.parts
        fixed = next(i for i, part in enumerate(parts) if any(c in part for c in _WILDCARDS))
        root = Path(*parts[:fixed]) if fixed else Path(".")
        return root, (Path(f) for f in glob.iglob(spec, recursive=True) if _is_image(f) and os.path.isfile(f))
    raise SpcError(f"{spec}: no such folder, list file or matching glob")


def output_name(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` (as `spc run` names outputs); one outside it: its whole path."""
    absolute, base = Path(os.path.abspath(path)), Path(os.path.abspath(root))
    try:
        return absolute.relative_to(base).as_posix()
    except ValueError:
        return absolute.relative_to(absolute.anchor).as_posix()


def spool(paths: Iterator[Path], folder: Path, chunk: int = CHUNK) -> tuple[Path, list[tuple[int, int]], int]:
    """The listing written to a spool file in ``folder`` (every node reads it there, as it writes its
    results there): its path, each chunk's byte range, and the number of images."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f".spc-ray-{uuid.uuid4().hex[:12]}.list"
    ranges: list[tuple[int, int]] = []
    count = start = 0
    with open(path, "wb") as fd:
        for p in paths:
            line = os.fsencode(os.path.abspath(p))
            if b"\n" in line:
                continue  # a name no line holds
            fd.write(line + b"\n")
            count += 1
            if count % chunk == 0:
                ranges.append((start, fd.tell()))
                start = fd.tell()
        if fd.tell() > start:
            ranges.append((start, fd.tell()))
    return path, ranges, count


# --- what the read tasks and the actors do (run on the workers) ----------------------------------

def _written_since(npz: Path, since: float) -> bool:
    """The result was written by this run: a read task Ray re-ran (its output lost with a node)
    found it there. Counted as written, not as done before."""
    try:
        return npz.stat().st_mtime >= since
    except OSError:
        return False


def read_chunk(item: dict, *, root: str, output: str, sha: str, shape: list[int], image: dict, resize: str,
               allow_nonfinite: bool, redo: bool = False, since: float = math.inf) -> Iterator[dict]:
    """One chunk of the spool: each image's row, its pixels decoded and resized to the plan's frame
    as the plan's ``image`` convention says (``x``: float32 bytes), unless its result is there
    already (skipped) or it fails (the reason)."""
    convention = ImageInput(**image)
    with open(item["spool"], "rb") as fd:
        fd.seek(item["start"])
        lines = fd.read(item["stop"] - item["start"]).splitlines()
    for line in lines:
        path = Path(os.fsdecode(line))
        name = output_name(path, Path(root))
        npz = Path(output) / (name + ".npz")
        row = {"path": str(path), "name": name, "output": str(npz), "status": "todo", "reason": "",
               "x": b"", "width": 0, "height": 0}
        if not redo and done_for(npz, sha):
            row["status"] = "written" if _written_since(npz, since) else "skipped"
            yield row
            continue
        try:
            image_size(path)  # the header first: a file that is no image fails before decoding
            picture = read_picture(path, convention.colour, allow_nonfinite)
            x, g = image_frame(picture, shape, resize, path, convention)
            row.update(x=np.ascontiguousarray(x, np.float32).tobytes(), width=g.original[0], height=g.original[1])
        except Exception as exc:  # a bad image is reported, never stops the run
            row.update(status="failed", reason=failure_reason(exc, path))
        yield row


class Device:
    """The device stage: one Runner per actor, opened once; writes each result as it finishes."""

    def __init__(self, plan: str, backend: str, sha: str, resize: str, dense: bool) -> None:
        if file_sha256(Path(plan)) != sha:  # the file changed since the run began: its results would lie
            raise SpcError(f"{plan}: changed since the run started (its sha256 is not {sha[:12]}...)")
        self.plan = read_plan(Path(plan))
        self.backend, self._runner = backend, None
        self.sha, self.resize, self.dense = sha, resize, dense
        self.batch = self.plan.images_per_run
        spec = [int(d) for d in self.plan.program.inputs[0].shape]
        self.shape = image_shape(spec) if self.batch > 1 else spec
        self.frame = self.plan.program.image.frame_size(self.shape)  # (H, W)
        self.roles = self.plan.program.roles
        self.has_keypoints = has_keypoints(self.roles)

    @property
    def runner(self):
        """The device, opened at the first image to run (a resumed run of done images opens none)."""
        if self._runner is None:
            self._runner = Runner(self.plan, self.backend)
        return self._runner

    def __call__(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = len(rows["path"])
        status = [str(s) for s in rows["status"]]
        reason = [str(s) for s in rows["reason"]]
        keypoints = [-1] * n
        todo = []
        for i in range(n):
            if status[i] != "todo":
                continue
            w, h = int(rows["width"][i]), int(rows["height"][i])
            x = np.frombuffer(rows["x"][i], np.float32).reshape(self.shape)
            geometry = Geometry.of((w, h), self.frame[::-1], self.resize)
            todo.append((i, Frame(Source(Path(str(rows["path"][i])), "image", (w, h)), None, x, geometry)))
        for group in groups(todo, self.batch):
            try:
                if self.batch == 1:
                    results = [self.runner.run(group[0][1].x, dense=self.dense)]
                else:
                    both = self.runner.run(fill([f.x for _, f in group], self.batch), dense=self.dense)
                    results = [image_of(both, k, self.batch) for k in range(len(group))]
            except Exception as exc:  # the plan fails on these frames: reported, the run goes on
                for i, frame in group:
                    status[i], reason[i] = "failed", failure_reason(exc, frame.source.path)
                continue
            for (i, frame), result in zip(group, results):
                try:
                    keypoints[i] = self._write(result, frame, Path(str(rows["output"][i])))
                    status[i] = "written"
                except Exception as exc:
                    status[i], reason[i] = "failed", failure_reason(exc, frame.source.path)
        return {"path": rows["path"], "name": rows["name"], "output": rows["output"],
                "status": np.array(status), "reason": np.array(reason), "keypoints": np.array(keypoints, np.int64),
                "pid": np.full(n, os.getpid(), np.int64)}

    def _write(self, result, frame: Frame, npz: Path) -> int:
        """The image's .npz, as `spc run` writes it plus the plan's hash; its keypoint count (-1: none)."""
        assert frame.geometry is not None
        found = keypoints_of(result, self.roles, *self.frame) if self.has_keypoints else None
        kept = in_original(found, frame.geometry) if found is not None else None
        arrays = npz_arrays(result, kept, self.roles, frame.geometry, self.sha)
        atomic_write(npz, npz_bytes(arrays))
        return len(kept[0]) if kept is not None else -1


# --- the driver ---------------------------------------------------------------------------------

class RaySummary(Struct):
    images: int = 0
    written: int = 0
    skipped: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # image -> reason
    seconds: float = 0.0  # the whole pipeline, the actors' start-up included
    steady: float = 0.0  # from the first result to the last
    written_after_first: int = 0
    actors: int = 0

    @property
    def rate(self) -> float:
        return self.written / self.seconds if self.seconds > 0 else 0.0

    @property
    def steady_rate(self) -> float:
        """Images per second once results flow (as `spc run`'s rate, the device's set-up not counted)."""
        return self.written_after_first / self.steady if self.steady > 0 else 0.0


def _loopback(address: str | None) -> bool:
    """No address (a local Ray), or one on this host's loopback (``127.0.0.1:6379``, ``localhost``)."""
    if address is None:
        return True
    host = address.split("://")[-1].rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def _ray(local: bool):
    """Ray, imported on first use; a local Ray keeps every socket on 127.0.0.1 (its defaults do not)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if local:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # Ray's single-host mode: loopback only
    try:
        import ray  # an extra (spc[ray]), ~0.7 s: only --ray, and after the environment above
        import ray.data
    except ModuleNotFoundError:
        raise SpcError(_RAY_EXTRA) from None
    return ray


@contextlib.contextmanager
def connected(address: str | None, object_store_memory: int = 200 << 20):
    """Ray for the run: the one this process is connected to already, the cluster at ``address``, or
    (None) a local one on loopback, started and stopped here."""
    ray = _ray(local=_loopback(address))  # a loopback address: Ray's single-host mode, or it dials the interface
    if ray.is_initialized():
        yield ray
        return
    if address is not None:
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise SpcError(f"--ray {address}: cannot connect ({type(exc).__name__}: "
                           f"{(str(exc).strip().splitlines() or [''])[0][:200]})") from None
    else:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # else ray.init writes ~/.ray/auth_token
        temp = tempfile.mkdtemp(prefix="spcray", dir="/tmp" if os.path.isdir("/tmp") else None)  # sockets: short
        os.environ.setdefault("RAY_TMPDIR", temp)  # Ray's own files there too, not in a shared /tmp/ray
        os.makedirs(os.path.join(os.environ["RAY_TMPDIR"], "ray"), exist_ok=True)
        ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                 object_store_memory=object_store_memory, _temp_dir=os.path.join(temp, "ray"), log_to_driver=False,
                 configure_logging=False)
    try:
        yield ray
    finally:
        ray.shutdown()
        if address is None:
            shutil.rmtree(temp, ignore_errors=True)


def remove_stale_parts(folder: Path) -> int:
    """Temporary files a killed actor left (atomic_write's ``.NAME.npz*.part``) below ``folder``."""
    removed = 0
    for where, _, names in os.walk(folder):
        for name in names:
            if name.startswith(".") and name.endswith(".part") and ".npz" in name:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(where, name))
                    removed += 1
    return removed


def run_ray(plan_path: Path, spec: str, output: Path | None, address: str | None = None, *, backend: str = "emu",
            actors: int | None = None, batch_size: int = 4, resize: str = "stretch", dense: bool = False,
            allow_nonfinite: bool = False, as_json: bool = False, actor_cpus: float = ACTOR_CPUS,
            task_cpus: float = TASK_CPUS, target: str | None = None, redo: bool = False,
            on_result: Callable[[dict], None] | None = None) -> RaySummary:
    """Run the plan on every image of the dataset ``spec`` on Ray (see the module's docstring)."""
    _ray(local=_loopback(address))  # Ray installed, before anything is listed or written
    plan = read_plan(plan_path, target or DEFAULT_TARGET)  # a plan for another target refused, as `spc run`
    spec_shape = [int(d) for d in plan.program.inputs[0].shape]
    batch = plan.images_per_run
    shape = image_shape(spec_shape) if batch > 1 else spec_shape
    if plan.program.image.axes(shape) is None:
        raise SpcError(f"the plan's input is {spec_shape}, which no picture fills: --ray runs image datasets")
    sha = file_sha256(plan_path)
    out = output or Path(".")
    if out.suffix.lower() == ".npz" or (out.exists() and not out.is_dir()):
        raise SpcError(f"{out}: --ray writes one .npz per image: give -o a folder")
    root, paths = dataset(spec)
    listing, ranges, total = spool(paths, out)
    summary = RaySummary(images=total)
    try:
        if not total:
            raise SpcError(f"{spec}: no images ({', '.join(sorted(IMAGE_SUFFIXES))})")
        with connected(address) as ray:
            cpus = float(ray.cluster_resources().get("CPU", 1))
            if actors is None:  # emu: one per core (each leaves room for a read task beside it); a device: one
                actors = max(1, math.floor(cpus)) if backend == "emu" else 1
            summary.actors = actors
            if console.level() < console.VERBOSE:  # Ray Data's own progress lines: -v shows them
                ray.data.DataContext.get_current().enable_progress_bars = False
                logging.getLogger("ray.data").setLevel(logging.WARNING)
            items = [{"spool": str(listing), "start": a, "stop": b} for a, b in ranges]
            ds = (ray.data.from_items(items, override_num_blocks=len(items))
                  .flat_map(read_chunk, num_cpus=task_cpus,
                            fn_kwargs={"root": os.path.abspath(root), "output": os.path.abspath(out), "sha": sha,
                                       "shape": shape, "image": asdict(plan.program.image), "resize": resize,
                                       "allow_nonfinite": allow_nonfinite,
                                       "redo": redo, "since": time.time()})
                  .map_batches(Device, batch_size=max(batch_size, batch), batch_format="numpy", num_cpus=actor_cpus,
                               compute=ray.data.ActorPoolStrategy(size=actors),
                               fn_constructor_kwargs={"plan": str(Path(plan_path).resolve()), "backend": backend,
                                                      "sha": sha, "resize": resize, "dense": dense}))
            start = time.perf_counter()
            first: float | None = None
            with _progress(total) as bar, _stopped(ray, summary):
                task = bar.add_task("running on Ray", total=total)
                for row in ds.iter_rows():
                    row = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()}
                    _tally(summary, row, as_json)
                    if row["status"] == "written":
                        if first is None:
                            first = time.perf_counter()
                        else:
                            summary.written_after_first += 1
                            summary.steady = time.perf_counter() - first
                    bar.advance(task)
                    if on_result is not None:
                        on_result(row)
            summary.seconds = time.perf_counter() - start
    finally:
        with contextlib.suppress(OSError):
            listing.unlink()
    remove_stale_parts(out)
    _report(summary, as_json)
    return summary


@contextlib.contextmanager
def _stopped(ray, summary: RaySummary):
    """A run Ray gives up on (an actor that cannot start, a cluster gone): one error line; the
    results written so far are kept, and a rerun resumes after them."""
    try:
        yield
    except ray.exceptions.RayError as exc:
        line = next((t for t in str(exc).splitlines() if "Error" in t), str(exc).strip()[:200])
        raise SpcError(f"the Ray run stopped after {summary.written} written image(s), which are kept "
                       f"(rerun to resume): {line.strip()[:300]}") from None


def _tally(summary: RaySummary, row: dict, as_json: bool) -> None:
    status = row["status"]
    if status == "written":
        summary.written += 1
    elif status == "skipped":
        summary.skipped += 1
    else:
        summary.failed[row["path"]] = row["reason"]
        if not as_json:
            console.note(f"{row['path']}: skipped: {row['reason']}")
    if as_json:
        print(json.dumps({"input": row["path"], "output": row["output"] if status != "failed" else None,
                          "status": status, "reason": row["reason"] or None,
                          "keypoints": row["keypoints"] if row["keypoints"] >= 0 else None}), flush=True)
    elif status == "written":
        what = f"{row['keypoints']} keypoints" if row["keypoints"] >= 0 else "done"
        console.detail(f"{row['path']}: {what} -> {row['output']}")


def _report(s: RaySummary, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"summary": {"images": s.images, "written": s.written, "skipped": s.skipped,
                                      "failed": len(s.failed), "failures": s.failed, "actors": s.actors,
                                      "seconds": round(s.seconds, 3), "images_per_second": round(s.rate, 3),
                                      "steady_images_per_second": round(s.steady_rate, 3)}}))
        return
    console.info(f"done: {s.images} images: {s.written} written in {s.seconds:.1f} s ({s.rate:.2f} images/s with "
                 f"the start-up, {s.steady_rate:.2f} once running; {s.actors} actor(s)), {s.skipped} skipped "
                 f"(already done), {len(s.failed)} failed")
    for path, reason in list(s.failed.items())[:20]:
        console.info(f"  failed: {path}: {reason}")
    if len(s.failed) > 20:
        console.info(f"  ... and {len(s.failed) - 20} more")


def run_cli(plan: Path, inputs: tuple[Path, ...], output: Path | None, address: str | None, *, fmt: str,
            viz: Path | None, target: str | None, **options) -> RaySummary:
    """`spc run PLAN DATASET --ray [ADDRESS]`: the options --ray does not take refused first."""
    if len(inputs) != 1:
        raise SpcError(f"--ray runs one DATASET (a folder, a glob or a list file), got {len(inputs)} inputs")
    if fmt != "npz":
        raise SpcError("--ray writes one .npz per image: --format h5 is for a single-process run")
    if viz is not None:
        raise SpcError("--ray writes the .npz files only: --viz is for a single-process run")
    return run_ray(plan, str(inputs[0]), output, address, target=target, **options)
