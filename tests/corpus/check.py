"""Build the export corpus at a size and check every export against onnxruntime.

    .venv/bin/python -m tests.corpus.check                       # 120x160, into a fresh temp folder
    .venv/bin/python -m tests.corpus.check --size 480x640 --size 120x160 --folder corpus-out
    .venv/bin/python -m tests.corpus.check --only fixed_k_op20 --twice

For each export: onnxruntime runs it on natural images (scikit-image's camera and astronaut, grey
in [0, 1], resized to the export size, repeated over the input channels) and its outputs must
equal those of the torch module that was exported, on the same input (``ort``: max abs error).
Networks that share the HF weights are also compared with the HF model itself (``hf``): dense
logits/descriptors against HF's detector logits and normalised descriptors, fixed-K keypoints
above HF's threshold against HF's keypoints. SuperPoint-Open (raw weights, BN unfolded) is
compared with HF away from the border, where the HF conversion's BN folding is not exact.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tests.corpus.exports import BORDER, CORPUS, SECONDS_KEY, Export, build, export_proto, is_current, metadata

ORT_TOL = 1e-3  # float outputs, absolute: logits are O(10), descriptors O(0.1)
HF_TOL = 1e-3
# cells at the border of the 1/8 map where SuperPoint-Open and its HF conversion differ: each folded BN
# is inexact within a pixel of the border, and the 8 convs after the first spread that over 5 cells (40 px)
OPEN_RING = 5
HF_THRESHOLD = 0.005  # SuperPointConfig().keypoint_threshold
IMAGES = ("camera", "astronaut")


def natural_image(height: int, width: int, channels: int, name: str = "camera") -> np.ndarray:
    """(1, channels, height, width) float32: a scikit-image picture, grey in [0, 1], resized."""
    from skimage import color, data, transform

    img = getattr(data, name)()
    if img.ndim == 3:
        img = color.rgb2gray(img[..., :3])
    elif img.dtype == np.uint8:
        img = img / 255.0
    grey = transform.resize(img.astype(np.float64), (height, width), anti_aliasing=True)
    grey = np.clip(grey, 0.0, 1.0).astype(np.float32)
    return np.ascontiguousarray(np.repeat(grey[None, None], channels, axis=1))


def run_ort(path: Path, x: np.ndarray) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})


def _flat(out) -> list[np.ndarray]:
    if hasattr(out, "to_tuple"):  # a transformers ModelOutput, flattened as the exporter does
        out = out.to_tuple()
    if not isinstance(out, (tuple, list)):
        out = (out,)
    return [o.detach().cpu().numpy() for o in out]


def run_torch(e: Export, x: np.ndarray) -> list[np.ndarray]:
    """The exported module (with the export-time patch) on the same input."""
    import torch

    module = e.module(x.shape[2], x.shape[3])
    with torch.no_grad(), e.patch():
        return _flat(module(torch.from_numpy(x.copy())))


def hf_model(max_keypoints: int = -1):
    from spc.frontend.weights import build_model

    return build_model(None, None, max_keypoints)


def hf_dense(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """HF's own dense maps on channel 0 of ``x``: detector logits and L2-normalised descriptors."""
    import torch

    model = hf_model()
    with torch.no_grad():
        grey = torch.from_numpy(x[:, :1].copy())
        enc = model.encoder(grey, return_dict=True).last_hidden_state
        kd, dd = model.keypoint_decoder, model.descriptor_decoder
        logits = kd.conv_score_b(kd.relu(kd.conv_score_a(enc)))
        desc = dd.conv_descriptor_b(dd.relu(dd.conv_descriptor_a(enc)))
        desc = torch.nn.functional.normalize(desc, p=2, dim=1)
    return logits.numpy(), desc.numpy()


