"""SuperGlue (Sarlin et al., CVPR 2020) with seeded weights, exported by torch.onnx (dynamo, opset 18).

    from tests.corpus.superglue import export
    export(path, k=512)

Written here from the paper, not from magicleap/SuperGluePretrainedNetwork's class (its licence
allows non-commercial research only) and with no trained weights (none are reachable from here):
the same structure as that class, module for module. A keypoint encoder (an MLP of 1-d
convolutions and batch norms over x, y and the score) added to the descriptors; an attentional
graph network of alternating self and cross layers (four-head attention through 1-d convolution
projections, a two-layer MLP on the input and the message, a residual); a final projection;
scores as descriptor products over sqrt(D); the log-space optimal transport with a dustbin row and
column, ``iters`` Sinkhorn iterations of logsumexp; the mutual best match above ``threshold``.

Inputs kpts0 [1, K, 2] (pixels of a ``height`` x ``width`` image, fixed at export as a user's
fixed-size export fixes it), scores0 [1, K], desc0 [1, D, K], then image 1's; outputs matches0
[1, K] (int64, -1: none) and matching_scores0 [1, K].
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.corpus.lightglue import export_matcher


def export(path: Path, k: int = 512, dim: int = 256, layers: int = 9, iters: int = 100, threshold: float = 0.2,
           height: int = 480, width: int = 640, seed: int = 0, opset: int = 18) -> Path:
    import torch
    from torch import nn

    torch.manual_seed(seed)

    def mlp(channels: list[int]) -> nn.Sequential:
        mods: list[nn.Module] = []
        for i in range(1, len(channels)):
            mods.append(nn.Conv1d(channels[i - 1], channels[i], 1))
            if i < len(channels) - 1:
                mods += [nn.BatchNorm1d(channels[i]), nn.ReLU()]
        return nn.Sequential(*mods)

    class Attention(nn.Module):
        def __init__(self, heads: int, d: int) -> None:
            super().__init__()
            self.heads, self.dim = heads, d // heads
            self.proj = nn.ModuleList([nn.Conv1d(d, d, 1) for _ in range(3)])
            self.merge = nn.Conv1d(d, d, 1)

        def forward(self, x: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
            b = x.shape[0]
            q, key, v = (p(t).view(b, self.dim, self.heads, -1) for p, t in zip(self.proj, (x, source, source)))
            prob = torch.softmax(torch.einsum("bdhn,bdhm->bhnm", q, key) / self.dim ** 0.5, dim=-1)
            out = torch.einsum("bhnm,bdhm->bdhn", prob, v)
            return self.merge(out.contiguous().view(b, self.dim * self.heads, -1))

    class Propagation(nn.Module):
        def __init__(self, d: int) -> None:
            super().__init__()
            self.attn = Attention(4, d)
            self.mlp = mlp([2 * d, 2 * d, d])
            nn.init.constant_(self.mlp[-1].bias, 0.0)

        def forward(self, x: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
            return self.mlp(torch.cat([x, self.attn(x, source)], dim=1))

    class SuperGlue(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.kenc = mlp([3, 32, 64, 128, 256, dim])
            self.gnn = nn.ModuleList([Propagation(dim) for _ in range(2 * layers)])
            self.final_proj = nn.Conv1d(dim, dim, 1)
            self.bin_score = nn.Parameter(torch.tensor(1.0))
            for m in self.modules():  # seeded batch-norm statistics, as a trained network has them
                if isinstance(m, nn.BatchNorm1d):
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.5, 1.5)
            # residual updates small beside the descriptors, as in a trained network: with PyTorch's
            # default initialisation the seeded layers drown them and nothing matches
            with torch.no_grad():
                for seq in (self.kenc, *(layer.mlp for layer in self.gnn)):
                    seq[-1].weight.mul_(0.1)
                # and a projection that makes a unit descriptor's product with itself ~9 over the
                # sqrt(D), as trained scores are: near uniform otherwise
                self.final_proj.weight.mul_(0.1).add_(12 * torch.eye(dim)[:, :, None])

        def normalize(self, kpts: torch.Tensor) -> torch.Tensor:
            center = torch.tensor([width / 2, height / 2])
            return (kpts - center) / (max(width, height) * 0.7)

        def forward(self, kpts0, scores0, desc0, kpts1, scores1, desc1):
            d0 = desc0 + self.kenc(torch.cat([self.normalize(kpts0).transpose(1, 2), scores0[:, None]], 1))
            d1 = desc1 + self.kenc(torch.cat([self.normalize(kpts1).transpose(1, 2), scores1[:, None]], 1))
            for i, layer in enumerate(self.gnn):
                s0, s1 = (d1, d0) if i % 2 else (d0, d1)  # self, then cross
                d0, d1 = d0 + layer(d0, s0), d1 + layer(d1, s1)
            m0, m1 = self.final_proj(d0), self.final_proj(d1)
            scores = torch.einsum("bdn,bdm->bnm", m0, m1) / dim ** 0.5
            scores = self.transport(scores)
            max0, max1 = scores[:, :-1, :-1].max(2), scores[:, :-1, :-1].max(1)
            idx0, idx1 = max0.indices, max1.indices
            mutual0 = torch.arange(idx0.shape[1])[None] == idx1.gather(1, idx0)
            ms0 = torch.where(mutual0, max0.values.exp(), torch.zeros_like(max0.values))
            valid0 = mutual0 & (ms0 > threshold)
            return torch.where(valid0, idx0, -1), ms0

        def transport(self, scores: torch.Tensor) -> torch.Tensor:
            b, m, n = scores.shape
            alpha = self.bin_score
            couplings = torch.cat([torch.cat([scores, alpha.expand(b, m, 1)], -1),
                                   alpha.expand(b, 1, n + 1)], 1)
            norm = -torch.log(torch.tensor(float(m + n)))
            log_mu = torch.cat([norm.expand(m), torch.log(torch.tensor(float(n))).expand(1) + norm])[None]
            log_nu = torch.cat([norm.expand(n), torch.log(torch.tensor(float(m))).expand(1) + norm])[None]
            u, v = torch.zeros_like(log_mu), torch.zeros_like(log_nu)
            for _ in range(iters):
                u = log_mu - torch.logsumexp(couplings + v[:, None, :], dim=2)
                v = log_nu - torch.logsumexp(couplings + u[:, :, None], dim=1)
            return couplings + u[:, :, None] + v[:, None, :] - norm

    feeds = synthetic_pair(k, 0, dim)
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    return export_matcher(SuperGlue(), args, path, list(feeds), opset)


def synthetic_pair(k: int, seed: int, dim: int = 256) -> dict[str, np.ndarray]:
    """tests/corpus/lightglue.py's pair in SuperGlue's layout: scores, descriptors (D, K)."""
    from tests.corpus.lightglue import synthetic_pair as lg_pair

    p = lg_pair(k, seed, dim)
    rng = np.random.default_rng(seed + 1000)
    return {"kpts0": p["kpts0"], "scores0": rng.uniform(0, 1, (1, k)).astype(np.float32),
            "desc0": np.ascontiguousarray(p["desc0"].transpose(0, 2, 1)),
            "kpts1": p["kpts1"], "scores1": rng.uniform(0, 1, (1, k)).astype(np.float32),
            "desc1": np.ascontiguousarray(p["desc1"].transpose(0, 2, 1))}
