"""The .ttplan file: one zip, no pickle, byte-identical for the same input.

Members, in this order:

* ``manifest.json``: format and spc versions, target, the source ONNX's name and sha256, the
  sha256 of every other member, input/output specs, compile options and notes;
* ``program.json``: the :class:`~spc.plan.program.Program`;
* ``weights.safetensors``: every tensor the program names (f32/i64/bool, as in the source);
* ``ir.txt``: the final IR, for people.

Reading verifies the format version and every hash, so a truncated or edited plan is refused
with one line that says which member is wrong.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spc import __version__
from spc.errors import SpcError
from spc.files import atomic_write
from spc.plan.program import Program

FORMAT = "spc.ttplan"
# 2: device tensors say their form (conv layout or plain), program constants, output roles
# 3: memory configurations live on the calls only (the planner works on the lowered program);
#    ir.txt prints the compiler's decisions as typed fields (<"block" precision>), not attributes
FORMAT_VERSION = 3
_MEMBERS = ("program.json", "weights.safetensors", "ir.txt")
_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass
class Plan:
    manifest: dict[str, Any]
    program: Program
    weights: dict[str, np.ndarray]
    ir_text: str


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True, allow_nan=True) + "\n").encode()


def _weights_bytes(weights: dict[str, np.ndarray]) -> bytes:
    from safetensors.numpy import save

    arrays = {k: np.array(v, order="C", copy=True) for k, v in sorted(weights.items())}  # keeps 0-d
    return save(arrays, metadata={"format": FORMAT})


def write_plan(path: Path, program: Program, weights: dict[str, np.ndarray], ir_text: str,
               manifest: dict[str, Any]) -> None:
    members = {"program.json": _json_bytes(program.to_json()), "weights.safetensors": _weights_bytes(weights),
               "ir.txt": ir_text.encode()}
    full = dict(manifest, format=FORMAT, format_version=FORMAT_VERSION, spc_version=__version__,
                members={k: sha256(v) for k, v in members.items()})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in [("manifest.json", _json_bytes(full)), *members.items()]:
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            # float weights barely compress; deflating them would cost more time than bytes
            info.compress_type = zipfile.ZIP_STORED if name.endswith(".safetensors") else zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    atomic_write(path, buf.getvalue())


def read_plan(path: Path) -> Plan:
    if not path.exists():
        raise SpcError(f"{path}: no such plan file")
    try:
        with zipfile.ZipFile(path) as zf:
            raw = {name: zf.read(name) for name in ("manifest.json", *_MEMBERS)}
    except (zipfile.BadZipFile, KeyError, OSError, EOFError, zipfile.LargeZipFile) as exc:
        raise SpcError(f"{path}: not a readable .ttplan ({type(exc).__name__}: {exc}); recompile it") from None
    except Exception as exc:  # zlib errors on a corrupted member
        raise SpcError(f"{path}: damaged .ttplan ({type(exc).__name__}); recompile it") from None
    try:
        manifest = json.loads(raw["manifest.json"])
    except ValueError:
        raise SpcError(f"{path}: manifest.json is not valid JSON; recompile the plan") from None
    if manifest.get("format") != FORMAT:
        raise SpcError(f"{path}: not an spc plan (format {manifest.get('format')!r})")
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version > FORMAT_VERSION:
        raise SpcError(f"{path}: plan format version {version} is newer than this spc understands "
                       f"({FORMAT_VERSION}); upgrade spc or recompile with this one")
    if version < FORMAT_VERSION:
        raise SpcError(f"{path}: plan format version {version} is older than this spc's ({FORMAT_VERSION}); "
                       "recompile the plan")
    for name in _MEMBERS:
        want = manifest.get("members", {}).get(name)
        if want != sha256(raw[name]):
            raise SpcError(f"{path}: {name} does not match its hash in the manifest (edited or damaged); "
                           "recompile the plan")
    from safetensors.numpy import load

    try:
        program = Program.from_json(json.loads(raw["program.json"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise SpcError(f"{path}: program.json does not describe a program ({exc})") from None
    return Plan(manifest, program, dict(load(raw["weights.safetensors"])), raw["ir.txt"].decode())
