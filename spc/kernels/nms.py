"""NMS kernels on the single-channel score map (the NMS chain of lowering/lower.py, fused).

SuperPoint's NMS (HF ``simple_nms``, two rounds) between its window maxima is element-wise work
that stock ttnn spells as six calls per round; two kernels do it:

* ``nms_suppress(s, near) = s * (near <= 0)``: the scores outside every kept window
  (``gtz``, ``logical_not``, ``multiply``);
* ``nms_admit(mask, rest, rmax, near) = mask | ((rest == rmax) & (near <= 0))``: the new local
  maxima among them, added to the mask (``gtz``, ``logical_not``, ``eq``, ``logical_and``,
  ``logical_or``);
* ``nms_select(s, m) = s * (s == m)``: a score where it equals its window maximum, else 0 — the
  single-pass NMS (``eq``, ``multiply``).

Masks are 0/1 in the score map's format, as ttnn's comparisons return them. The TT-Lang sources
are in nms_ttl.py (imported only where tt-lang or tt-lang-sim is installed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spc.kernels.registry import Kernel, register

if TYPE_CHECKING:  # the references take torch tensors; spc compile must not import torch
    import torch


def _call(op: str, inputs: list[str], output: str) -> dict[str, Any]:
    return {"op": op, "inputs": inputs, "output": output}


def select(s: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return s * (s == m).to(s.dtype)


def suppress(s: torch.Tensor, near: torch.Tensor) -> torch.Tensor:
    return s * (near <= 0).to(s.dtype)


def admit(mask: torch.Tensor, rest: torch.Tensor, rmax: torch.Tensor, near: torch.Tensor) -> torch.Tensor:
    return ((mask != 0) | ((rest == rmax) & (near <= 0))).to(mask.dtype)


register(Kernel("nms_select", 2, select, lambda i, outs, _: [
    _call("ttnn.eq", [i[0], i[1]], outs[0] + "/is_max"),
    _call("ttnn.multiply", [i[0], outs[0] + "/is_max"], outs[0])], "s * (s == m)"))

register(Kernel("nms_suppress", 2, suppress, lambda i, outs, _: [
    _call("ttnn.gtz", [i[1]], outs[0] + "/suppressed"),
    _call("ttnn.logical_not", [outs[0] + "/suppressed"], outs[0] + "/free"),
    _call("ttnn.multiply", [i[0], outs[0] + "/free"], outs[0])], "s * (near <= 0)"))

register(Kernel("nms_admit", 4, admit, lambda i, outs, _: [
    _call("ttnn.gtz", [i[3]], outs[0] + "/suppressed"),
    _call("ttnn.logical_not", [outs[0] + "/suppressed"], outs[0] + "/free"),
    _call("ttnn.eq", [i[1], i[2]], outs[0] + "/is_max"),
    _call("ttnn.logical_and", [outs[0] + "/is_max", outs[0] + "/free"], outs[0] + "/new"),
    _call("ttnn.logical_or", [i[0], outs[0] + "/new"], outs[0])], "mask | ((rest == rmax) & (near <= 0))"))
