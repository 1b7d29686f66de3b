"""The .ttplan file: one zip, no pickle, byte-identical for the same input.

Members, in the order they are written:

* ``weights.safetensors``: every tensor the program names (f32/i64/bool, as in the source);
* ``program.json``: the :class:`~spc.plan.program.Program`;
* ``ir.txt``: the final IR, for people;
* ``manifest.json``: format and spc versions, target, the source ONNX's name and sha256, the
  sha256 of every other member, input/output specs, compile options and notes.

A plan is untrusted input. Reading bounds every member before inflating it, checks the format
version, every hash (the manifest's own ``digest`` included), the schema (plan/schema.py) and
the consistency of the program with its weights (plan/verify.py) before returning it; anything
else is refused with one line that says what is wrong.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import queue
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from msgspec import Struct
from safetensors import SafetensorError
from safetensors.numpy import load, save

from spc.errors import SpcError
from spc.files import AtomicFile, os_error
from spc.plan.program import Program
from spc.ttnn.targets import DEFAULT_TARGET, TARGETS
from spc.version import __version__

FORMAT = "spc.ttplan"
# 2: device tensors say their form (conv layout or plain), program constants, output roles
# 3: memory configurations live on the calls only (the planner works on the lowered program);
#    ir.txt prints the compiler's decisions as typed fields (<"block" precision>), not attributes
# 4: the manifest carries its own digest; plans are validated (plan/schema.py, plan/verify.py)
# 5: the program says which device tensor holds which IR value (``values``: spc check --per-layer);
#    batch plans (one spc.Keypoints per image, read by the stacking after it)
FORMAT_VERSION = 5
_MEMBERS = ("program.json", "weights.safetensors", "ir.txt")
# what a plan may hold: caps on the file and on each member as inflated (a zip bomb is refused from
# its headers, before anything is inflated). The 1080x1920 plans are 8 MB, their program 0.3 MB.
MAX_PLAN_BYTES = 1 << 30
MAX_MEMBER_BYTES = {"manifest.json": 4 << 20, "program.json": 64 << 20, "ir.txt": 64 << 20,
                    "weights.safetensors": 1 << 30}
MAX_HEADER_BYTES = 16 << 20
MAX_WEIGHT_VALUES = 1 << 28
_WEIGHT_BYTES = {"F32": 4, "F64": 8, "F16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "U16": 2, "U32": 4,
                 "U64": 8, "BOOL": 1}
_EPOCH = (1980, 1, 1, 0, 0, 0)


class Plan(Struct):
    """A .ttplan as read and checked: manifest, program, weights, IR text."""

    manifest: dict[str, Any]
    program: Program
    weights: dict[str, np.ndarray]
    ir_text: str

    @property
    def chips(self) -> int:
        """How many chips the plan's target has (each runs the program on its own input)."""
        target = TARGETS.get(str(self.manifest.get("target") or DEFAULT_TARGET))
        return target.chips if target is not None else 1  # the backend refuses a target it does not know

    @property
    def images_per_run(self) -> int:
        """The images one run takes: the program's B (:func:`images_per_chip`) on each chip."""
        return images_per_chip(self.program) * self.chips


def images_per_chip(program: Program) -> int:
    """B of a program whose input is ``[B, C, H, W]``; 1 for any other input."""
    shape = program.inputs[0].shape
    return int(shape[0]) if len(shape) == 4 and isinstance(shape[0], int) else 1


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _json_bytes(obj: Any, compact: bool = False) -> bytes:
    """Canonical JSON: sorted keys; indented for people (the manifest), or ``compact`` for
    program.json (json's C encoder: indenting takes its pure-Python one, ~10 ms of a compile at
    480x640; `spc inspect` and the dumps are the program for people)."""
    if compact:
        return (json.dumps(obj, sort_keys=True, allow_nan=True, separators=(",", ":")) + "\n").encode()
    return (json.dumps(obj, indent=1, sort_keys=True, allow_nan=True) + "\n").encode()


def manifest_digest(manifest: dict[str, Any]) -> str:
    """The manifest's own sha256: over its canonical JSON without the ``digest`` field."""
    return sha256(_json_bytes({k: v for k, v in manifest.items() if k != "digest"}))


def program_member(program_json: dict[str, Any]) -> bytes:
    """``program.json``'s bytes from ``program.to_json()``."""
    return _json_bytes(program_json, compact=True)


