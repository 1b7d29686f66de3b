"""The ``ttnn`` backends: the plan's device program executed by the real ttnn library.

* ``ttnn``: a Tenstorrent device (not validated here: no hardware). By default the program is
  captured as a trace after a warm-up run; per frame the input is written on command queue 1
  while queue 0 replays the trace, ordered by events, and only the plan's outputs are read;
* ``ttnn-mock``: a mock Blackhole p150, or a mock cluster of several for a multi-chip target
  (runtime/ttnn_mock/harness.py: CLUSTERS): ttnn's host code validates every call, allocates L1
  and sizes circular buffers; nothing executes, values come back zero.
  Trace capture and events crash in mock mode, so it runs call by call (``--no-trace`` on a device).

Both open the same device, a mesh with two command queues (1x1 for one chip), and write each frame
into persistent input tensors. On a target of N chips (ttnn/targets.py: ``chips``, ``mesh``) the
program runs data-parallel: the mesh is the target's, constants and conv weights are on every chip
(replicated), the frame's inputs are the N chips' inputs stacked on axis 0 and split over the chips
on that axis (``shard_tensor_to_mesh_mapper(mesh, 0)``), every call runs once on the mesh, and each
result comes back as the chips' results stacked on axis 0 (``get_device_tensors``, in the mesh's
order, which is the mapper's). Imports only numpy and ttnn (ttnn 0.81.1 exists for Python 3.10/3.12
only; see `make mock-env`). Each program call is evaluated from its description
(ttnn/calls); conv weights go up as float32 host tensors and come back prepared from
the first run (return_weights_and_bias), so later runs reuse them, as the hand-written port does.
The device is closed on every exit path. The calls the runtime itself makes are listed in
RUNTIME_CALLS, which runtime/ttnn_signatures.py checks against the installed ttnn.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from spc.errors import SpcError
from spc.plan.program import Program, TtOp
from spc.ttnn.calls import Weight, describe
from spc.ttnn.calls.definition import attribute, evaluate, markers
from spc.ttnn.formats import DataFormat
from spc.ttnn.targets import L1_SMALL_BYTES, Target, get_target

TRACE_REGION_BYTES = 64 << 20  # DRAM for the captured commands; the program has about 130 calls

# ttnn entry points the runtime calls besides the program's, with the keywords it passes: the mock
# cannot run trace capture or events (both crash there), so their spelling is checked instead
RUNTIME_CALLS: dict[str, tuple[str, ...]] = {
    "open_mesh_device": ("mesh_shape", "l1_small_size", "trace_region_size", "num_command_queues"),
    "allocate_tensor_on_device": ("shape", "dtype", "layout", "mesh_device", "memory_config"),
    "to_device": ("tensor", "device", "memory_config"),
    "replicate_tensor_to_mesh_mapper": ("mesh_device",),
    "shard_tensor_to_mesh_mapper": ("mesh_device", "dim"),
    "get_device_tensors": ("tensor",),
    "to_dtype": ("tensor", "dtype"),
    "to_layout": ("tensor", "layout"),
    "copy_host_to_device_tensor": ("host_tensor", "device_tensor", "cq_id"),
    "record_event": ("mesh_device", "cq_id"),
    "wait_for_event": ("cq_id", "mesh_event"),
    "begin_trace_capture": ("mesh_device", "cq_id"),
    "end_trace_capture": ("mesh_device", "trace_id", "cq_id"),
    "execute_trace": ("mesh_device", "trace_id", "cq_id", "blocking"),
    "release_trace": ("mesh_device", "trace_id"),
    "close_mesh_device": ("mesh_device",),
}


def ttnn_message(exc: BaseException) -> str:
    """ttnn's own error, on one line: TT_FATAL text up to its backtrace."""
    lines = []
    for line in str(exc).splitlines():
        if line.strip().startswith(("backtrace:", "--- ")):
            break
        if line.strip():
            lines.append(line.strip())
    return " | ".join(lines[:3]) or type(exc).__name__


# where Tenstorrent's kernel driver puts its device nodes (tt-kmd)
DEVICE_NODES = "/dev/tenstorrent"
# the mock cluster this process has opened (runtime/ttnn_mock/harness.py CLUSTERS): tt-metal reads
# its descriptor once per process
_MOCK_CLUSTER: str | None = None


