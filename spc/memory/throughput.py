"""Frames per second end to end on a card, as the hand port's measured rows say a run goes.

The runtime's loop is the hand port's (runtime/ttnn_backend.py, tests/test_ttnn_queues.py): per
run, command queue 1 waits for the previous replay (it reads the same input buffer), uploads the
run's images and records an event; queue 0 waits for that event and replays the trace; the host
reads back (the read blocks until the replay ends), then post-processes::

    phase      what                                                    predicted from
    upload     the run's inputs to the device on CQ1                   UPLOAD_S per upload call
    device     the trace                                               the memory model x DEVICE_CALIBRATION
    read-back  each output's from_device, after the trace              D2H_CALL_S per call
    host post  the host's nodes after the device (keypoints ...)       HOST_POST_S per image

    run = max(upload, device) + read-backs + host post;  fps = B / run

The hand port measured that loop at 24.55 ms a frame where its phases one after another would take
at least 36 (10.7 + 11.68 + 2 x 6 + 1.8): the upload's host cost overlaps the device's work, and
the model takes it so, its constants fitted on that row (docs/end-to-end.md, which also gives the
prediction of the serial reading). ttnn's host costs are per call, not per byte: what a run
reads and uploads in one call each costs one call.
"""

from __future__ import annotations

from msgspec import Struct

from spc.plan.io import Plan, images_per_chip
from spc.records import asdict

# the memory model's device times against the hand port's measured forward on a p150, the same
# configuration compiled by spc: 2.81 ms measured where the model said 0.79 ms
# (scripts/calibrate.py). Every device time spc predicts is the model's times this; fitted on
# convolutions and pools, the rest of a program is scaled alike until a card measures spc's plans
DEVICE_CALIBRATION = 3.58
# the hand port's end-to-end "compute phase": the upload of the pre-cast bf16 input on CQ1 and the
# trace's launch, 8.4 ms per frame while the previous trace runs (alone, without a trace beside
# it, copy_host_to_device_tensor took 10.7 ms: H2D_ALONE_S)
UPLOAD_S = 8.4e-3
H2D_ALONE_S = 10.7e-3
# from_device per call: the hand port's read-back phase, 14.3 ms for two calls, less the 3.3 ms it
# waited for its trace (11.68 ms of device work begun 8.4 ms before): 5.5 ms a call (its note says
# 6-9 ms a call, waits included)
D2H_CALL_S = (14.3e-3 - (11.68e-3 - UPLOAD_S)) / 2
# spc's host post-processing per image, measured on the CPU of this project's machines
# (`scripts/timings.py`: 0.7 ms, the packed read-back taken apart included); the hand port's took 1.8 ms
HOST_POST_S = 0.7e-3


def device_seconds(model_s: float) -> float:
    """A device time as spc predicts it: the memory model's ``model_s``, calibrated."""
    return model_s * DEVICE_CALIBRATION


class Throughput(Struct, frozen=True):
    """One chip's runs (each chip of a mesh runs its own alike)."""

    batch: int  # images per run
    device_s: float  # predicted device time of one run (calibrated)
    uploads: int  # host-to-device calls per run
    readbacks: int  # device-to-host calls per run

    @classmethod
    def of(cls, plan: Plan, device_s: float | None = None) -> Throughput:
        """The plan's runs; ``device_s`` in place of its manifest's predicted (calibrated) device time."""
        p = plan.program
        if device_s is None:
            device_s = float(plan.manifest.get("predicted_device_ms", 0.0)) / 1e3
        return cls(images_per_chip(p), device_s, len(p.device_inputs), len(p.device_outputs))

    @property
    def upload_s(self) -> float:
        return self.uploads * UPLOAD_S

    @property
    def readback_s(self) -> float:
        return self.readbacks * D2H_CALL_S

    @property
    def host_post_s(self) -> float:
        return self.batch * HOST_POST_S

    @property
    def overlap_s(self) -> float:
        """How much of the upload the previous run's trace hides (or the other way round)."""
        return min(self.upload_s, self.device_s)

    @property
    def host_s(self) -> float:
        return self.upload_s + self.readback_s + self.host_post_s

    @property
    def run_s(self) -> float:
        return max(self.upload_s, self.device_s) + self.readback_s + self.host_post_s

    @property
    def fps(self) -> float:
        return self.batch / self.run_s if self.run_s > 0 else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "upload_s": self.upload_s, "readback_s": self.readback_s,
                "host_post_s": self.host_post_s, "overlap_s": self.overlap_s, "host_s": self.host_s,
                "run_s": self.run_s, "fps": self.fps}