def weights_member(weights: dict[str, np.ndarray]) -> bytes:
    """``weights.safetensors``' bytes."""
    # no copy of what is C-ordered already (np.ascontiguousarray would make a 0-d array 1-d)
    arrays = {k: v if v.flags.c_contiguous else np.array(v, order="C") for k, v in sorted(weights.items())}
    return save(arrays, metadata={"format": FORMAT})


def plan_members(path: Path, program: Program, weights: dict[str, np.ndarray], ir_text: str,
                 program_json: dict[str, Any] | None = None) -> dict[str, bytes]:
    """The members the manifest describes, serialised. ``program_json``: ``program.to_json()``
    when the caller has made it already (to check it)."""
    js = program.to_json() if program_json is None else program_json
    return {"weights.safetensors": weights_member(weights), "program.json": program_member(js),
            "ir.txt": ir_text.encode()}


def write_plan(path: Path, program: Program, weights: dict[str, np.ndarray], ir_text: str,
               manifest: dict[str, Any], program_json: dict[str, Any] | None = None) -> None:
    write_members(path, plan_members(path, program, weights, ir_text, program_json), manifest)


def write_members(path: Path, members: dict[str, bytes], manifest: dict[str, Any]) -> None:
    """The plan file: ``members`` and ``manifest`` (completed with the format, the members'
    hashes and its own digest), written atomically."""
    writer = PlanWriter(path, background=False)
    try:
        for name, data in members.items():
            writer.add(name, data)
    except BaseException:
        writer.discard()
        raise
    writer.finish(manifest)


def _capped(path: Path, name: str, data: bytes) -> bytes:
    if len(data) > MAX_MEMBER_BYTES[name]:
        raise SpcError(f"{path}: the plan's {name} would be {len(data)} bytes, more than a plan may hold "
                       f"({MAX_MEMBER_BYTES[name]})")
    return data


class PlanWriter:
    """A plan file under way: members go into a temporary file beside ``path`` as they are given
    (:meth:`add`; with ``background``, by a thread while the caller works on: the compile gives
    the weights as soon as the program is lowered, and serialising, hashing, writing and syncing
    them to the disk hold no lock the memory planner or the validation need), then the manifest,
    which names their hashes, and the zip's directory (:meth:`finish`); the file is renamed over
    ``path``, or removed (:meth:`discard`). A member given as bytes is held to its cap by
    :meth:`add`; what fails in the thread (a full disk, a made member past its cap) is raised by
    :meth:`finish`. A caller that forks waits for :meth:`finish` or
    :meth:`discard` first (a fork beside a thread is not safe)."""

    # the member that is most of the file: synced as soon as it is written, so that the commit's
    # fsync waits only for the members after it (10-30 ms of a 480x640 compile, measured)
    BULK = "weights.safetensors"

    def __init__(self, path: Path, background: bool = True) -> None:
        self.path, self.digests = path, {}
        self.error: BaseException | None = None
        self.cancelled = False  # discarded: what is queued is not written
        self.out = AtomicFile(path)
        self.thread: threading.Thread | None = None
        self.zip: zipfile.ZipFile | None = None
        self.queue: queue.SimpleQueue | None = None
        try:
            self.zip = zipfile.ZipFile(self.out.file, "w", zipfile.ZIP_DEFLATED)
            if background:
                self.queue = queue.SimpleQueue()
                self.thread = threading.Thread(target=self._drain, args=(self.queue,), daemon=True)
                self.thread.start()
        except BaseException:
            self.thread = self.queue = None  # it never started
            self.discard()
            raise

    def add(self, name: str, data: bytes | Callable[[], bytes]) -> None:
        """Member ``name``: its bytes, or what makes them (called in the writer's thread)."""
        if isinstance(data, bytes):
            _capped(self.path, name, data)  # the caller's error now, not the thread's later
        if self.queue is not None:
            self.queue.put((name, data))
        else:
            self._write(name, data)

    def _drain(self, jobs: queue.SimpleQueue) -> None:
        while (job := jobs.get()) is not None:
            # after a failure or a discard the file goes: nothing more to write
            if self.error is None and not self.cancelled:
                try:
                    self._write(*job)
                except BaseException as exc:  # raised by finish, in the caller's thread
                    self.error = exc

    def _write(self, name: str, data: bytes | Callable[[], bytes]) -> None:
        if not isinstance(data, bytes):  # (bytes were held to their cap by add)
            data = _capped(self.path, name, data())
        self.digests[name] = sha256(data)
        _add(self.zip, name, data)
        if name == self.BULK and not self.cancelled:
            self.out.settle()

    def _join(self) -> None:
        if self.thread is not None:
            self.queue.put(None)
            self.thread.join()
            self.thread = None

    def finish(self, manifest: dict[str, Any]) -> None:
        try:
            self._join()
            if self.error is not None:
                raise self.error
            full = dict(manifest, format=FORMAT, format_version=FORMAT_VERSION, spc_version=__version__,
                        members=self.digests)
            full["digest"] = manifest_digest(full)
            _add(self.zip, "manifest.json", _json_bytes(full))
            self.zip.close()
        except OSError as exc:
            self.discard()
            raise os_error(self.path, exc) from None
        except BaseException:
            self.discard()
            raise
        self.out.commit()

    def discard(self) -> None:
        self.cancelled = True  # a refusal or an interrupt does not wait for the weights' write
        try:
            self._join()
        finally:
            if self.zip is not None:
                with contextlib.suppress(Exception):  # its directory goes into the file removed next
                    self.zip.close()
            self.out.discard()


