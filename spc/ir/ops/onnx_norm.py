"""ONNX normalisations: BatchNormalization, InstanceNormalization, LayerNormalization,
RMSNormalization, GroupNormalization, LpNormalization, MeanVarianceNormalization and LRN.
"""

from __future__ import annotations

import numpy as np

from spc.ir.graph import Value
from spc.ir.ops import register
from spc.ir.ops.infer import norm_axis, same_type
from spc.ir.ops.operands import A, D, Types, _opt, _work, _x
from spc.ir.types import DType, TensorType

# conformance cases spc refuses on purpose (frontend/conformance.py): case name -> why
CONFORMANCE_EXCEPTIONS: dict[str, str] = {}


def _np(dt: DType) -> np.dtype:
    return dt.host_numpy


def _stash(attrs: D) -> DType:
    return DType.from_onnx(int(attrs.get("stash_type", 1)))


def _bn_infer(ins: list[Value | None], attrs: D) -> Types:
    x = _x(ins)
    if attrs.get("training_mode", 0):
        mean, var = ins[3], ins[4]
        assert mean is not None and var is not None
        return [x.type, mean.type, var.type]
    return [x.type]


def _bn_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    if since < 14 and n_out > 1:
        raise ValueError(f"BatchNormalization-{since} with {n_out} outputs is its training mode (running and saved "
                         "statistics), which spc does not implement; export the model in inference mode (eval())")
    if n_out > 1 and not attrs.get("training_mode", 0):
        raise ValueError("BatchNormalization outputs running_mean and running_var only with training_mode=1")
    return attrs


@register("onnx.BatchNormalization", _bn_infer, arity=(5, 5), canonicalize=_bn_canon)
def _batchnorm(ins: A, attrs: D) -> list[np.ndarray]:
    """Inference: the stored statistics. ``training_mode = 1``: the batch's statistics, plus the
    running mean and variance updated with ``momentum``."""
    x, scale, bias, mean, var = (np.asarray(a) for a in ins[:5])
    eps = float(attrs.get("epsilon", 1e-5))
    work = _work(x.dtype)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    xw = x.astype(work, copy=False)
    if attrs.get("training_mode", 0):
        axes = (0, *range(2, x.ndim))
        bm, bv = xw.mean(axes), xw.var(axes)
        mom = float(attrs.get("momentum", 0.9))
        y = (xw - bm.reshape(shape)) / np.sqrt(bv.reshape(shape) + eps) * scale.reshape(shape) + bias.reshape(shape)
        return [y.astype(x.dtype), (mean * mom + bm * (1 - mom)).astype(mean.dtype),
                (var * mom + bv * (1 - mom)).astype(var.dtype)]
    a = scale.astype(work) / np.sqrt(var.astype(work) + eps)
    return [(xw * a.reshape(shape) + (bias - mean * a).reshape(shape)).astype(x.dtype)]


def _instance_norm_infer(ins: list[Value | None], attrs: D) -> Types:
    x = _x(ins)
    if x.type.rank < 3:
        raise ValueError(f"InstanceNormalization needs an (N, C, ...) input, not rank {x.type.rank}")
    c = x.type.shape[1]
    for what, v in (("scale", ins[1]), ("B", ins[2])):
        assert v is not None
        size = v.type.shape[0] if v.type.rank == 1 else None
        if v.type.rank != 1 or (isinstance(c, int) and isinstance(size, int) and size != c):
            raise ValueError(f"InstanceNormalization's {what} is {list(v.type.shape)}; it takes one value per "
                             f"channel ({c})")
    return same_type(ins, attrs)


@register("onnx.InstanceNormalization", _instance_norm_infer, arity=(3, 3))
def _instance_norm(ins: A, attrs: D) -> list[np.ndarray]:
    x, scale, bias = (np.asarray(a) for a in ins[:3])
    xw = x.astype(_work(x.dtype))
    axes = tuple(range(2, x.ndim))
    mean = xw.mean(axes, keepdims=True)
    d = xw - mean
    inv = 1.0 / np.sqrt((d * d).mean(axes, keepdims=True) + float(attrs.get("epsilon", 1e-5)))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return [(d * inv * scale.reshape(shape) + bias.reshape(shape)).astype(x.dtype)]


