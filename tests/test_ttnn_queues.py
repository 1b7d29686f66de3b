"""The traced frame loop's command queues and events (runtime/ttnn_backend.py), against a fake of
ttnn's queue API that records every call: a card is not here, and the mock p150 cannot run
traces or events (tests/test_ttnn_mock.py checks their spelling against ttnn's signatures)."""

from __future__ import annotations

from typing import Any

import numpy as np

from spc.plan.program import DeviceTensor, Program
from spc.runtime.ttnn_backend import TtnnProgram
from spc.ttnn.layout import Form


class _Tensor:
    def __init__(self, name: str, values: np.ndarray | None = None) -> None:
        self.name, self.values = name, values
        self.shape = [] if values is None else list(values.shape)
        self.dtype = "float32"

    def is_allocated(self) -> bool:
        return True

    def to_numpy(self) -> np.ndarray:
        assert self.values is not None
        return self.values


class _RecordingTtnn:
    """ttnn's queue, event, trace and transfer calls, recorded in order as (name, queue, what)."""

    float32, bfloat16, ROW_MAJOR_LAYOUT, DRAM_MEMORY_CONFIG = "float32", "bfloat16", "row_major", "dram"

    def __init__(self) -> None:
        self.log: list[tuple[str, Any, Any]] = []
        self.events = 0

    def QueueId(self, n: int) -> int:
        return n

    def Shape(self, dims: list[int]) -> list[int]:
        return list(dims)

    def Tensor(self, array: np.ndarray, **_: Any) -> _Tensor:
        return _Tensor("host", array)

    def allocate_tensor_on_device(self, **_: Any) -> _Tensor:
        self.log.append(("allocate", None, None))
        return _Tensor("input")

    def copy_host_to_device_tensor(self, host_tensor: _Tensor, device_tensor: _Tensor, cq_id: int) -> None:
        self.log.append(("upload", cq_id, float(host_tensor.values.reshape(-1)[0])))

    def record_event(self, mesh_device: Any, cq_id: int) -> str:
        self.events += 1
        event = f"e{self.events}"
        self.log.append(("record", cq_id, event))
        return event

    def wait_for_event(self, cq_id: int, mesh_event: str) -> None:
        self.log.append(("wait", cq_id, mesh_event))

    def execute_trace(self, device: Any, trace_id: int, cq_id: int, blocking: bool) -> None:
        self.log.append(("trace", cq_id, blocking))

    def to_layout(self, tensor: _Tensor, layout: str) -> _Tensor:
        return tensor

    def from_device(self, tensor: _Tensor) -> _Tensor:
        self.log.append(("read", 0, tensor.name))
        return _Tensor(tensor.name, np.zeros((1, 1, 2, 3), np.float32))


def _traced(fake: _RecordingTtnn) -> TtnnProgram:
    """A program whose trace is captured (its first frame ran), on the fake."""
    spec = DeviceTensor("image", [1, 1, 2, 2], [1, 1, 4, 1])
    out = DeviceTensor("readback", [2, 3], [1, 1, 2, 3], Form.PLAIN)
    p = TtnnProgram.__new__(TtnnProgram)
    p.ttnn, p.device, p.chips, p.traced = fake, object(), 1, True
    p.program = Program([], [], [], [spec], [], [out], [])
    p.inputs, p.kept, p.trace_id, p.replayed_for = {}, {"readback": _Tensor("readback")}, 1, None
    p.done_event = fake.record_event(p.device, 0)  # the capture's replay
    fake.log.clear()
    return p


def test_each_frame_uploads_on_queue_1_after_the_last_replay_read_its_input_and_replays_after_the_upload() -> None:
    fake = _RecordingTtnn()
    p = _traced(fake)
    frames = [np.full((1, 1, 2, 2), float(i), np.float32) for i in (1, 2)]
    for x in frames:
        got = p.run({"image": x}, ["readback"])
        assert got["readback"].shape == (1, 1, 2, 3)
    assert fake.log == [
        ("wait", 1, "e1"),  # queue 1 waits for the last replay (it reads the same input buffer)
        ("allocate", None, None), ("upload", 1, 1.0), ("record", 1, "e2"),
        ("wait", 0, "e2"),  # queue 0 replays only once the upload has landed
        ("trace", 0, False), ("record", 0, "e3"),
        ("read", 0, "readback"),  # one read-back, on queue 0: it ends with the replay
        ("wait", 1, "e3"), ("upload", 1, 2.0), ("record", 1, "e4"), ("wait", 0, "e4"),
        ("trace", 0, False), ("record", 0, "e5"), ("read", 0, "readback")]


def test_a_second_read_of_the_same_frame_replays_nothing() -> None:
    """An overflowing frame reads its dense tensors after its compact ones: same input, no upload."""
    fake = _RecordingTtnn()
    p = _traced(fake)
    x = np.ones((1, 1, 2, 2), np.float32)
    p.run({"image": x}, ["readback"])
    fake.log.clear()
    inputs = p.replayed_for
    p.run(inputs, ["readback"])
    assert fake.log == [("read", 0, "readback")]
