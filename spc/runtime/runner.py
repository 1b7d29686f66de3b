"""Run a plan on one input: host-pre -> device (a backend) -> host-post, timing each phase.

A plan for a target of N chips (ttnn/targets.py) takes N times its program's input per run: the
host stages run on each chip's part in turn, the device stage once for all chips (the backend
splits the inputs over the chips on axis 0 and stacks their results on it)."""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np
from msgspec import Struct, field

from spc.errors import SpcError
from spc.ir.ops.keypoints import KeypointOverflow
from spc.ir.types import DType
from spc.plan.io import Plan
from spc.plan.program import Program, TensorSpec
from spc.runtime.backend import get_backend
from spc.runtime.host import run_host


class RunResult(Struct):
    outputs: dict[str, np.ndarray]  # the model's outputs, by ONNX output name
    dense: dict[str, np.ndarray]  # device maps by role ("score_map", ...), in IR shape
    seconds: dict[str, float] = field(default_factory=dict)
    # a run over several chips: each chip's own result (its part of the input, as the plan's program
    # takes it); ``outputs`` and ``dense`` are then theirs stacked on axis 0, zero-padded where
    # their sizes differ (runtime/batches.py's image_of reads the chips' own)
    chips: list[RunResult] = field(default_factory=list)


def _stacked(arrays: list[np.ndarray]) -> np.ndarray:
    """The chips' arrays on axis 0; sizes that differ (keypoint counts) zero-padded to the largest."""
    if len(arrays) == 1:
        return arrays[0]
    if any(a.ndim == 0 for a in arrays):
        return np.stack(arrays)
    size = [max(a.shape[i] for a in arrays) for i in range(1, arrays[0].ndim)]
    return np.concatenate([np.pad(a, [(0, 0), *[(0, n - m) for n, m in zip(size, a.shape[1:])]]) for a in arrays])


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


def feeds_of(program: Program, x: np.ndarray | Mapping[str, np.ndarray], n: int = 1) -> dict[str, np.ndarray]:
    """Each plan input by name, of its declared shape (on N chips, N of them stacked on axis 0)
    and carried as its element type is on the host (a float image as float32)."""
    specs = program.inputs
    if not isinstance(x, Mapping):
        if len(specs) != 1:
            raise SpcError(f"the plan takes {len(specs)} inputs ({', '.join(s.name for s in specs)}); "
                           "give them by name")
        x = {specs[0].name: x}
    unknown = sorted(set(x) - {s.name for s in specs})
    missing = [s.name for s in specs if s.name not in x]
    if unknown or missing:
        raise SpcError(f"the plan's inputs are {', '.join(s.name for s in specs)}"
                       + (f"; missing {', '.join(missing)}" if missing else "")
                       + (f"; not inputs: {', '.join(unknown)}" if unknown else ""))
    out = {}
    for spec in specs:
        a = np.asarray(x[spec.name])
        shape = [int(d) for d in spec.shape]
        want = [shape[0] * n, *shape[1:]] if n > 1 else shape
        if list(a.shape) != want:
            chips = f" on each of its {n} chips: {want}, the chips' inputs stacked on axis 0" if n > 1 else ""
            raise SpcError(f"input shape {list(a.shape)} does not match the plan's {spec.name} {spec.shape}{chips}")
        out[spec.name] = a.astype(DType(spec.dtype).host_numpy)
    return out



class Runner:
    def __init__(self, plan: Plan, backend: str = "emu", trace: bool = True) -> None:
        self.plan = plan
        self.program = plan.program
        self.device = get_backend(backend, trace, plan.manifest.get("target")).prepare(plan.program, plan.weights)
        self.chips = plan.chips
        self.overflows = 0  # frames read densely because the compact read-back could not hold them

    def close(self) -> None:
        self.device.close()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, x: np.ndarray | Mapping[str, np.ndarray], dense: bool = False) -> RunResult:
        """The plan on ``x``: its input, or on N chips the N chips' inputs stacked on axis 0; a plan
        of several inputs takes them by name."""
        p = self.program
        feeds = self._feeds(x)
        spec = p.inputs[0]
        shape = [int(d) for d in spec.shape]
        n = self.chips
        seconds: dict[str, float] = {}
        t0 = time.perf_counter()
        part = shape[0] if n > 1 else 0
        envs: list[dict[str, np.ndarray]] = []
        for k in range(n):  # each chip's part through host-pre
            env = {name: a[k * part:(k + 1) * part] if n > 1 else a for name, a in feeds.items()}
            run_host(p.host_pre, env, self.plan.weights)
            envs.append(env)
        dev_in = {t.name: _stacked([t.layout.to_device(env[t.name]) for env in envs]) for t in p.device_inputs}
        t1 = time.perf_counter()
        read = [t.name for t in p.device_outputs]
        if dense:
            read += [t.name for t in p.probes.values() if t.name not in read]
        got = self._parts(self.device.run(dev_in, read))
        t2 = time.perf_counter()
        fallback: list[dict[str, np.ndarray]] = []
        for k, env in enumerate(envs):  # each chip's results through host-post
            for t in p.device_outputs:
                env[t.name] = t.to_host(got[k][t.name])
            try:
                run_host(p.host_post, env, self.plan.weights)
            except KeypointOverflow:
                # more keypoints than the compact read-back holds: this frame is read densely (the
                # device stage runs again, once for all chips; on hardware, a trace replay)
                self.overflows += 1
                if not fallback:
                    fallback = self._parts(self.device.run(dev_in, [t.name for t in p.fallback_outputs]))
                for t in p.fallback_outputs:
                    env[t.name] = t.to_host(fallback[k][t.name])
                run_host(p.fallback_post, env, self.plan.weights)
        t3 = time.perf_counter()
        seconds.update(host_pre=t1 - t0, device=t2 - t1, host_post=t3 - t2)
        seconds.update({f"device.{k}": v for k, v in getattr(self.device, "seconds", {}).items()})
        results = [self._result(env, got[k], dense, seconds) for k, env in enumerate(envs)]
        if n == 1:
            return results[0]
        return RunResult({o.name: _stacked([r.outputs[o.name] for r in results]) for o in p.outputs},
                         {role: _stacked([r.dense[role] for r in results]) for role in results[0].dense},
                         seconds, results)

    def _feeds(self, x: np.ndarray | Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return feeds_of(self.program, x, self.chips)

    def _parts(self, got: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
        """The device's results, the chips' stacked on axis 0, as each chip's own."""
        if self.chips == 1:
            return [got]
        split = {name: np.split(a, self.chips) for name, a in got.items()}
        return [{name: parts[k] for name, parts in split.items()} for k in range(self.chips)]

    def _result(self, env: dict[str, np.ndarray], got: dict[str, np.ndarray], dense: bool,
                seconds: dict[str, float]) -> RunResult:
        """One chip's outputs (or the one chip's), checked against the plan's declaration."""
        p = self.program
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
