"""What precision-search trials share: device tensors an earlier run already computed.

A trial that changes block k computes the same device tensors as the plan it starts from up to
block k's input (and, past that, whatever does not depend on block k: the descriptor head when
only the detector head changed). Which those are is decided from the calls themselves, never
assumed from the blocks: every call gets a content key, a digest of what determines its result
(the op, its arguments as the plan writes them, its output format and shape, the bytes and names
of its weights) and of its inputs' keys; a device input's key is a digest of its bytes, a
constant's of its weight's. Two calls with the same key compute the same result, whatever their
tensors are called, and wherever the lowering or the memory planner put them; a call whose
arguments the planner rewrote for this trial (its memory configuration) gets a new key and runs.

:class:`ReusingDevice` runs a trial's program on the emulator taking every call whose key is kept
(runtime/emu.py ``EmuProgram.resume``), and can record what it ran for later trials.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from spc.plan.program import Program, TtOp

if TYPE_CHECKING:
    from spc.runtime.emu import EmuProgram

# the fields of a call that are names, not what it computes (its inputs enter as their keys)
_NAMES = ("inputs", "output", "extra_outputs", "source", "block")


def _digest(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.digest()


def array_digest(a: np.ndarray) -> bytes:
    a = np.ascontiguousarray(a)
    return _digest(str(a.dtype).encode(), repr(a.shape).encode(), a.tobytes())


class ProgramKeys:
    """The content keys of one program's device calls (see the module docstring)."""

    def __init__(self, program: Program, weights: Mapping[str, np.ndarray]) -> None:
        self.ops = program.device_ops
        digests: dict[str, bytes] = {}

        def weight(name: str) -> bytes:
            if name not in digests:
                digests[name] = array_digest(weights[name]) if name in weights else b"missing"
            return digests[name]

        self.signatures = [self._signature(op, weight) for op in self.ops]
        self.constants = {c.name: _digest(b"constant", weight(c.weight), repr(c.device_shape).encode(),
                                          c.dtype.value.encode()) for c in program.constants}
        # the whole device program, names and all: two programs with this digest are the same
        self.digest = _digest(*self.signatures, *(n.encode() + k for n, k in sorted(self.constants.items())),
                              json.dumps([[op.inputs, op.results] for op in self.ops]).encode())
        self.weight = weight  # a plan tensor's digest, by name

    @staticmethod
    def _signature(op: TtOp, weight: Any) -> bytes:
        d = {k: v for k, v in op.to_json().items() if k not in _NAMES}
        d["weights"] = {k: weight(name).hex() for k, name in op.weights.items()}
        d["results"] = len(op.results)
        return _digest(json.dumps(d, sort_keys=True, default=repr).encode())

    def of(self, inputs: Mapping[str, np.ndarray]) -> list[bytes]:
        """Each call's key on these device inputs."""
        names = {n: _digest(b"input", n.encode(), array_digest(np.asarray(v, np.float32)))
                 for n, v in inputs.items()}
        names.update(self.constants)
        keys = []
        for op, sig in zip(self.ops, self.signatures):
            # an input no call made and no constant is: a key that matches nothing (the call runs)
            key = _digest(sig, *(names.get(n, _digest(b"unknown", n.encode())) for n in op.inputs))
            for j, name in enumerate(op.results):
                names[name] = _digest(key, j.to_bytes(2, "little"))
            keys.append(key)
        return keys


class ReusingDevice:
    """A prepared program (runtime/backend.py) over an :class:`EmuProgram` that takes the result
    of every call whose key is in ``shared`` from there instead of computing it. With ``record``,
    every call's result (computed or taken) is put there by key, for later trials to share."""

    def __init__(self, emu: EmuProgram, keys: ProgramKeys, shared: Mapping[bytes, Any],
                 record: dict[bytes, Any] | None = None) -> None:
        self.emu, self.keys, self.shared, self.record = emu, keys, shared, record
        self.calls_run = 0  # how many calls were computed, over every run
        self.calls = 0  # how many a plain run of each frame once would have computed
        self.emulating_s = 0.0  # (not `seconds`: a Runner reads that as its device phases)
        # the last run's keys and results: a re-read of the same frame (an overflow) runs nothing
        self._keys: list[bytes] = []
        self._last: dict[bytes, Any] = {}

    def run(self, inputs: dict[str, np.ndarray], read: list[str]) -> dict[str, np.ndarray]:
        keys = self.keys.of(inputs)
        done: dict[int, Any] = {}
        for i, k in enumerate(keys):
            if k in self.shared:
                done[i] = self.shared[k]
            elif k in self._last:
                done[i] = self._last[k]
        kept: list[Any] = []
        t0 = time.perf_counter()
        env = self.emu.resume(self.emu.environment(inputs), done, kept)
        self.emulating_s += time.perf_counter() - t0
        if keys != self._keys:  # not a re-read of the last frame
            self.calls += len(keys)
        self.calls_run += len(keys) - len(done)
        self._keys, self._last = keys, dict(zip(keys, kept))
        if self.record is not None:
            self.record.update(self._last)
        # copies: what is read goes to the host stage, and the kept tensors must stay as they are
        return {name: env[name].numpy().copy() for name in read}

    def close(self) -> None:
        self._keys, self._last = [], {}
        self.emu.close()