def hf_keypoints(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """HF's keypoints as (x, y) pixels, scores, descriptors (N, 256): all of them, then the
    border applied on all four sides, then the k best.

    HF's own border removal (transformers 5.23) passes ``height * 8, width * 8`` of the
    full-resolution map, so it only removes the top and left borders; the fixed-K exports remove
    all four, as SuperPoint/LightGlue do."""
    import torch

    h, w = x.shape[2:]
    with torch.no_grad():
        out = hf_model(-1)(torch.from_numpy(x.copy()))
    n = int(out.mask[0].sum())
    xy = np.rint(out.keypoints[0, :n].numpy().astype(np.float64) * np.array([w, h]))
    scores, desc = out.scores[0, :n].numpy(), out.descriptors[0, :n].numpy()
    inside = ((xy[:, 0] >= BORDER) & (xy[:, 0] < w - BORDER) & (xy[:, 1] >= BORDER) & (xy[:, 1] < h - BORDER))
    xy, scores, desc = xy[inside], scores[inside], desc[inside]
    best = np.argsort(-scores, kind="stable")[:k]
    return xy[best], scores[best], desc[best]


def _max_err(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    """Max abs difference over matching outputs; inf when shapes or dtypes disagree."""
    if len(a) != len(b):
        return float("inf")
    worst = 0.0
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return float("inf")
        if x.size:
            worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))))
    return worst


def _by_position(xy: np.ndarray, *rows: np.ndarray) -> list[np.ndarray]:
    order = np.lexsort((np.rint(xy[:, 0]), np.rint(xy[:, 1])))
    return [xy[order]] + [r[order] for r in rows]


def _fixed_k_err(e: Export, ort_out: list[np.ndarray], torch_out: list[np.ndarray], h: int, w: int) -> float:
    """K rows in score order. Rows with a positive score (local maxima inside the border) must be
    identical; the rest are ties (0 = suppressed, -1 = border) that TopK may order either way, so
    only their scores and unit norms are compared."""
    if [o.shape for o in ort_out] != [o.shape for o in torch_out]:
        return float("inf")
    assert e.decode is not None
    oxy, osc, ode = e.decode(ort_out, h, w)
    txy, tsc, tde = e.decode(torch_out, h, w)
    live = tsc > 0
    if not np.array_equal(live, osc > 0):
        return float("inf")
    err = _max_err([oxy[live], osc, ode[live]], [txy[live], tsc, tde[live]])
    norms = np.linalg.norm(ode[~live].astype(np.float64), axis=1)
    return max(err, float(np.max(np.abs(norms - 1.0), initial=0.0)))


def _hf_err(e: Export, x: np.ndarray, ort_out: list[np.ndarray], torch_out: list[np.ndarray]) -> tuple[float, str]:
    """Agreement with the HF model's own outputs, and what was compared."""
    h, w = x.shape[2:]
    if e.kind == "hf":
        import torch

        with torch.no_grad():
            ref = _flat(hf_model(e.max_keypoints)(torch.from_numpy(x.copy())))
        return _max_err(torch_out, ref), f"torch module vs unpatched HF, N={ref[1].shape[1]}"
    if e.kind == "dense":
        logits, desc = hf_dense(x)
        if e.name.startswith("superpoint_open"):
            r = OPEN_RING
            inner = (slice(None), slice(None), slice(r, -r), slice(r, -r))
            full = _max_err(ort_out, [logits, desc])
            err = _max_err([o[inner] for o in ort_out], [logits[inner], desc[inner]])
            return err, f"dense maps vs HF, {r} border cells excluded (whole map: {full:.2g})"
        return _max_err(ort_out, [logits, desc]), "logits and descriptors vs HF"
    assert e.decode is not None and e.k is not None
    oxy, osc, ode = e.decode(ort_out, h, w)
    keep = osc > HF_THRESHOLD
    mine = _by_position(oxy[keep], osc[keep], ode[keep])
    ref = _by_position(*hf_keypoints(x, e.k))
    if len(mine[0]) != len(ref[0]):
        return float("inf"), f"{len(mine[0])} keypoints above threshold, HF has {len(ref[0])}"
    return _max_err(mine, ref), f"{len(ref[0])} keypoints above threshold vs HF's best {e.k} inside the border"


