"""The ``ttnn`` backends: the plan's device program executed by the real ttnn library.

* ``ttnn``: a Tenstorrent device (not validated here: no hardware; call by call, no trace yet);
* ``ttnn-mock``: a mock Blackhole p150 (runtime/ttnn_mock/harness.py): ttnn's host code validates
  every call, allocates L1 and sizes circular buffers; nothing executes, values come back zero.

Imports only numpy and ttnn (ttnn 0.81.1 exists for Python 3.10/3.12 only; see `make mock-env`).
Each program call is evaluated from its description (lowering/ttnn_calls.py); conv weights go up as
float32 host tensors and come back prepared from the first run (return_weights_and_bias), so
later runs reuse them, as the hand-written port does. The device is closed on every exit path.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from spc.errors import SpcError
from spc.lowering.program import Program, TtOp
from spc.lowering.ttnn_calls import ARCH, DEVICE, Attr, Call, Ref, Weight, describe
from spc.targets import L1_SMALL_BYTES


def ttnn_message(exc: BaseException) -> str:
    """ttnn's own error, on one line: TT_FATAL text up to its backtrace."""
    lines = []
    for line in str(exc).splitlines():
        if line.strip().startswith(("backtrace:", "--- ")):
            break
        if line.strip():
            lines.append(line.strip())
    return " | ".join(lines[:3]) or type(exc).__name__


class TtnnProgram:
    def __init__(self, program: Program, weights: dict[str, np.ndarray], mock: bool) -> None:
        if mock:
            from spc.runtime.ttnn_mock.harness import HarnessError, prepare

            try:
                os.environ.update(prepare())
            except HarnessError as exc:
                raise SpcError(f"mock p150: {exc}") from None
        try:
            import ttnn
        except ImportError:
            raise SpcError("ttnn is not installed for this Python; run `make mock-env` (Python 3.12)") from None
        self.ttnn = ttnn
        self.program = program
        self.weights = weights
        self.prepared: dict[str, tuple[Any, Any]] = {}
        self.device = ttnn.open_device(device_id=0, l1_small_size=L1_SMALL_BYTES, trace_region_size=0)
        try:
            self.calls = [(op, self._bind(op)) for op in program.device_ops]
        except Exception:
            self.close()
            raise

    # -- evaluating call descriptions (lowering/ttnn_calls.py) ----------------------------------
    def _bind(self, op: TtOp) -> Callable[[dict[str, Any]], Any]:
        spec = describe(op)

        def call(env: dict[str, Any]) -> Any:
            result = self._eval(spec, env, op.output)
            if op.op == "ttnn.conv2d":
                result, self.prepared[op.output] = result
            return result

        return call

    def _eval(self, x: Any, env: dict[str, Any], owner: str) -> Any:
        t = self.ttnn
        if isinstance(x, Ref):
            return env[x.name]
        if isinstance(x, Attr):
            value: Any = t
            for part in x.path.split(".")[1:]:
                value = getattr(value, part)
            return value
        if x is DEVICE:
            return self.device
        if x is ARCH:
            return self.device.arch()
        if isinstance(x, Weight):
            prepared = self.prepared.get(owner)
            if prepared is not None:
                return prepared[1 if x.bias else 0]
            array = self.weights[x.key].astype(np.float32)
            if x.bias:
                array = array.reshape(1, 1, 1, -1)
            return t.Tensor(array, data_type=t.float32, layout=t.ROW_MAJOR_LAYOUT)
        if isinstance(x, Call):
            fn = self._eval(Attr(x.fn), env, owner)
            return fn(*[self._eval(a, env, owner) for a in x.args],
                      **{k: self._eval(v, env, owner) for k, v in x.kwargs.items()})
        if isinstance(x, list):
            return [self._eval(v, env, owner) for v in x]
        return x

    # -- running ---------------------------------------------------------------------------------
    def run(self, inputs: dict[str, np.ndarray], read: list[str]) -> dict[str, np.ndarray]:
        t = self.ttnn
        env: dict[str, Any] = {}
        frees = self.program.frees(set(read))
        for spec in self.program.device_inputs:
            host = t.Tensor(np.ascontiguousarray(inputs[spec.name], dtype=np.float32).reshape(spec.device_shape),
                            data_type=t.bfloat16, layout=t.ROW_MAJOR_LAYOUT)
            env[spec.name] = t.to_device(host, self.device)
        for (op, call), dead in zip(self.calls, frees):
            try:
                result = call(env)
                if op.extra_outputs:  # ttnn.topk: values and indices
                    env.update(zip([op.output, *op.extra_outputs], result))
                else:
                    env[op.output] = result
                for name in dead:
                    self.release(env.pop(name), env)
            except SpcError:
                raise
            except Exception as exc:
                block = op.block or op.source
                raise SpcError(f"ttnn rejected {op.op} for block {block}: {ttnn_message(exc)}") from None
        return {name: self._read(env[name]) for name in read}

    def release(self, tensor: Any, live: dict[str, Any]) -> None:
        """Deallocate, unless a live tensor shares the buffer: ttnn returns its input from a
        conversion with nothing to do (to_layout to the same layout)."""
        if not tensor.is_allocated():
            return
        buffer = tensor.buffer_unique_id()
        if any(other.is_allocated() and other.buffer_unique_id() == buffer for other in live.values()):
            return
        self.ttnn.deallocate(tensor)

    def _read(self, tensor: Any) -> np.ndarray:
        t = self.ttnn
        host = t.from_device(t.to_layout(tensor, t.ROW_MAJOR_LAYOUT))
        # to_list, not to_numpy: with numpy 1.26 a bf16 to_numpy gives a 0-d object array
        return np.asarray(host.to_list(), dtype=np.float32).reshape([int(d) for d in host.shape])

    def close(self) -> None:
        device, self.device = getattr(self, "device", None), None
        if device is not None:
            self.ttnn.close_device(device)


class TtnnBackend:
    def __init__(self, mock: bool) -> None:
        self.mock = mock
        self.name = "ttnn-mock" if mock else "ttnn"

    def prepare(self, program: Program, weights: dict[str, np.ndarray]) -> TtnnProgram:
        return TtnnProgram(program, weights, self.mock)
