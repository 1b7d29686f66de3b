"""SuperPoint written in TensorFlow and exported with tf2onnx, as TF users write it.

Runs in a TensorFlow environment (``make corpus-tf`` makes ``.venv-tf``: tensorflow-cpu and tf2onnx,
no spc): ``python tests/corpus/tf_superpoint.py WEIGHTS.npz OUT.onnx HEIGHT WIDTH [K]``. The weights
are the spc demo weights in the Hugging Face layout (OIHW), saved by tests/corpus/exports.py.

The graph is channels-last from input to output (input ``[1, H, W, 1]``): TF's conv2d and
max_pool2d on NHWC, softmax over the last axis, TF's ``depth_to_space`` (DCR), NMS by max pooling,
the border set to -1, ``tf.math.top_k`` over H*W, keypoints ``[K, 2]`` (x, y) int64, scores ``[K]``
and the keypoints' cells' descriptors ``[K, 256]``, L2-normalised. tf2onnx's optimiser then moves
and cancels the transposes its NHWC converters insert, so what spc sees is tf2onnx's own layout
choice, not ours.
"""

from __future__ import annotations

import sys

import numpy as np

CELL, NMS_RADIUS, BORDER = 8, 4, 4


def export(weights: str, out: str, h: int, w: int, k: int = 1024, opset: int = 17) -> None:
    import tensorflow as tf
    import tf2onnx

    state = dict(np.load(weights))

    def conv(x, name: str, relu: bool = True):
        kernel = tf.constant(np.ascontiguousarray(state[f"{name}.weight"].transpose(2, 3, 1, 0)))  # OIHW -> HWIO
        y = tf.nn.bias_add(tf.nn.conv2d(x, kernel, 1, "SAME"), tf.constant(state[f"{name}.bias"]))
        return tf.nn.relu(y) if relu else y

    def nms(s):  # s: [1, H, W, 1]
        def pool(x):
            return tf.nn.max_pool2d(x, 2 * NMS_RADIUS + 1, 1, "SAME")

        zeros = tf.zeros_like(s)
        keep = tf.equal(s, pool(s))
        for _ in range(2):
            supp = pool(tf.cast(keep, tf.float32)) > 0
            rest = tf.where(supp, zeros, s)
            keep = tf.logical_or(keep, tf.logical_and(tf.equal(rest, pool(rest)), tf.logical_not(supp)))
        return tf.where(keep, s, zeros)

    @tf.function(input_signature=[tf.TensorSpec((1, h, w, 1), tf.float32, name="image")])
    def superpoint(image):
        x = image
        for i in range(4):
            x = conv(x, f"encoder.conv_blocks.{i}.conv_a")
            x = conv(x, f"encoder.conv_blocks.{i}.conv_b")
            if i < 3:
                x = tf.nn.max_pool2d(x, 2, 2, "VALID")
        logits = conv(conv(x, "keypoint_decoder.conv_score_a"), "keypoint_decoder.conv_score_b", relu=False)
        probs = tf.nn.softmax(logits, axis=-1)[..., :-1]
        heat = nms(tf.nn.depth_to_space(probs, CELL))[0, :, :, 0]  # [H, W]
        inner = tf.pad(tf.ones([h - 2 * BORDER, w - 2 * BORDER]), [[BORDER, BORDER], [BORDER, BORDER]])
        heat = tf.where(inner > 0, heat, -tf.ones_like(heat))
        scores, idx = tf.math.top_k(tf.reshape(heat, [-1]), k)
        ys, xs = idx // w, idx % w
        keypoints = tf.cast(tf.stack([xs, ys], axis=-1), tf.int64)
        desc = conv(conv(x, "descriptor_decoder.conv_descriptor_a"), "descriptor_decoder.conv_descriptor_b",
                    relu=False)
        desc = tf.math.l2_normalize(desc, axis=-1)[0]  # [H/8, W/8, 256]
        cells = tf.stack([ys // CELL, xs // CELL], axis=-1)
        descriptors = tf.gather_nd(desc, cells)
        return (tf.identity(keypoints, name="keypoints"), tf.identity(scores, name="scores"),
                tf.identity(descriptors, name="descriptors"))

    tf2onnx.convert.from_function(superpoint, input_signature=superpoint.input_signature, opset=opset,
                                  output_path=out)


if __name__ == "__main__":
    a = sys.argv[1:]
    export(a[0], a[1], int(a[2]), int(a[3]), *(int(x) for x in a[4:]))