@dataclass
class Result:
    name: str
    path: Path
    size: tuple[int, int]
    build_seconds: float
    reused: bool
    inputs: list[str]
    outputs: list[str]
    nodes: int
    op_types: dict[str, int]
    ort_err: float = float("nan")
    hf_err: float = float("nan")
    hf_what: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.ort_err <= ORT_TOL and self.hf_err <= HF_TOL

    def line(self) -> str:
        e = CORPUS[self.name]
        ops = " ".join(f"{k}x{v}" if v > 1 else k for k, v in sorted(self.op_types.items()))
        built = f"{self.build_seconds:.1f}s" + (" (reused)" if self.reused else "")
        return (f"{'ok  ' if self.ok else 'FAIL'} {self.name:30s} opset {e.opset:2d} {e.exporter:6s} "
                f"in {' '.join(self.inputs)} out {' '.join(self.outputs)} | {self.nodes} nodes | "
                f"ort-vs-torch {self.ort_err:.2g} | hf {self.hf_err:.2g} ({self.hf_what}) | build {built}"
                + "".join(f" | {n}" for n in self.notes) + f"\n     ops: {ops}")


def _shape(value_info) -> str:
    dims = value_info.type.tensor_type.shape.dim
    return "x".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)


def describe(path: Path) -> tuple[list[str], list[str], int, dict[str, int]]:
    import onnx

    proto = onnx.load(str(path))
    inputs = [f"{i.name}[{_shape(i)}]" for i in proto.graph.input]
    outputs = [f"{o.name}[{_shape(o)}]" for o in proto.graph.output]
    ops = collections.Counter(n.op_type for n in proto.graph.node)
    return inputs, outputs, len(proto.graph.node), dict(ops)


def check_export(name: str, path: Path, height: int, width: int, images: tuple[str, ...] = IMAGES) -> Result:
    """Run one built export through onnxruntime and compare (see the module docstring)."""
    e = CORPUS[name]
    meta = metadata(path)
    inputs, outputs, nodes, ops = describe(path)
    res = Result(name, path, (height, width), float(meta.get(SECONDS_KEY, "nan")), False, inputs, outputs, nodes,
                 ops)
    sizes = [(height, width)]
    if e.dynamic_axes:  # symbolic height/width: also run at a size it was not traced at
        sizes.append((height + 16, width + 32))
        res.notes.append(f"also run at {height + 16}x{width + 32}")
    ort_err = hf_err = 0.0
    for h, w in sizes:
        for image in images:
            x = natural_image(h, w, e.channels, image)
            ort_out = run_ort(path, x)
            torch_out = run_torch(e, x)
            if e.kind == "fixed_k":
                ort_err = max(ort_err, _fixed_k_err(e, ort_out, torch_out, h, w))
            else:
                ort_err = max(ort_err, _max_err(ort_out, torch_out))
            err, what = _hf_err(e, x, ort_out, torch_out)
            res.hf_what = res.hf_what or f"{image}: {what}"
            hf_err = max(hf_err, err)
            if e.kind == "fixed_k" and (h, w) == sizes[0] and image == images[0]:
                ties = int(np.sum(e.decode(torch_out, h, w)[1] <= 0))
                if ties:
                    res.notes.append(f"{ties} of {e.k} rows are score ties (0 or -1), compared by score only")
    res.ort_err, res.hf_err = ort_err, hf_err
    return res