def _norm_stats(xu: np.ndarray, axes: tuple[int, ...], eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, deviation, 1 / std) over ``axes`` of an array already in the compute type."""
    mean = xu.mean(axes, keepdims=True)
    d = xu - mean
    return mean, d, 1.0 / np.sqrt((d * d).mean(axes, keepdims=True) + eps)


def _ln_infer(ins: list[Value | None], attrs: D) -> Types:
    x = _x(ins)
    axis = norm_axis(int(attrs.get("axis", -1)), x.type.rank)
    u = _stash(attrs)
    stat = (*x.type.shape[:axis], *(1,) * (x.type.rank - axis))
    return [x.type, TensorType(u, stat), TensorType(u, stat)]


@register("onnx.LayerNormalization", _ln_infer, arity=(2, 3))
def _layer_norm(ins: A, attrs: D) -> list[np.ndarray]:
    """As the ONNX function: statistics in ``stash_type``, scale and bias in the input type;
    outputs Y, Mean, InvStdDev."""
    x, scale, bias = np.asarray(ins[0]), np.asarray(ins[1]), _opt(ins, 2)
    axis = norm_axis(int(attrs.get("axis", -1)), x.ndim)
    u = _np(_stash(attrs))
    mean, d, inv = _norm_stats(x.astype(u), tuple(range(axis, x.ndim)), float(attrs.get("epsilon", 1e-5)))
    y = (d * inv).astype(x.dtype) * scale
    if bias is not None:
        y = y + bias
    return [y.astype(x.dtype), mean.astype(u), inv.astype(u)]


@register("onnx.RMSNormalization", same_type, arity=(2, 2))
def _rms_norm(ins: A, attrs: D) -> list[np.ndarray]:
    x, scale = np.asarray(ins[0]), np.asarray(ins[1])
    axis = norm_axis(int(attrs.get("axis", -1)), x.ndim)
    xu = x.astype(_np(_stash(attrs)))
    ms = (xu * xu).mean(tuple(range(axis, x.ndim)), keepdims=True)
    return [((xu / np.sqrt(ms + float(attrs.get("epsilon", 1e-5)))).astype(x.dtype) * scale).astype(x.dtype)]


def _gn_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    # GroupNormalization-18 has one scale and bias per group; -21 one per channel, statistics in stash_type
    return {**attrs, "scale_per": "group" if since < 21 else "channel"}


@register("onnx.GroupNormalization", same_type, arity=(3, 3), canonicalize=_gn_canon)
def _group_norm(ins: A, attrs: D) -> list[np.ndarray]:
    """``scale_per``: "channel" (GroupNormalization-21, the default) or "group" (-18)."""
    x, scale, bias = (np.asarray(a) for a in ins[:3])
    g = int(attrs["num_groups"])
    n, c = x.shape[:2]
    if g < 1 or c % g:
        raise ValueError(f"GroupNormalization: {c} channels do not split into {g} groups")
    per_group = attrs.get("scale_per", "channel") == "group"
    work = _work(x.dtype) if per_group else _np(_stash(attrs))
    _, d, inv = _norm_stats(x.reshape(n, g, -1).astype(work), (2,), float(attrs.get("epsilon", 1e-5)))
    norm = (d * inv).astype(x.dtype)
    if per_group:
        y = norm * scale.reshape(1, g, 1) + bias.reshape(1, g, 1)
        return [y.reshape(x.shape).astype(x.dtype)]
    shape = (1, c) + (1,) * (x.ndim - 2)
    return [(norm.reshape(x.shape) * scale.reshape(shape) + bias.reshape(shape)).astype(x.dtype)]


def _lpnorm_canon(attrs: D, n_in: int, n_out: int, since: int) -> D:
    if int(attrs.get("p", 2)) not in (1, 2):
        raise ValueError(f"LpNormalization p={attrs['p']}: ONNX defines p = 1 or 2 only")
    return attrs


@register("onnx.LpNormalization", same_type, arity=(1, 1), canonicalize=_lpnorm_canon)
def _lp_norm(ins: A, attrs: D) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    xw = x.astype(_work(x.dtype))
    axis = int(attrs.get("axis", -1))
    if int(attrs.get("p", 2)) == 1:
        norm = np.abs(xw).sum(axis, keepdims=True)
    else:
        norm = np.sqrt((xw * xw).sum(axis, keepdims=True))
    return [(xw / np.where(norm == 0, 1, norm)).astype(x.dtype)]  # a zero vector stays zero


@register("onnx.MeanVarianceNormalization", same_type, arity=(1, 1))
def _mvn(ins: A, attrs: D) -> list[np.ndarray]:
    """(x - E[x]) / (sqrt(E[x²] - E[x]²) + 1e-9) over ``axes`` (default N, H, W), as the ONNX function."""
    x = np.asarray(ins[0])
    xw = x.astype(_work(x.dtype))
    axes = tuple(norm_axis(int(a), x.ndim) for a in attrs.get("axes", [0, 2, 3]))
    mean = xw.mean(axes, keepdims=True)
    var = np.maximum((xw * xw).mean(axes, keepdims=True) - mean * mean, 0)  # rounding must not make it negative
    return [((xw - mean) / (np.sqrt(var) + 1e-9)).astype(x.dtype)]


@register("onnx.LRN", same_type, arity=(1, 1))
def _lrn(ins: A, attrs: D) -> list[np.ndarray]:
    """x / (bias + alpha / size * sum of x² over the ``size`` neighbouring channels) ** beta."""
    x = np.asarray(ins[0])
    size = int(attrs["size"])
    alpha, beta, bias = float(attrs.get("alpha", 1e-4)), float(attrs.get("beta", 0.75)), float(attrs.get("bias", 1.0))
    xw = x.astype(_work(x.dtype))
    lo = (size - 1) // 2
    sq = np.pad(xw * xw, [(0, 0), (lo, size - 1 - lo)] + [(0, 0)] * (x.ndim - 2))
    c = x.shape[1]
    acc = sq[:, :c].copy()
    for j in range(1, size):
        acc += sq[:, j:j + c]
    return [(xw / (bias + alpha / size * acc) ** beta).astype(x.dtype)]
