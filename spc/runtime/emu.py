"""The ``emu`` backend: the device stage on the CPU, with the device's numerics (emulator/device.py).

``prepare`` converts weights and binds every call once, the way a captured trace fixes a
device program; ``run`` only replays the bound calls.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from msgspec import Struct

from spc.emulator.device import (
    EMULATIONS,
    HOLDING_BF16,
    MASKS,
    MOVES_VALUES,
    OF_STORED,
    STORED_BY_EMULATION,
    TAKES_HELD_BF16,
    Emulation,
    prepare_weight,
)
from spc.emulator.numerics import round_storage
from spc.errors import SpcError
from spc.plan.program import Program, TtOp
from spc.ttnn.formats import DataFormat

Call = Callable[[list[torch.Tensor]], Any]
Store = Callable[[torch.Tensor, DataFormat], torch.Tensor]


class Emulations(Struct, frozen=True):
    """What an :class:`EmuProgram` computes with: each call's emulation (by call name) and a
    result's storage in a format. With ``shortcuts``, also what holds of stored values only, in
    place of some of ``calls``: OF_STORED's emulations and HOLDING_BF16's (emulator/device.py),
    and no storing where it cannot change a value; without, every call as ``calls`` has it."""

    calls: Mapping[str, Emulation]
    store: Store = round_storage
    shortcuts: bool = True


DEVICE = Emulations(EMULATIONS)


class _Bound(Struct):
    """A bound call: ``fn`` takes and returns float32 tensors (as callers outside see them);
    ``held``, which :meth:`EmuProgram.run` calls, the same values, some of them held in bf16
    (emulator/device.HOLDING_BF16)."""

    op: TtOp
    fn: Call
    held: Call


def _float32(result: Any) -> Any:
    """``result`` with every bf16-held tensor as float32 (the same values)."""
    if isinstance(result, tuple):
        return tuple(_float32(r) for r in result)
    return result.to(torch.float32) if result.dtype is torch.bfloat16 else result


def _given_float32(fn: Call) -> Call:
    """``fn`` given float32 copies of its bf16-held inputs: for the calls that do arithmetic."""
    def call(ins: list[torch.Tensor]) -> Any:
        return fn([t.to(torch.float32) if t.dtype is torch.bfloat16 else t for t in ins])

    return call


@functools.cache
def _keep_working_memory() -> None:
    """Serve large tensors from the heap and keep it. glibc maps every allocation over 32 MB
    afresh and unmaps it when freed, so each of a frame's large tensors faults its pages in again
    (a quarter of a frame at 480x640); onnxruntime keeps an arena for the same reason.
    Process-wide, once; the heap then holds the largest frame's working set. Not glibc: nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_mmap_max, m_trim_threshold = -4, -1  # malloc.h
        libc.mallopt(m_mmap_max, 0)  # no separate mappings: large blocks come from the heap
        libc.mallopt(m_trim_threshold, 1 << 30)  # and freed ones stay there for the next frame
    except (OSError, AttributeError):  # another C library
        return


def _stored(result: torch.Tensor | tuple[torch.Tensor, ...], fmt: DataFormat, store: Store = round_storage
            ) -> torch.Tensor | tuple[torch.Tensor, ...]:
    if isinstance(result, tuple):  # a call with several results (a multi-output kernel)
        return tuple(store(r, fmt) for r in result)
    return store(result, fmt)


def _stored_unless_nan(result: torch.Tensor, fmt: DataFormat) -> torch.Tensor:
    """A selection of stored values is stored already, except a NaN's bits, which torch's
    kernels may respell; a sum (one read) finds any NaN (and, harmlessly, inf - inf)."""
    return round_storage(result, fmt) if torch.isnan(result.sum()) else result


def _storage_is_identity(op: TtOp, stored_in: dict[str, DataFormat | None]) -> bool:
    """Whether storing ``op``'s result in ``op.dtype`` cannot change it: 0/1 masks (exact in bf16
    and fp32), or a selection among inputs already stored in that format."""
    if op.dtype is not DataFormat.BFLOAT16:
        return False  # fp32 storage costs nothing; block-float rows may share an exponent with a new value
    return op.op in MASKS or (op.op in MOVES_VALUES and all(stored_in.get(i) is op.dtype for i in op.inputs))


def _result_format(op: TtOp, stored_in: dict[str, DataFormat | None]) -> DataFormat | None:
    """The format ``op``'s results are stored in, if known."""
    if op.op not in STORED_BY_EMULATION:
        return op.dtype  # the program stores them so (_stored)
    if op.op == "ttnn.conv2d":
        return op.args.get("dtype")  # the conv model packs its result so
    formats = {stored_in.get(i) for i in op.inputs}
    if op.op in MOVES_VALUES and len(formats) == 1:
        return formats.pop()  # the inputs' values, moved
    return None  # a pad's fill, a topk's positions, ...


