"""Run a plan on one input: host-pre -> device (a backend) -> host-post, timing each phase."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from spc.errors import SpcError
from spc.ir.ops.keypoints import KeypointOverflow
from spc.ir.types import DType
from spc.plan.io import Plan
from spc.plan.program import DeviceTensor, TensorSpec
from spc.runtime.backend import get_backend
from spc.runtime.host import run_host


@dataclass
class RunResult:
    outputs: dict[str, np.ndarray]  # the model's outputs, by ONNX output name
    dense: dict[str, np.ndarray]  # device maps by role ("score_map", ...), in IR shape
    seconds: dict[str, float] = field(default_factory=dict)


def _host_value(t: DeviceTensor, y: np.ndarray) -> np.ndarray:
    """A device result as the IR value it holds: its shape, and its element type (0/1 -> bool)."""
    x = t.layout.from_device(y, t.shape)
    dtype = DType(t.dtype)
    if dtype is DType.BOOL:
        return x != 0
    return x.astype(np.float32 if dtype is DType.BF16 else dtype.numpy, copy=False)


def _check_output(spec: TensorSpec, value: np.ndarray) -> None:
    """A model output as the plan declares it (element type, rank, static sizes): a validated plan
    whose host stage makes something else is inconsistent, and its result is not handed on."""
    a = np.asarray(value)
    want = DType(spec.dtype).host_numpy
    if a.dtype != want or a.ndim != len(spec.shape) or any(
            isinstance(d, int) and d != n for d, n in zip(spec.shape, a.shape)):
        raise SpcError(f"output {spec.name}: made as {a.dtype}{list(a.shape)}, but the plan declares "
                       f"{spec.dtype}{list(spec.shape)} (as the ONNX model declares it, if it does: then the "
                       "model's declared output type is wrong; fix it, or declare the size dynamic, and recompile)")


class Runner:
    def __init__(self, plan: Plan, backend: str = "emu", trace: bool = True) -> None:
        self.plan = plan
        self.program = plan.program
        self.device = get_backend(backend, trace, plan.manifest.get("target")).prepare(plan.program, plan.weights)
        self.overflows = 0  # frames read densely because the compact read-back could not hold them

    def close(self) -> None:
        self.device.close()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, x: np.ndarray, dense: bool = False) -> RunResult:
        p = self.program
        spec = p.inputs[0]
        if list(x.shape) != [int(d) for d in spec.shape]:
            raise SpcError(f"input shape {list(x.shape)} does not match the plan's {spec.name} {spec.shape}")
        seconds: dict[str, float] = {}
        t0 = time.perf_counter()
        env: dict[str, np.ndarray] = {spec.name: x.astype(np.float32)}
        run_host(p.host_pre, env, self.plan.weights)
        dev_in = {t.name: t.layout.to_device(env[t.name]) for t in p.device_inputs}
        t1 = time.perf_counter()
        read = [t.name for t in p.device_outputs]
        if dense:
            read += [t.name for t in p.probes.values() if t.name not in read]
        got = self.device.run(dev_in, read)
        t2 = time.perf_counter()
        for t in p.device_outputs:
            env[t.name] = _host_value(t, got[t.name])
        try:
            run_host(p.host_post, env, self.plan.weights)
        except KeypointOverflow:
            # more keypoints than the compact read-back holds: this frame is read densely (the
            # device stage runs again; on hardware, a trace replay)
            self.overflows += 1
            got.update(self.device.run(dev_in, [t.name for t in p.fallback_outputs]))
            for t in p.fallback_outputs:
                env[t.name] = _host_value(t, got[t.name])
            run_host(p.fallback_post, env, self.plan.weights)
        t3 = time.perf_counter()
        seconds.update(host_pre=t1 - t0, device=t2 - t1, host_post=t3 - t2)
        seconds.update({f"device.{k}": v for k, v in getattr(self.device, "seconds", {}).items()})
        missing = [o.name for o in p.outputs if o.name not in env]
        if missing:
            raise SpcError(f"output {missing[0]}: the host stage did not make it; the plan is inconsistent, "
                           "recompile it")
        outputs = {o.name: env[o.name] for o in p.outputs}
        for o in p.outputs:
            _check_output(o, outputs[o.name])
        maps = {}
        if dense:
            maps = {role: t.layout.from_device(got[t.name], t.shape) for role, t in p.probes.items()}
        return RunResult(outputs, maps, seconds)
