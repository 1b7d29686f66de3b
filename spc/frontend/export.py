"""`spc export`: the whole Hugging Face SuperPoint model, post-processing included, to ONNX.

torch.onnx's dynamo exporter traces SuperPointForKeypointDetection at a fixed input size; the
keypoint count stays dynamic (NonZero). Outputs are renamed to stable names so that the plan and
``spc check`` can refer to them whatever the exporter called them.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from transformers.models.superpoint import modeling_superpoint as hf

from spc.errors import SpcError
from spc.files import atomic_write
from spc.frontend.weights import build_model, origin_line, weights_origin
from spc.version import __version__

OUTPUT_NAMES = ("keypoints", "scores", "descriptors", "mask")
INPUT_NAME = "pixel_values"
OPSET = 18


def _tuple_outputs(model):
    """The HF model behind a module that returns its four outputs as a plain tuple."""
    class Outputs(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, pixel_values: torch.Tensor):
            out = self.inner(pixel_values, return_dict=True)
            return out.keypoints, out.scores, out.descriptors, out.mask

    return Outputs(model).eval()


@contextlib.contextmanager
def _traceable_top_k():
    """HF's top_k_keypoints branches on the keypoint count (``if k >= len(keypoints)``), which
    torch.export cannot trace. The same result without the branch: the top min(k, n) by score,
    or all n in their original order when n <= k."""
    def top_k_keypoints(keypoints: torch.Tensor, scores: torch.Tensor, k: int):
        n = scores.shape[0]
        kept = torch.sym_min(k, n)
        _, by_score = torch.topk(scores, kept, dim=0)
        in_order = torch.arange(kept, device=scores.device)
        indices = torch.where(torch.scalar_tensor(n) <= k, in_order, by_score)
        return keypoints[indices], scores[indices]

    original = hf.top_k_keypoints
    hf.top_k_keypoints = top_k_keypoints
    try:
        yield
    finally:
        hf.top_k_keypoints = original


def export_metadata(origin: dict[str, str], model) -> dict[str, str]:
    """What the ONNX file says about itself (``metadata_props``): where its weights came from
    (frontend/weights.py weights_origin), the post-processing settings, the spc that wrote it."""
    config = model.inner.config
    return {**origin, "spc.version": __version__,
            "spc.export.keypoint_threshold": repr(float(config.keypoint_threshold)),
            "spc.export.max_keypoints": str(int(config.max_keypoints))}


def export_onnx(output: Path, height: int = 480, width: int = 640, channels: int = 3,
                weights: str | None = None, keypoint_threshold: float | None = None,
                max_keypoints: int | None = None, log: Callable[[str], None] | None = None, batch: int = 1) -> Path:
    """Export and write ``output`` atomically; returns the path. ``log`` hears one line saying
    where the weights came from (also recorded in the file's ``metadata_props``: spc.weights.*)."""
    if height % 8 or width % 8 or height < 16 or width < 16:
        raise SpcError(f"--height/--width must be multiples of 8 and at least 16, got {height}x{width}")
    if channels not in (1, 2, 3):
        raise SpcError(f"--channels must be 1, 2 or 3, got {channels}")
    if not 1 <= batch <= 64:
        raise SpcError(f"--batch must be between 1 and 64, got {batch}")

    # the exporter logs that torchvision is absent; SuperPoint needs none of its ops
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)

    model = _tuple_outputs(build_model(weights, keypoint_threshold, max_keypoints))
    metadata = export_metadata(weights_origin(weights, model.inner), model)
    if log is not None:
        log(origin_line(metadata))
    example = torch.rand(batch, channels, height, width)  # HF's per-image loop unrolls over the batch
    with warnings.catch_warnings(), torch.no_grad(), _traceable_top_k():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, (example,), dynamo=True, opset_version=OPSET,
                                    input_names=[INPUT_NAME], output_names=list(OUTPUT_NAMES),
                                    optimize=True, verbose=False)
    proto = program.model_proto
    proto.producer_name = "spc export"
    proto.doc_string = (f"HF SuperPointForKeypointDetection {height}x{width}x{channels}"
                        f"{f', batch {batch}' if batch > 1 else ''}, "
                        f"weights: {metadata['spc.weights.name']} ({metadata['spc.weights.source']}; "
                        "metadata_props spc.weights.* say more)")
    kept = [(e.key, e.value) for e in proto.metadata_props if not e.key.startswith("spc.")]
    del proto.metadata_props[:]
    for key, value in [*kept, *sorted(metadata.items())]:
        proto.metadata_props.add(key=key, value=value)
    atomic_write(output, proto.SerializeToString())
    return output
