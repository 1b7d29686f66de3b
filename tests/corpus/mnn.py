"""A mutual-nearest-neighbour matcher as a user writes one in torch and exports it (dynamo, opset 18).

    from tests.corpus.mnn import export
    export(path, k=64, dim=256)

Inputs kpts0, kpts1 [1, K, 2], desc0, desc1 [1, K, D] (unit descriptors); outputs matches0 [1, K]
(int64, -1: none) and matching_scores0 [1, K]: keypoint i of image 0 and j of image 1 match
when each is the other's most similar and their similarity passes ``threshold``. The keypoints
take part only through a zero-weight term, as exporters drop an input the graph does not read.
"""

from __future__ import annotations

from pathlib import Path


def export(path: Path, k: int = 64, dim: int = 256, threshold: float = 0.7, pairs: bool = False) -> Path:
    """``pairs``: return the matches as LightGlue-ONNX's exports do, matches [M, 2] (i, j) and
    mscores [M], M data-dependent, instead of matches0 and matching_scores0."""
    import torch

    class MutualNearest(torch.nn.Module):
        def forward(self, kpts0, kpts1, desc0, desc1):
            sim = desc0 @ desc1.transpose(1, 2) + 0.0 * (kpts0[..., :1] + kpts1[..., :1].transpose(1, 2))
            best0, m0 = sim.max(2)
            m1 = sim.argmax(1)
            mutual = torch.gather(m1, 1, m0) == torch.arange(sim.shape[1])[None]
            valid = mutual & (best0 > threshold)
            if pairs:
                idx = torch.nonzero(valid[0])[:, 0]
                return torch.stack([idx, m0[0][idx]], -1), best0[0][idx]
            return torch.where(valid, m0, -1), torch.where(valid, best0, 0.0)

    # four distinct tensors: the exporter takes one tensor passed twice for one input
    args = (torch.rand(1, k, 2) * 100, torch.rand(1, k, 2) * 100,
            torch.nn.functional.normalize(torch.randn(1, k, dim), dim=2),
            torch.nn.functional.normalize(torch.randn(1, k, dim), dim=2))
    torch.onnx.export(MutualNearest().eval(), args, str(path),
                      input_names=["kpts0", "kpts1", "desc0", "desc1"],
                      output_names=["matches", "mscores"] if pairs else ["matches0", "matching_scores0"], dynamo=True,
                      opset_version=18)
    return path
