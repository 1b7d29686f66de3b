"""The host stages: IR nodes evaluated with their numpy semantics (spc.ir.ops)."""

from __future__ import annotations

import numpy as np

from spc.errors import SpcError
from spc.ir import ops
from spc.plan.program import HostNode


def run_host(nodes: list[HostNode], env: dict[str, np.ndarray], consts: dict[str, np.ndarray]) -> None:
    """Evaluate ``nodes`` in order, adding their outputs to ``env``."""
    for n in nodes:
        args = []
        for name in n.inputs:
            if name is None:
                args.append(None)
            elif name in env:
                args.append(env[name])
            elif name in consts:
                args.append(consts[name])
            else:
                raise SpcError(f"host node {n.name} reads {name}, which nothing produced (damaged plan?)")
        try:
            results = ops.get(n.op).evaluate(args, n.attrs)
        except (ValueError, IndexError, TypeError) as exc:
            raise SpcError(f"host node {n.name} ({n.op}) failed: {exc}") from None
        for name, r in zip(n.outputs, results):
            env[name] = np.asarray(r)
