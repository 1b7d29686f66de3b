"""SuperPoint written in Flax (NNX) and exported with jax2onnx, as JAX users write it.

Runs in a JAX environment (``make corpus-jax`` makes ``.venv-jax``: jax, flax and jax2onnx, no
spc): ``python tests/corpus/jax_superpoint.py WEIGHTS.npz OUT.onnx HEIGHT WIDTH [K]``. The
weights are the spc demo weights in the Hugging Face layout (OIHW), saved by scripts/corpus_jax.py.

Channels-last from input to output, as Flax is (input ``[1, H, W, 1]``): ``nnx.Conv`` (HWIO
kernels), ``nnx.max_pool``, softmax over the last axis, the depth-to-space written as a reshape
and a transpose (JAX has no op for it), NMS by max pooling, the border set to -1,
``jax.lax.top_k`` over H*W, keypoints ``[K, 2]`` (x, y) int32, scores ``[K]`` and the keypoints'
cells' descriptors ``[K, 256]``, L2-normalised. What spc sees is jax2onnx's spelling of each.
"""

from __future__ import annotations

import sys

import numpy as np

CELL, NMS_RADIUS, BORDER = 8, 4, 4
BLOCKS = ((1, 64), (64, 64), (64, 128), (128, 128))


def export(weights: str, out: str, h: int, w: int, k: int = 1024) -> None:
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from jax2onnx import to_onnx

    state = dict(np.load(weights))

    def conv(name: str, cin: int, cout: int, size: int) -> nnx.Conv:
        layer = nnx.Conv(cin, cout, (size, size), padding="SAME", rngs=nnx.Rngs(0))
        layer.kernel.value = jnp.asarray(state[f"{name}.weight"].transpose(2, 3, 1, 0))  # OIHW -> HWIO
        layer.bias.value = jnp.asarray(state[f"{name}.bias"])
        return layer

    def pool(x):  # [1, H, W, 1]
        return nnx.max_pool(x, window_shape=(2 * NMS_RADIUS + 1,) * 2, strides=(1, 1), padding="SAME")

    def nms(s):
        zeros = jnp.zeros_like(s)
        keep = s == pool(s)
        for _ in range(2):
            supp = pool(keep.astype(jnp.float32)) > 0
            rest = jnp.where(supp, zeros, s)
            keep = keep | ((rest == pool(rest)) & ~supp)
        return jnp.where(keep, s, zeros)

    class SuperPoint(nnx.Module):
        def __init__(self) -> None:
            self.encoder = nnx.data([(conv(f"encoder.conv_blocks.{i}.conv_a", a, b, 3),
                             conv(f"encoder.conv_blocks.{i}.conv_b", b, b, 3)) for i, (a, b) in enumerate(BLOCKS)])
            self.score_a = conv("keypoint_decoder.conv_score_a", 128, 256, 3)
            self.score_b = conv("keypoint_decoder.conv_score_b", 256, 65, 1)
            self.desc_a = conv("descriptor_decoder.conv_descriptor_a", 128, 256, 3)
            self.desc_b = conv("descriptor_decoder.conv_descriptor_b", 256, 256, 1)

        def __call__(self, image):
            x = image
            for i, (ca, cb) in enumerate(self.encoder):
                x = nnx.relu(cb(nnx.relu(ca(x))))
                if i < 3:
                    x = nnx.max_pool(x, window_shape=(2, 2), strides=(2, 2))
            logits = self.score_b(nnx.relu(self.score_a(x)))  # [1, H/8, W/8, 65]
            probs = jax.nn.softmax(logits, axis=-1)[..., :-1]
            hc, wc = h // CELL, w // CELL
            cells = probs.reshape(1, hc, wc, CELL, CELL).transpose(0, 1, 3, 2, 4)
            heat = nms(cells.reshape(1, h, w, 1))[0, :, :, 0]
            inner = jnp.pad(jnp.ones((h - 2 * BORDER, w - 2 * BORDER)), BORDER)
            heat = jnp.where(inner > 0, heat, -jnp.ones_like(heat))
            scores, idx = jax.lax.top_k(heat.reshape(-1), k)
            ys, xs = idx // w, idx % w
            desc = self.desc_b(nnx.relu(self.desc_a(x)))[0]  # [H/8, W/8, 256]
            desc = desc / jnp.maximum(jnp.linalg.norm(desc, axis=-1, keepdims=True), 1e-12)
            descriptors = desc[ys // CELL, xs // CELL]
            return jnp.stack([xs, ys], axis=-1), scores, descriptors

    to_onnx(SuperPoint(), [(1, h, w, 1)], return_mode="file", output_path=out)


if __name__ == "__main__":
    a = sys.argv[1:]
    export(a[0], a[1], int(a[2]), int(a[3]), *(int(x) for x in a[4:]))