def equivalent(a: Path, b: Path) -> str | None:
    """None when two builds are the same model (nodes, attributes, initializer values, I/O);
    else the first difference. Node names and metadata are ignored."""
    import onnx
    from onnx import numpy_helper

    pa, pb = onnx.load(str(a)), onnx.load(str(b))
    ga, gb = pa.graph, pb.graph
    if [(o.domain, o.version) for o in pa.opset_import] != [(o.domain, o.version) for o in pb.opset_import]:
        return "opset imports differ"
    for kind in ("input", "output"):
        if [v.SerializeToString() for v in getattr(ga, kind)] != [v.SerializeToString() for v in getattr(gb, kind)]:
            return f"graph {kind}s differ"
    if len(ga.node) != len(gb.node):
        return f"{len(ga.node)} vs {len(gb.node)} nodes"
    for i, (na, nb) in enumerate(zip(ga.node, gb.node)):
        sig_a = (na.op_type, na.domain, list(na.input), list(na.output), [t.SerializeToString() for t in na.attribute])
        sig_b = (nb.op_type, nb.domain, list(nb.input), list(nb.output), [t.SerializeToString() for t in nb.attribute])
        if sig_a != sig_b:
            return f"node {i} differs ({na.op_type} {na.name} vs {nb.op_type} {nb.name})"
    ia = {t.name: numpy_helper.to_array(t) for t in ga.initializer}
    ib = {t.name: numpy_helper.to_array(t) for t in gb.initializer}
    if ia.keys() != ib.keys():
        return "initializer names differ"
    for k, v in ia.items():
        if v.dtype != ib[k].dtype or not np.array_equal(v, ib[k]):
            return f"initializer {k} differs"
    return None


def unpatched_legacy_verdict(height: int = 64, width: int = 64) -> str:
    """Export the HF model with the legacy exporter *without* the rank-4 NMS patch and say
    whether onnxruntime loads it (with torch 2.13 it does not: a rank-3 MaxPool)."""
    import io
    import logging
    import warnings

    import onnxruntime as ort
    import torch

    from spc.frontend.export import _tuple_outputs

    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    model = _tuple_outputs(hf_model())
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.rand(1, 1, height, width),), buf, dynamo=False, opset_version=17)
    try:
        ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
        return f"unpatched HF legacy export rejected by onnxruntime: {str(exc).splitlines()[0]}"
    return "unpatched HF legacy export loads in onnxruntime: the rank-4 NMS patch may no longer be needed"


def _parse_size(text: str) -> tuple[int, int]:
    h, _, w = text.lower().partition("x")
    return int(h), int(w)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.corpus.check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", action="append", type=_parse_size, help="HxW (repeatable; default 120x160)")
    ap.add_argument("--folder", type=Path, help="where to build (reused when built by this code); "
                                                "default: a fresh temporary folder")
    ap.add_argument("--only", action="append", choices=sorted(CORPUS), help="check only these exports")
    ap.add_argument("--twice", action="store_true", help="also export each a second time and compare the models")
    ap.add_argument("--unpatched", action="store_true",
                    help="also check that the unpatched HF legacy export is still rejected (why hf_legacy is patched)")
    args = ap.parse_args(argv)
    if args.unpatched:
        print(unpatched_legacy_verdict(), flush=True)
    sizes = args.size or [(120, 160)]
    names = args.only or list(CORPUS)
    failed = 0
    with contextlib.ExitStack() as stack:
        folder = args.folder or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="spc-corpus-")))
        for h, w in sizes:
            print(f"== {h}x{w} in {folder}", flush=True)
            total = 0.0
            for name in names:
                reused = is_current(name, folder, h, w)
                t0 = time.perf_counter()
                path = build(name, folder, h, w)
                seconds = time.perf_counter() - t0
                res = check_export(name, path, h, w)
                res.reused = reused
                if not reused:
                    res.build_seconds = seconds
                total += res.build_seconds
                if args.twice:
                    again = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="spc-corpus-again-")))
                    other = again / path.name
                    from spc.files import atomic_write

                    atomic_write(other, export_proto(CORPUS[name], h, w).SerializeToString())
                    diff = equivalent(path, other)
                    res.notes.append("rebuild: same model" if diff is None else f"rebuild DIFFERS: {diff}")
                    failed += diff is not None
                failed += not res.ok
                print(res.line(), flush=True)
            print(f"== {len(names)} exports, {total:.1f}s building", flush=True)
    if failed:
        print(f"{failed} check(s) failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
