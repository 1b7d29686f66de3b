"""The ``emu`` backend: the device stage on the CPU, with the device's numerics (emu_ops.py).

``prepare`` converts weights and binds every call once, the way a captured trace fixes a
device program; ``run`` only replays the bound calls.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from spc.errors import SpcError
from spc.plan.program import Program, TtOp
from spc.runtime.emu_ops import EMULATIONS, STORED_BY_EMULATION, prepare_weight
from spc.ttnn.formats import DataFormat
from spc.ttnn.numerics import round_storage


@dataclass
class _Bound:
    op: TtOp
    fn: Callable[[list[torch.Tensor]], torch.Tensor]


def _stored(result: torch.Tensor | tuple[torch.Tensor, ...],
            fmt: DataFormat) -> torch.Tensor | tuple[torch.Tensor, ...]:
    if isinstance(result, tuple):  # a call with several results (a multi-output kernel)
        return tuple(round_storage(r, fmt) for r in result)
    return round_storage(result, fmt)


class EmuProgram:
    def __init__(self, program: Program, weights: dict[str, np.ndarray]) -> None:
        torch.set_grad_enabled(False)
        self.program = program
        self.calls: list[_Bound] = []
        try:  # put on the device once, in their storage format, as the ttnn backends do
            self.constants = {c.name: round_storage(torch.from_numpy(np.array(weights[c.weight], np.float32))
                                                    .reshape(c.device_shape), c.dtype) for c in program.constants}
        except KeyError as exc:
            raise SpcError(f"plan is missing the constant {exc}") from None
        for op in program.device_ops:
            emulation = EMULATIONS.get(op.op)
            if emulation is None:
                raise SpcError(f"the emu backend cannot run {op.op} (from {op.source})")
            conv_config = op.args.get("conv_config")
            dtype = conv_config.weights_dtype if conv_config is not None else DataFormat.BFLOAT16
            try:
                bound = {k: prepare_weight(weights[name], dtype) for k, name in op.weights.items()}
            except KeyError as exc:
                raise SpcError(f"plan is missing weight {exc} for {op.source}") from None
            if op.op in STORED_BY_EMULATION:
                fn = lambda ins, e=emulation, w=bound, a=op.args: e(ins, w, a)
            else:
                fn = lambda ins, e=emulation, w=bound, a=op.args, d=op.dtype: _stored(e(ins, w, a), d)
            self.calls.append(_Bound(op, fn))

    def run(self, inputs: dict[str, np.ndarray], read: list[str]) -> dict[str, np.ndarray]:
        env = {k: round_storage(torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)),
                                  DataFormat.BFLOAT16)
               for k, v in inputs.items()}
        env.update(self.constants)
        for i, call in enumerate(self.calls):
            op = call.op
            try:
                result = call.fn([env[name] for name in op.inputs])
            except (RuntimeError, ValueError, IndexError, TypeError, KeyError, ZeroDivisionError, OverflowError,
                    MemoryError) as exc:
                # a validated plan whose calls still disagree (plan/verify.py checks what it can)
                raise SpcError(f"call {i} ({op.op}, {op.block or op.source}) fails on the emulator: "
                               f"{type(exc).__name__}: {str(exc)[:160]}; the plan is inconsistent, recompile it") \
                    from None
            if op.op != "spc.kernel":
                results = result if isinstance(result, tuple) else (result,)
                want = math.prod(op.shape)
                if any(r.numel() != want for r in results):
                    raise SpcError(f"call {i} ({op.op}, {op.block or op.source}) makes "
                                   f"{[list(r.shape) for r in results]}, not the {op.shape} the plan declares; "
                                   "recompile it")
            op.bind(env, result)
        return {name: env[name].numpy() for name in read}

    def close(self) -> None:
        self.calls.clear()


class EmuBackend:
    name = "emu"

    def prepare(self, program: Program, weights: dict[str, np.ndarray]) -> EmuProgram:
        return EmuProgram(program, weights)
