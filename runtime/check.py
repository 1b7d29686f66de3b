"""`spc check`: run onnxruntime on the source ONNX and our plan on the same inputs, compare.

onnxruntime is asked for the dense maps too, by the names the fused ops kept from the source
(the pre-NMS score map and the normalised descriptor map), so both sides are compared on the
same tensors, not just on keypoint lists.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from spc.errors import SpcError
from spc.frontend.onnx_import import load_onnx
from spc.lowering.plan import Plan
from spc.runtime.metrics import keypoint_agreement, pcc
from spc.runtime.runner import RunResult


@dataclass
class ImageReport:
    input: str
    score_pcc: float
    descriptor_pcc: float
    precision: float
    recall: float
    f1: float
    descriptor_cosine: float
    keypoints: int
    ref_keypoints: int

    def as_dict(self) -> dict:
        return asdict(self)


def find_source(plan: Plan, plan_path: Path, onnx: Path | None) -> Path:
    src = plan.manifest.get("source", {})
    candidates = [onnx] if onnx else [plan_path.parent / src.get("file", ""), Path(src.get("file", ""))]
    for c in candidates:
        if c is not None and c.is_file():
            if hashlib.sha256(c.read_bytes()).hexdigest() != src.get("sha256"):
                raise SpcError(f"{c}: not the ONNX this plan was compiled from (sha256 differs); "
                               "pass the right one with --onnx or recompile")
            return c
    raise SpcError(f"cannot find the source ONNX {src.get('file')!r} next to the plan; pass it with --onnx")


class OrtReference:
    def __init__(self, path: Path, extra: list[str]) -> None:
        import onnx
        import onnxruntime as ort

        model = load_onnx(path)
        have = {o for n in model.graph.node for o in n.output}
        self.extra = [e for e in extra if e in have]
        for name in self.extra:
            model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        self.input = self.session.get_inputs()[0].name
        self.names = [o.name for o in self.session.get_outputs()]

    def run(self, x: np.ndarray) -> dict[str, np.ndarray]:
        return dict(zip(self.names, self.session.run(None, {self.input: x})))


def pixel_keypoints(kp: np.ndarray, width: int, height: int) -> np.ndarray:
    """HF keypoints are relative (x / W, y / H); back to pixels."""
    return kp * np.asarray([width, height], np.float32)


def compare(name: str, ours: RunResult, ref: dict[str, np.ndarray], maps: dict[str, str],
            width: int, height: int) -> ImageReport:
    def unbatch(out: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        keep = out["mask"][0].astype(bool)
        return (pixel_keypoints(out["keypoints"][0][keep], width, height), out["scores"][0][keep],
                out["descriptors"][0][keep])

    kp, sc, de = unbatch(ours.outputs)
    rkp, rsc, rde = unbatch(ref)
    agree = keypoint_agreement(kp, sc, de, rkp, rsc, rde)
    score = pcc(ours.dense["score_map"], ref[maps["score_map"]]) if "score_map" in maps else float("nan")
    desc = pcc(ours.dense["descriptor_map"], ref[maps["descriptor_map"]]) if "descriptor_map" in maps \
        else float("nan")
    return ImageReport(name, score, desc, agree.precision, agree.recall, agree.f1, agree.descriptor_cosine,
                       len(kp), len(rkp))


class Comparison:
    """onnxruntime's outputs on fixed inputs, computed once, for comparing any number of plans.

    ``probes`` maps roles ("score_map", ...) to the source value names the plans expose densely;
    those onnxruntime cannot produce are left out of the comparison.
    """

    def __init__(self, src: Path, probes: dict[str, str], inputs: list[np.ndarray],
                 names: list[str] | None = None) -> None:
        ref = OrtReference(src, list(probes.values()))
        self.maps = {role: name for role, name in probes.items() if name in ref.extra}
        self.inputs = inputs
        self.names = names or [f"input {i}" for i in range(len(inputs))]
        self.references = [ref.run(x) for x in inputs]

    def reports(self, plan: Plan, backend: str = "emu") -> list[ImageReport]:
        from spc.runtime.runner import Runner

        h, w = (int(d) for d in plan.program.inputs[0].shape[2:])
        with Runner(plan, backend) as runner:
            return [compare(name, runner.run(x, dense=True), ref, self.maps, w, h)
                    for name, x, ref in zip(self.names, self.inputs, self.references)]