class EmuProgram:
    """The bound calls of ``program``, computed with ``emulations`` (default: the device's)."""

    def __init__(self, program: Program, weights: dict[str, np.ndarray], emulations: Emulations = DEVICE) -> None:
        torch.set_grad_enabled(False)
        _keep_working_memory()
        self.program = program
        self.calls: list[_Bound] = []
        store, shortcuts = emulations.store, emulations.shortcuts
        try:  # put on the device once, in their storage format, as the ttnn backends do
            self.constants = {c.name: store(torch.from_numpy(np.array(weights[c.weight], np.float32))
                                            .reshape(c.device_shape), c.dtype) for c in program.constants}
        except KeyError as exc:
            raise SpcError(f"plan is missing the constant {exc}") from None
        # the format each tensor's values are known to be stored in (round_storage leaves them as they
        # are): the device inputs as run() stores them, the constants, then each call's results
        stored_in: dict[str, DataFormat | None] = {t.name: program.input_format(t.name) for t in program.device_inputs}
        stored_in.update({c.name: c.dtype for c in program.constants})
        for op in program.device_ops:
            emulation = emulations.calls.get(op.op)
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
            elif not shortcuts or not _storage_is_identity(op, stored_in):
                fn = lambda ins, e=emulation, w=bound, a=op.args, d=op.dtype, s=store: _stored(e(ins, w, a), d, s)
            elif op.op in MASKS:
                fn = lambda ins, e=emulation, w=bound, a=op.args: e(ins, w, a)
            else:
                emulation = OF_STORED.get(op.op, emulation)
                fn = lambda ins, e=emulation, w=bound, a=op.args, d=op.dtype: _stored_unless_nan(e(ins, w, a), d)
            if not shortcuts:
                held = fn
            elif op.op in HOLDING_BF16:
                held = lambda ins, e=HOLDING_BF16[op.op], w=bound, a=op.args: e(ins, w, a)
            elif op.op in TAKES_HELD_BF16:
                held = fn  # (and returns bf16 where it is given bf16)
            else:
                held = _given_float32(fn)
            self.calls.append(_Bound(op, fn, held))
            stored_in.update(dict.fromkeys(op.results, _result_format(op, stored_in)))

    def run(self, inputs: dict[str, np.ndarray], read: list[str]) -> dict[str, np.ndarray]:
        env = {k: round_storage(torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)),
                                  self.program.input_format(k))
               for k, v in inputs.items()}
        env.update(self.constants)
        for i, call in enumerate(self.calls):
            op = call.op
            try:
                result = call.held([env[name] for name in op.inputs])
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
        return {name: _float32(env[name]).numpy() for name in read}

    # Resuming from kept results (the precision search, tuning/reuse.py): trials that change one
    # block compute the same tensors as an earlier run up to there, so those calls are not re-run.

    def environment(self, inputs: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        """The tensors a run starts from, as :meth:`run` makes them: the device inputs as stored
        (bf16) and the constants."""
        env = {k: round_storage(torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)), DataFormat.BFLOAT16)
               for k, v in inputs.items()}
        env.update(self.constants)
        return env

    def resume(self, env: dict[str, torch.Tensor], done: Mapping[int, Any],
               kept: list[Any] | None = None) -> dict[str, torch.Tensor]:
        """Run the calls on ``env`` (from :meth:`environment`) in order, taking call ``i``'s result
        from ``done[i]`` instead of computing it (the caller vouches it is what the call makes);
        every call's result, computed or given, is appended to ``kept`` if given. Returns ``env``."""
        for i, call in enumerate(self.calls):
            op = call.op
            if i in done:
                result = done[i]
            else:
                try:
                    result = call.fn([env[name] for name in op.inputs])
                except (RuntimeError, ValueError, IndexError, TypeError, KeyError, ZeroDivisionError,
                        OverflowError, MemoryError) as exc:
                    raise SpcError(f"call {i} ({op.op}, {op.block or op.source}) fails on the emulator: "
                                   f"{type(exc).__name__}: {str(exc)[:160]}; the plan is inconsistent, "
                                   "recompile it") from None
                if op.op != "spc.kernel":
                    results = result if isinstance(result, tuple) else (result,)
                    if any(r.numel() != math.prod(op.shape) for r in results):
                        raise SpcError(f"call {i} ({op.op}, {op.block or op.source}) makes "
                                       f"{[list(r.shape) for r in results]}, not the {op.shape} the plan "
                                       "declares; recompile it")
            op.bind(env, result)
            if kept is not None:
                kept.append(result)
        return env

    def close(self) -> None:
        self.calls.clear()


class EmuBackend:
    name = "emu"

    def prepare(self, program: Program, weights: dict[str, np.ndarray]) -> EmuProgram:
        return EmuProgram(program, weights)


class PreparedOnce:
    """While entered, every EmuProgram made prepares a weight (by its bytes) in a format once and
    shares the tensor with the programs made before it, as a device keeps the weights it was
    given. For the precision search (tuning/), whose trial programs differ in a block or two:
    preparing every other weight again was most of what a trial spent besides its calls. It
    stands in for this module's ``prepare_weight`` (what ``EmuProgram.__init__`` calls) meanwhile."""

    def __init__(self) -> None:
        self.cache: dict[tuple[bytes, str, tuple[int, ...], DataFormat], torch.Tensor] = {}
        self.prepared = 0  # how many were prepared (the rest were shared)

    def __enter__(self) -> PreparedOnce:
        global prepare_weight
        plain = self._plain = prepare_weight

        def once(array: np.ndarray, dtype: DataFormat) -> torch.Tensor:
            a = np.ascontiguousarray(array)
            key = (hashlib.blake2b(a.tobytes(), digest_size=20).digest(), a.dtype.str, a.shape, dtype)
            if key not in self.cache:
                self.cache[key] = plain(array, dtype)
                self.prepared += 1
            return self.cache[key]

        prepare_weight = once
        return self

    def __exit__(self, *exc: object) -> None:
        global prepare_weight
        prepare_weight = self._plain
