"""A plan's program run by what its calls mean (ttnn/calls: each call's ``meaning``): numpy, float32, exact.

Not a device model: no storage rounding, no matrix-engine phases (the emu backend has those).
It answers whether a program computes what its source computes, which is what ``spc compile``'s
validation asks (validation/translation.py). It computes only what the tensors asked for need,
and takes given values for some calls' results (a convolution's, checked on its own), so a
check at the model's size skips the arithmetic it does not look at.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

import numpy as np

from spc.errors import SpcError
from spc.ir.interpreter import demanded, dropped_after
from spc.plan.program import Program, TtOp
from spc.ttnn.calls import MEANINGS


def flat_ops(program: Program) -> list[TtOp]:
    """The program's calls, each fused kernel as the stock calls it composes (kernels/)."""
    return [c for op in program.device_ops for c in op.stock_calls()]


def needed(ops: list[TtOp], wanted: Iterable[str], given: Collection[str]) -> list[TtOp]:
    """The calls that ``wanted`` depends on, in order, not looking past the results in ``given``."""
    return demanded(ops, wanted, given, lambda op: op.results)


def run_device(program: Program, weights: Mapping[str, np.ndarray], inputs: Mapping[str, np.ndarray],
               wanted: Iterable[str], given: Mapping[str, np.ndarray] | None = None,
               calls: list[TtOp] | None = None, keep: Collection[str] | None = None) -> dict[str, np.ndarray]:
    """The device stage on device-layout ``inputs``: every tensor the ``wanted`` ones need, and
    those, by name. ``given``: results taken as they are instead of computed (by call result);
    ``calls``: the program's :func:`flat_ops`, when the caller has them; ``keep``: with it, only
    these (and ``wanted``) are kept past their last reader, so that the next results reuse the
    memory (fresh pages fault: at 480x640 ~25 ms of the validation's device run)."""
    given = dict(given or {})
    env: dict[str, np.ndarray] = {k: np.asarray(v, np.float32) for k, v in inputs.items()}
    env.update({c.name: np.asarray(weights[c.weight], np.float32).reshape(c.device_shape) for c in program.constants})
    env.update(given)
    wanted = list(wanted)
    run = needed(flat_ops(program) if calls is None else calls, wanted, given)
    drops = dropped_after(run, {*keep, *wanted, *env}, lambda op: (*op.inputs, *op.results)) if keep is not None \
        else None
    for i, op in enumerate(run):
        fn = MEANINGS.get(op.op)
        if fn is None:
            raise SpcError(f"{op.op} (from {op.source}) has no meaning in ttnn/calls")
        ins = [env[x] for x in op.inputs]
        w = {k: weights[v] for k, v in op.weights.items()}
        try:
            op.bind(env, fn(ins, w, op.args))
        except (ValueError, IndexError, TypeError) as exc:  # arguments that do not fit the tensors: a bug
            raise SpcError(f"{op.op} (from node {op.source}) cannot run on its inputs "
                           f"{[list(np.shape(i)) for i in ins]}: {exc}") from None
        for x in drops[i] if drops else ():
            env.pop(x, None)
    return env
