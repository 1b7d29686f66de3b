"""Frames per second end to end: the device time of a run plus ttnn's host-side cost per call.

The hand port's end-to-end rate on a p150 (40.7 fps at 480x640 against a 2.81 ms forward) is set
by ttnn's per-call host costs, which do not depend on the payload (measured by the hand port:
shared/reference/seed-tt-superpoint-model-card.md, "D2H is dominated by ttnn's per-call
from_device dispatch cost", "copy_host_to_device_tensor carries a ~10.7 ms-per-call fixed Python
cost"). A run of a plan makes one upload per device input and one read-back per device output,
in turn on one command queue (the hand port found the queue serialises them: overlapping did not
help), so a batch of B images pays those calls once:

    run = device time of the run + uploads x H2D_CALL_S + read-backs x D2H_CALL_S
    fps = B / run

The device time is the memory model's prediction (memory/cost.py), an estimate.
"""

from __future__ import annotations

from msgspec import Struct

from spc.records import asdict

H2D_CALL_S = 10.7e-3  # ttnn.copy_host_to_device_tensor, per call (hand port, p150)
D2H_CALL_S = 7.5e-3  # ttnn.from_device, per call: 6-9 ms measured (hand port, p150), the middle taken


class Throughput(Struct, frozen=True):
    batch: int  # images per run
    device_s: float  # predicted device time of one run
    uploads: int  # host-to-device calls per run
    readbacks: int  # device-to-host calls per run

    @property
    def host_s(self) -> float:
        return self.uploads * H2D_CALL_S + self.readbacks * D2H_CALL_S

    @property
    def run_s(self) -> float:
        return self.device_s + self.host_s

    @property
    def fps(self) -> float:
        return self.batch / self.run_s if self.run_s > 0 else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "host_s": self.host_s, "run_s": self.run_s, "fps": self.fps}
