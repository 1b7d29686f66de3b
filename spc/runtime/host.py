"""The host stages: a plan's host nodes run by the IR's interpreter (spc.ir.interpreter)."""

from __future__ import annotations

import numpy as np

from spc.errors import SpcError
from spc.ir.interpreter import MissingValue, NodeFailed, run_named
from spc.plan.program import HostNode


def run_host(nodes: list[HostNode], env: dict[str, np.ndarray], consts: dict[str, np.ndarray]) -> None:
    """Evaluate ``nodes`` in order, adding their outputs to ``env``."""
    try:
        run_named([(n.name, n.op, n.inputs, n.attrs, n.outputs) for n in nodes], env, consts)
    except MissingValue as exc:
        raise SpcError(f"host {exc} (damaged plan?)") from None
    except KeyError as exc:  # an op this spc does not know
        raise SpcError(f"host stage: {exc.args[0]}; recompile the plan with this spc") from None
    except NodeFailed as exc:
        raise SpcError(f"host {exc}") from None