class TtnnProgram:
    def __init__(self, program: Program, weights: dict[str, np.ndarray], mock: bool, trace: bool = False,
                 target: str | None = None) -> None:
        chip = get_target(target) if target is not None else None
        self.chips = chip.chips if chip is not None else 1  # each runs the program on its own inputs
        mesh = chip.mesh if chip is not None else (1, 1)
        if mock:
            # the mock's harness (~10 ms, and importlib.metadata's ~15): only --backend ttnn-mock
            from spc.runtime.ttnn_mock.harness import HarnessError, cluster_of, prepare

            global _MOCK_CLUSTER
            if _MOCK_CLUSTER not in (None, cluster_of(target)):  # tt-metal reads the descriptor once
                raise SpcError(f"this process has opened the mock {_MOCK_CLUSTER}, and a process opens one mock "
                               f"cluster only: run the plan for {target} in another process")
            try:
                os.environ.update(prepare(cluster=cluster_of(target)))
            except HarnessError as exc:
                raise SpcError(f"mock {cluster_of(target)}: {exc}") from None
            _MOCK_CLUSTER = cluster_of(target)
        elif not os.path.isdir(DEVICE_NODES):  # before ttnn, which would log and then fail in C++
            raise SpcError(f"no Tenstorrent device here ({DEVICE_NODES} is absent): use --backend emu (the CPU, "
                           "device numerics) or --backend ttnn-mock (ttnn's checks on a mock p150)")
        try:
            import ttnn  # only in the ttnn environment (~250 ms); after the mock's paths are set
        except ImportError:
            raise SpcError("ttnn is not installed for this Python; run `make mock-env` (Python 3.12)") from None
        self.ttnn = ttnn
        self.program = program
        self.weights = weights
        self.prepared: dict[str, tuple[Any, Any]] = {}
        self.traced = trace
        self.kernel_note_given = False
        self.trace_id: Any = None
        self.kept: dict[str, Any] = {}  # the traced program's outputs, rewritten by every replay
        self.replayed_for: Any = None  # the inputs of the last replay (the runner may read twice)
        self.done_event: Any = None
        self.seconds: dict[str, float] = {}  # the last frame's phases
        self.inputs: dict[str, Any] = {}
        self.device = self.call("open_mesh_device", mesh_shape=ttnn.MeshShape(*mesh), l1_small_size=L1_SMALL_BYTES,
                                trace_region_size=TRACE_REGION_BYTES if trace else 0, num_command_queues=2)
        try:
            if chip is not None:
                self._check_arch(chip, f"mock {cluster_of(target)}" if mock else "the device")
                if self.device.get_num_devices() != chip.chips:
                    raise SpcError(f"the plan is for {chip.name}, {chip.chips} chips, and the mesh opened has "
                                   f"{self.device.get_num_devices()}")
            self.constants = {c.name: self._constant(c.weight, c.device_shape, c.dtype) for c in program.constants}
            self.calls = [(op, self._bind(op)) for op in program.device_ops]
        except Exception:
            self.close()
            raise

    def _mapper(self, replicate: bool) -> dict[str, Any]:
        """A host tensor's placement on a mesh of several chips: the same tensor on every chip, or
        its axis 0 split over them in the mesh's order (none on one chip)."""
        if self.chips == 1:
            return {}
        if replicate:
            return {"mesh_mapper": self.call("replicate_tensor_to_mesh_mapper", mesh_device=self.device)}
        return {"mesh_mapper": self.call("shard_tensor_to_mesh_mapper", mesh_device=self.device, dim=0)}

    def _check_arch(self, target: Target, device: str) -> None:
        """A plan's memory configurations and grid are the target's: another chip is refused."""
        arch = getattr(self.device.arch(), "name", str(self.device.arch())).lower()
        if arch != target.arch:
            raise SpcError(f"the plan is for {target.name} ({target.arch}), and {device} is a {arch}; "
                           "recompile it with the --target of this device")

    def _constant(self, key: str, shape: list[int], dtype: DataFormat) -> Any:
        """A program constant on the device, in tiles, in DRAM: put there once, before any frame."""
        t = self.ttnn
        try:
            array = self.weights[key]
        except KeyError:
            raise SpcError(f"plan is missing the constant {key}") from None
        host = t.Tensor(np.ascontiguousarray(array, dtype=np.float32).reshape(shape), data_type=getattr(t, dtype.value),
                        layout=t.ROW_MAJOR_LAYOUT, **self._mapper(replicate=True))
        dev = self.call("to_device", tensor=host, device=self.device, memory_config=t.DRAM_MEMORY_CONFIG)
        return self.call("to_layout", tensor=dev, layout=t.TILE_LAYOUT)

    # -- evaluating call descriptions (ttnn/calls) ------------------------------------
    def _bind(self, op: TtOp) -> Callable[[dict[str, Any]], Any]:
        if op.op == "spc.kernel":
            return self._bind_kernel(op)
        spec = describe(op)

        def call(env: dict[str, Any]) -> Any:
            result = self._eval(spec, env, op.output)
            if op.op == "ttnn.conv2d":
                result, self.prepared[op.output] = result
            return result

        return call

    def _bind_kernel(self, op: TtOp) -> Callable[[dict[str, Any]], Any]:
        """A fused kernel runs as the stock calls it replaces: TT-Lang kernels are not wired to
        ttnn tensors here (kernels/ says how far they are validated). Said once per program."""
        if not self.kernel_note_given:
            self.kernel_note_given = True
            print("spc: note: kernels run as their composed ttnn calls (TT-Lang kernels are validated in "
                  "tt-lang-sim only)", file=sys.stderr)
        steps = op.stock_calls()
        calls = [(step, self._bind(step)) for step in steps]

        def run(env: dict[str, Any]) -> Any:
            local = dict(env)
            for step, call in calls:
                local[step.output] = call(local)
            kept = {name: local[name] for name in op.results}
            for step, _ in calls:
                if step.output not in kept:
                    self.release(local.pop(step.output), kept)
            return tuple(kept.values()) if op.extra_outputs else kept[op.output]

        return run

    def _eval(self, x: Any, env: dict[str, Any], owner: str) -> Any:
        t = self.ttnn

        def weight(m: Weight) -> Any:
            prepared = self.prepared.get(owner)
            if prepared is not None:
                return prepared[1 if m.bias else 0]
            array = self.weights[m.key].astype(np.float32)
            if m.bias:
                array = array.reshape(1, 1, 1, -1)
            return t.Tensor(array, data_type=t.float32, layout=t.ROW_MAJOR_LAYOUT)

        leaf = markers(t, env, self.device, lambda: self.device.arch(), weight)
        return evaluate(x, leaf, lambda fn, args, kwargs: attribute(t, fn)(*args, **kwargs))

    # -- running ---------------------------------------------------------------------------------
    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """A runtime-level ttnn call, with keywords from RUNTIME_CALLS only."""
        assert set(kwargs) <= set(RUNTIME_CALLS[name]), (name, kwargs)
        return getattr(self.ttnn, name)(*args, **kwargs)

    def write(self, inputs: dict[str, np.ndarray], queue: int) -> None:
        """The frame's inputs into the persistent device inputs, on command queue ``queue``; on N
        chips each input is the chips' own stacked on axis 0, and chip k gets the k-th of N parts."""
        t = self.ttnn
        for spec in self.program.device_inputs:
            shape = [spec.device_shape[0] * self.chips, *spec.device_shape[1:]]
            fmt = getattr(t, self.program.input_format(spec.name).value)  # ttnn.bfloat16, ttnn.float32
            host = t.Tensor(np.ascontiguousarray(inputs[spec.name], dtype=np.float32).reshape(shape),
                            data_type=fmt, layout=t.ROW_MAJOR_LAYOUT, **self._mapper(replicate=False))
            if spec.name not in self.inputs:  # persistent: a trace reads its input from a fixed buffer
                self.inputs[spec.name] = self.call("allocate_tensor_on_device", shape=t.Shape(spec.device_shape),
                                                   dtype=fmt, layout=t.ROW_MAJOR_LAYOUT,
                                                   mesh_device=self.device, memory_config=t.DRAM_MEMORY_CONFIG)
            self.call("copy_host_to_device_tensor", host_tensor=host, device_tensor=self.inputs[spec.name],
                      cq_id=t.QueueId(queue))

    def execute(self, keep: set[str],
                watch: Callable[[TtOp], AbstractContextManager[Any]] | None = None) -> dict[str, Any]:
        """Every program call on queue 0, tensors freed after their last use; returns ``keep``.
        ``watch(op)`` is entered around each call (scripts/l1_agreement.py measures there)."""
        env: dict[str, Any] = {**self.inputs, **self.constants}
        for (op, call), dead in zip(self.calls, self.program.frees(keep | set(self.inputs))):
            try:
                with watch(op) if watch else contextlib.nullcontext():
                    op.bind(env, call(env))
                for name in dead:
                    self.release(env.pop(name), env)
            except SpcError:
                raise
            except Exception as exc:
                block = op.block or op.source
                raise SpcError(f"ttnn rejected {op.op} for block {block}: {ttnn_message(exc)}") from None
        return {name: env[name] for name in keep}

    def run(self, inputs: dict[str, np.ndarray], read: list[str]) -> dict[str, np.ndarray]:
        t0 = time.perf_counter()
        if not self.traced:
            self.write(inputs, 0)
            t1 = time.perf_counter()
            out = self.execute(set(read))
            t2 = time.perf_counter()
            got = {name: self._read(out[name]) for name in read}
            for tensor in out.values():
                self.release(tensor, {})
            self.seconds = {"h2d": t1 - t0, "calls": t2 - t1, "d2h": time.perf_counter() - t2}
            return got
        t = self.ttnn
        t1 = t0
        if self.trace_id is None:
            self._capture(inputs)
            t1 = time.perf_counter()
        elif inputs is not self.replayed_for:  # a second read of the same frame (overflow) replays nothing
            self.call("wait_for_event", cq_id=t.QueueId(1), mesh_event=self.done_event)  # last replay read its input
            self.write(inputs, 1)
            written = self.call("record_event", mesh_device=self.device, cq_id=t.QueueId(1))
            t1 = time.perf_counter()
            self.call("wait_for_event", cq_id=t.QueueId(0), mesh_event=written)
            self._replay()
        self.replayed_for = inputs
        missing = [name for name in read if name not in self.kept]
        if missing:
            raise SpcError(f"the captured trace does not keep {missing}; run with --no-trace")
        got = {name: self._read(self.kept[name]) for name in read}  # blocks on queue 0 until the replay ends
        self.seconds = {"h2d": t1 - t0, "replay+d2h": time.perf_counter() - t1}
        return got

    def replay_seconds(self, frames: int) -> float:
        """The traced forward alone: the input already on the device, replays back to back."""
        t = self.ttnn
        if self.trace_id is None:
            raise SpcError("no trace captured yet: run a frame first (and not with --no-trace)")
        t0 = time.perf_counter()
        for _ in range(frames):
            self.call("execute_trace", self.device, self.trace_id, cq_id=t.QueueId(0), blocking=False)
        self.call("execute_trace", self.device, self.trace_id, cq_id=t.QueueId(0), blocking=True)
        self.done_event = self.call("record_event", mesh_device=self.device, cq_id=t.QueueId(0))
        return (time.perf_counter() - t0) / (frames + 1)

    def _capture(self, inputs: dict[str, np.ndarray]) -> None:
        """Warm up (kernels compiled, conv weights prepared), then record the program as a trace;
        its outputs, and the dense tensors an overflowing frame reads instead, stay allocated."""
        t = self.ttnn
        keep = ({x.name for x in self.program.device_outputs} | {x.name for x in self.program.fallback_outputs}
                | {x.name for x in self.program.probes.values()})  # `spc run --dense` reads the maps too
        self.write(inputs, 0)
        for tensor in self.execute(keep).values():
            self.release(tensor, {})
        self.trace_id = self.call("begin_trace_capture", self.device, cq_id=t.QueueId(0))
        self.kept = self.execute(keep)
        self.call("end_trace_capture", self.device, self.trace_id, cq_id=t.QueueId(0))
        self._replay()

    def _replay(self) -> None:
        t = self.ttnn
        self.call("execute_trace", self.device, self.trace_id, cq_id=t.QueueId(0), blocking=False)
        self.done_event = self.call("record_event", mesh_device=self.device, cq_id=t.QueueId(0))

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
        """A device tensor as float32; on N chips, the chips' tensors stacked on axis 0."""
        t = self.ttnn
        host = t.from_device(t.to_layout(tensor, t.ROW_MAJOR_LAYOUT))
        if self.chips == 1:
            return self._numpy(host)
        return np.concatenate([self._numpy(part) for part in self.call("get_device_tensors", tensor=host)])

    def _numpy(self, host: Any) -> np.ndarray:
        t = self.ttnn
        shape = [int(d) for d in host.shape]
        if host.dtype != t.float32:
            try:  # on the host: 20x faster than to_list
                host = self.call("to_dtype", tensor=host, dtype=t.float32)
            except Exception:  # a type to_dtype does not convert: element by element
                return np.asarray(host.to_list(), dtype=np.float32).reshape(shape)
        # float32 first: with numpy 1.26 a bf16 to_numpy gives a 0-d object array
        return np.asarray(host.to_numpy(), dtype=np.float32).reshape(shape)

    def close(self) -> None:
        device, self.device = getattr(self, "device", None), None
        if device is None:
            return
        try:
            if self.trace_id is not None:
                self.call("release_trace", device, self.trace_id)
        finally:
            self.call("close_mesh_device", device)


class TtnnBackend:
    def __init__(self, mock: bool, trace: bool = True, target: str | None = None) -> None:
        self.mock = mock
        self.trace = trace and not mock  # trace capture crashes in mock mode
        self.name = "ttnn-mock" if mock else "ttnn"
        self.target = target

    def prepare(self, program: Program, weights: dict[str, np.ndarray]) -> TtnnProgram:
        return TtnnProgram(program, weights, self.mock, self.trace, self.target)
