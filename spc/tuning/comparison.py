"""`spc check`: run onnxruntime on the source ONNX and our plan on the same inputs, compare.

What is compared comes from the plan's output roles (lowering/roles.py), never from names:

* keypoints (a recognised extraction): both sides' outputs are read in their layout as pixels,
  scores and descriptors (ir/ops/keypoints.py: canonical), then matched: precision, recall, F1
  (top 500 by score, 2 px, one-to-one) and the descriptors' cosine;
* the dense maps: onnxruntime is asked for the tensors the fused ops kept the names of (the
  pre-NMS score map, the normalised descriptor map) and for dense outputs with a role; their PCC;
* raw detector logits (a model without post-processing in the graph): both sides' logits go
  through SuperPoint's standard extraction (softmax, fold, NMS radius 4, threshold 0.005, border
  4: runtime/extraction.py), so keypoints are compared too, and the score maps by PCC;
* every other output: its PCC and largest difference.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from msgspec import Struct, field

from spc.errors import SpcError
from spc.frontend.onnx_import import load_onnx
from spc.plan.io import Plan
from spc.records import asdict
from spc.runtime.backend import PreparedProgram
from spc.runtime.batches import fill, groups, image_of
from spc.runtime.extraction import frame_keypoints, score_map_from_logits
from spc.runtime.runner import Runner, RunResult
from spc.tuning.metrics import index_set_f1, keypoint_agreement, pair_set_f1, pcc

NAN = float("nan")
# onnxruntime's input type names -> numpy
_ORT_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
              "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16,
              "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}


class ImageReport(Struct):
    input: str
    score_pcc: float
    descriptor_pcc: float
    precision: float
    recall: float
    f1: float
    descriptor_cosine: float
    keypoints: int
    ref_keypoints: int
    # outputs without a keypoint or map role: name -> [PCC, largest absolute difference], or for
    # integer outputs (in ``exact``) [share of equal elements, count of differing ones, F1 of their
    # entries >= 0 as (position, value) pairs: a matcher's match set]
    outputs: dict[str, list[float]] = field(default_factory=dict)
    keypoints_from: str = ""  # "outputs" | runtime/extraction.py's STANDARD | "" (none)
    exact: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)

    def worst_pcc(self) -> float:
        values = [v for v in (self.score_pcc, self.descriptor_pcc, *(o[0] for o in self.outputs.values()))
                  if not math.isnan(v)]
        return min(values) if values else NAN

    def worst_f1(self) -> float:
        """The keypoint F1, or where the model has no keypoints the lowest match-set F1 of its
        integer outputs (NaN: neither)."""
        if not math.isnan(self.f1):
            return self.f1
        values = [self.outputs[name][2] for name in self.exact if len(self.outputs.get(name, [])) > 2]
        return min(values) if values else NAN


def find_source(plan: Plan, plan_path: Path, onnx: Path | None) -> Path:
    """The ONNX the plan was compiled from: ``onnx`` if given, else beside the plan, in the current
    folder, or where it was compiled from (the manifest's absolute path), whichever holds a file
    with the manifest's sha256."""
    src = plan.manifest.get("source", {})
    if onnx:
        candidates: list[Path] = [onnx]
    else:
        candidates = [plan_path.parent / src.get("file", ""), Path(src.get("file", ""))]
        if src.get("path"):
            candidates.append(Path(src["path"]))
    wrong = None
    for c in candidates:
        if c.is_file():
            if hashlib.sha256(c.read_bytes()).hexdigest() == src.get("sha256"):
                return c
            wrong = wrong or c
    if onnx or wrong is not None:
        raise SpcError(f"{onnx or wrong}: not the ONNX this plan was compiled from (sha256 differs); "
                       "pass the right one with --onnx or recompile")
    where = f" next to the plan or at {src['path']}" if src.get("path") else " next to the plan"
    raise SpcError(f"cannot find the source ONNX {src.get('file')!r}{where}; pass it with --onnx")


class OrtReference:
    def __init__(self, path: Path, extra: list[str]) -> None:
        model = load_onnx(path)
        have = {o for n in model.graph.node for o in n.output}
        outputs = {o.name for o in model.graph.output}
        self.extra = [e for e in extra if e in have and e not in outputs]
        for name in self.extra:
            # untyped: onnxruntime takes the tensor's own type (a float16 model's maps are float16)
            model.graph.output.append(onnx.ValueInfoProto(name=name))
        self.extra += [e for e in extra if e in outputs]
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own types, not one base class
            line = (str(exc).splitlines() or [""])[0]
            line = line.rsplit(") ", 1)[-1] if "onnxruntime_src" in line else line  # past the C++ signature
            raise SpcError(f"{path}: onnxruntime {ort.__version__} cannot load the model, so there is nothing to "
                           f"check against: {line[:240]}") from None
        self.input = self.session.get_inputs()[0].name
        self.types = {i.name: i.type for i in self.session.get_inputs()}
        self.names = [o.name for o in self.session.get_outputs()]

    def run(self, x: np.ndarray | Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The outputs for ``x``: the one input, or several by name, each in the type the model
        declares (an .npz's float64 keypoints given to a float32 input)."""
        feeds = dict(x) if isinstance(x, Mapping) else {self.input: x}
        feeds = {k: np.asarray(v, _ORT_TYPES.get(self.types.get(k, ""))) for k, v in feeds.items()}
        return dict(zip(self.names, self.session.run(None, feeds)))


def compare(name: str, ours: RunResult, ref: dict[str, np.ndarray], maps: dict[str, str],
            roles: dict[str, dict], width: int, height: int) -> ImageReport:
    # a batch plan's maps of one image's copy are no image's rows (runtime/batches.py leaves them out)
    def dense(role: str) -> float:
        a, b = ours.dense.get(role), ref.get(maps.get(role, ""))
        return pcc(a, b) if a is not None and b is not None and a.shape == b.shape else NAN

    score, desc = dense("score_map"), dense("descriptor_map")
    generic: dict[str, list[float]] = {}
    exact: list[str] = []
    logits = None
    for out, role in roles.items():
        r = role.get("role")
        if out not in ours.outputs or out not in ref:
            continue
        a, b = ours.outputs[out], ref[out]
        if r == "score_map":
            score = pcc(a, b)
        elif r == "descriptor_map":
            desc = pcc(a, b)
        elif r == "score_logits":
            logits = (out, int(role["cell"]))
    if logits is not None:
        out, cell = logits
        score = pcc(score_map_from_logits(ours.outputs[out], cell), score_map_from_logits(ref[out], cell))
    for out, a in ours.outputs.items():
        if out in roles or out not in ref:
            continue
        b = ref[out]
        same = a.shape == b.shape
        ints = not np.issubdtype(a.dtype, np.floating) and not np.issubdtype(b.dtype, np.floating)
        if ints and a.ndim == b.ndim == 2 and a.shape[1] == b.shape[1] == 2:
            # matches as (i, j) pairs, a count each side: the rows as a set
            rows = {tuple(r) for r in a.tolist()} ^ {tuple(r) for r in b.tolist()}
            generic[out] = [float((a == b).all(1).mean()) if same and a.size else (1.0 if same else NAN),
                            float(len(rows)), pair_set_f1(a, b)]
            exact.append(out)
            continue
        if same and ints:
            # indices and counts (a matcher's matches): equal or not, a correlation means nothing
            equal = a == b
            generic[out] = [float(equal.mean()) if a.size else 1.0, float(np.count_nonzero(~equal)),
                            index_set_f1(a, b)]
            exact.append(out)
            continue
        generic[out] = [pcc(a, b) if same else NAN,
                        float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()) if same and a.size else NAN]
    ours_kp, ref_kp = (frame_keypoints(o, roles, height, width) for o in (ours.outputs, ref))
    if ours_kp is None or ref_kp is None:
        return ImageReport(name, score, desc, NAN, NAN, NAN, NAN, 0, 0, generic, "", exact)
    (got, source), (want, _) = ours_kp, ref_kp
    agree = keypoint_agreement(*got, *want)
    return ImageReport(name, score, desc, agree.precision, agree.recall, agree.f1, agree.descriptor_cosine,
                       len(got[0]), len(want[0]), generic, source, exact)


def _rows(out: dict[str, np.ndarray], k: int, batch: int) -> dict[str, np.ndarray]:
    """Image ``k``'s row of each onnxruntime result of a batch (those with a batch axis)."""
    return {n: a[k:k + 1] for n, a in out.items() if a.ndim and a.shape[0] == batch}


class Comparison:
    """onnxruntime's outputs on fixed inputs, computed once, for comparing any number of plans.

    ``probes`` maps roles ("score_map", ...) to the source value names the plans expose densely;
    those onnxruntime cannot produce are left out of the comparison.
    """

    def __init__(self, src: Path, probes: dict[str, str], inputs: list[np.ndarray] | list[dict[str, np.ndarray]],
                 names: list[str] | None = None, batch: int = 1) -> None:
        ref = OrtReference(src, list(probes.values()))
        self.maps = {role: name for role, name in probes.items() if name in ref.extra}
        self.inputs = inputs
        self.names = names or [f"input {i}" for i in range(len(inputs))]
        self.batch = batch  # a batch plan's images per run: ``inputs`` are single images (runtime/batches.py)
        takes = list(ref.session.get_inputs()[0].shape)
        image = list(inputs[0].shape) if inputs and isinstance(inputs[0], np.ndarray) else []
        if image and (len(takes) != len(image) or any(
                isinstance(d, int) and d != want for d, want in zip(takes[1:], image[1:])) or
                (isinstance(takes[0], int) and takes[0] not in (1, batch))):
            # another export (--reference) of another size: onnxruntime would refuse the images
            raise SpcError(f"{src}: its input is {takes}, and the plan's images are {image} "
                           f"({batch} per run): not an export of this network at the plan's size")
        per_run = takes[0] if batch > 1 else 1
        if per_run == batch > 1:  # a batch-B export: its batches, split into the images' own rows
            self.references = [_rows(out, k, batch) for group in groups(range(len(inputs)), batch)
                               for out in [ref.run(fill([inputs[i] for i in group], batch))]
                               for k in range(len(group))]
        else:  # the batch-1 model a --batch plan was compiled from: each image alone
            self.references = [ref.run(x) for x in inputs]

    def reports(self, plan: Plan, backend: str = "emu") -> list[ImageReport]:
        return [r for _, r in self.each(plan, backend)]

    def each(self, plan: Plan, backend: str = "emu", order: Iterable[int] | None = None,
             device: Callable[[PreparedProgram], PreparedProgram] | None = None) -> Iterator[tuple[int, ImageReport]]:
        """(input index, report), one input at a time in ``order`` (default: all, in turn), so that
        a caller may stop early; ``device`` wraps the backend's prepared program (tuning/reuse.py)."""
        shape = [int(d) for d in plan.program.inputs[0].shape]
        h, w = plan.program.image.frame_size(shape)
        with Runner(plan, backend) as runner:
            if device is not None:
                runner.device = device(runner.device)
            for group in groups(range(len(self.inputs)) if order is None else order, self.batch):
                if self.batch == 1:
                    results = [runner.run(self.inputs[group[0]], dense=True)]
                else:
                    result = runner.run(fill([self.inputs[i] for i in group], self.batch), dense=True)
                    results = [image_of(result, k, self.batch) for k in range(len(group))]
                for i, ours in zip(group, results):
                    yield i, compare(self.names[i], ours, self.references[i], self.maps, plan.program.roles, w, h)