def _add(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=_EPOCH)
    # float weights barely compress; deflating them would cost more time than bytes
    info.compress_type = zipfile.ZIP_STORED if name.endswith(".safetensors") else zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    zf.writestr(info, data)


def _members(path: Path) -> dict[str, bytes]:
    """The four members, each read with its size bounded before it is inflated."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise SpcError(f"{path}: cannot read the plan ({exc.strerror})") from None
    if not path.is_file():
        raise SpcError(f"{path}: not a plan file (a folder or a device)")
    if size > MAX_PLAN_BYTES:
        raise SpcError(f"{path}: {size} bytes is more than a plan may be ({MAX_PLAN_BYTES})")
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            names = [i.filename for i in infos]
            if sorted(names) != sorted(("manifest.json", *_MEMBERS)):
                raise SpcError(f"{path}: a plan holds manifest.json, {', '.join(_MEMBERS)} once each; this one "
                               f"holds {', '.join(repr(n[:40]) for n in names[:6])}{' ...' if len(names) > 6 else ''}; "
                               "recompile it")
            raw = {}
            for info in infos:
                cap = MAX_MEMBER_BYTES[info.filename]
                # the declared size first (a zip bomb declares what it inflates to), then the
                # real one: reading stops one byte past the cap whatever the header says
                if info.file_size > cap:
                    raise SpcError(f"{path}: {info.filename} inflates to {info.file_size} bytes, more than a plan "
                                   f"may hold ({cap}); recompile it")
                with zf.open(info) as f:
                    data = f.read(cap + 1)
                if len(data) > cap:
                    raise SpcError(f"{path}: {info.filename} inflates past {cap} bytes; recompile it")
                raw[info.filename] = data
            return raw
    except SpcError:
        raise
    except (zipfile.BadZipFile, KeyError, OSError, EOFError, zipfile.LargeZipFile, NotImplementedError) as exc:
        raise SpcError(f"{path}: not a readable .ttplan ({type(exc).__name__}: {str(exc)[:100]}); recompile it") \
            from None
    except Exception as exc:  # zlib errors on a corrupted member
        raise SpcError(f"{path}: damaged .ttplan ({type(exc).__name__}); recompile it") from None


def _json(data: bytes, path: Path, name: str) -> Any:
    try:
        text = data.decode("utf-8")
        value = json.loads(text)
    except UnicodeDecodeError:
        raise SpcError(f"{path}: {name} is not UTF-8 text; recompile the plan") from None
    except RecursionError:
        raise SpcError(f"{path}: {name} is nested too deeply to be a plan's; recompile the plan") from None
    except ValueError:
        raise SpcError(f"{path}: {name} is not valid JSON; recompile the plan") from None
    # a \ud800-\udfff escape: a pair is one character, a lone one decodes to a surrogate, which is not
    # text (printing or encoding it fails later, far from here)
    if "\\ud" in text or "\\uD" in text:
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise SpcError(f"{path}: {name} holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text; "
                           "recompile the plan") from None
    return value


def _weights(data: bytes, path: Path) -> dict[str, np.ndarray]:
    """The safetensors member, its header checked before any tensor is made."""
    where = f"{path}: weights.safetensors"
    if len(data) < 8:
        raise SpcError(f"{where} is truncated; recompile the plan")
    n = int.from_bytes(data[:8], "little")
    if n > min(len(data) - 8, MAX_HEADER_BYTES):
        raise SpcError(f"{where}: its header claims {n} bytes of {len(data) - 8}; recompile the plan")
    header = _json(data[8:8 + n], path, "weights.safetensors' header")
    if not isinstance(header, dict):
        raise SpcError(f"{where}: its header is not a mapping; recompile the plan")
    body = len(data) - 8 - n
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not (isinstance(entry, dict) and set(entry) == {"dtype", "shape", "data_offsets"}
                and isinstance(entry["dtype"], str) and entry["dtype"] in _WEIGHT_BYTES
                and isinstance(entry["shape"], list)
                and len(entry["shape"]) <= 8 and all(type(d) is int and 0 <= d <= MAX_WEIGHT_VALUES
                                                     for d in entry["shape"])
                and isinstance(entry["data_offsets"], list) and len(entry["data_offsets"]) == 2
                and all(type(o) is int for o in entry["data_offsets"])):
            raise SpcError(f"{where}: tensor {name[:60]!r} is not described as a tensor (dtype {list(_WEIGHT_BYTES)}, "
                           "shape, data_offsets); recompile the plan")
        start, end = entry["data_offsets"]
        want = math.prod(entry["shape"]) * _WEIGHT_BYTES[entry["dtype"]]
        if not 0 <= start <= end <= body or end - start != want:
            raise SpcError(f"{where}: tensor {name[:60]!r} claims bytes {start}..{end} of {body} for "
                           f"{entry['shape']} {entry['dtype']}; recompile the plan")
        spans.append((start, end))
    spans.sort()
    if any(a[1] > b[0] for a, b in itertools.pairwise(spans)):
        raise SpcError(f"{where}: tensors overlap; recompile the plan")

    try:
        return dict(load(data))
    except (SafetensorError, ValueError, TypeError) as exc:
        raise SpcError(f"{where} does not load ({str(exc)[:100]}); recompile the plan") from None


def read_plan(path: Path, target: str | None = None) -> Plan:
    """The plan at ``path``, checked before anything uses it: bounded members, the format
    version, every hash (the manifest's own included), the schema (plan/schema.py) and the
    program's consistency (plan/verify.py)."""
    # the checks (~20 ms): only reading a plan needs them, not `spc inspect MODEL.onnx` (tools/inspect.py)
    from spc.plan.schema import validate_manifest, validate_program
    from spc.plan.verify import verify_plan

    if not path.exists():
        raise SpcError(f"{path}: no such plan file")
    raw = _members(path)
    manifest = _json(raw["manifest.json"], path, "manifest.json")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise SpcError(f"{path}: not an spc plan (format {str(got)[:40]!r})")
    version = manifest.get("format_version")
    if type(version) is not int or version < 1:
        raise SpcError(f"{path}: plan format version {str(version)[:20]!r} is not a version; recompile the plan")
    if version > FORMAT_VERSION:
        raise SpcError(f"{path}: plan format version {version} is newer than this spc understands "
                       f"({FORMAT_VERSION}); upgrade spc or recompile with this one")
    if version < FORMAT_VERSION:
        raise SpcError(f"{path}: plan format version {version} is older than this spc's ({FORMAT_VERSION}); "
                       "recompile the plan")
    if manifest.get("digest") != manifest_digest(manifest):
        raise SpcError(f"{path}: manifest.json does not match its digest (edited or damaged); recompile the plan")
    checked = validate_manifest(manifest, str(path))
    for name in _MEMBERS:
        if checked.members[name] != sha256(raw[name]):
            raise SpcError(f"{path}: {name} does not match its hash in the manifest (edited or damaged); "
                           "recompile the plan")
    if target is not None and checked.target != target:
        raise SpcError(f"{path}: the plan is for {checked.target}, and this run is for {target}; pass --target "
                       f"{checked.target} if you mean to run it for {checked.target}, or recompile it with --target "
                       f"{target}")
    d = _json(raw["program.json"], path, "program.json")
    validate_program(d, str(path))
    try:
        program = Program.from_json(d)
    except (ValueError, KeyError, TypeError, ArithmeticError) as exc:  # a typed argument refuses its JSON
        raise SpcError(f"{path}: program.json does not describe a program ({str(exc)[:200]}); recompile the plan") \
            from None
    weights = _weights(raw["weights.safetensors"], path)
    try:
        ir_text = raw["ir.txt"].decode("utf-8")
    except UnicodeDecodeError:
        raise SpcError(f"{path}: ir.txt is not UTF-8 text; recompile the plan") from None
    try:
        verify_plan(program, weights)
    except SpcError as exc:
        raise SpcError(f"{path}: {exc}; recompile the plan") from None
    return Plan(manifest, program, weights, ir_text)
