"""A disk that fills up or turns read-only mid-run (faults injected at the write, as no
unprivileged test can make a small filesystem): one line, the results before it kept whole, no
partial or temporary file, and an .h5 left as it was."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import h5py
import pytest

from spc import files as spc_files
from tests.conftest import one_line_error, spc


def _fail_on(monkeypatch: pytest.MonkeyPatch, nth: int, code: int) -> None:
    """os.fsync of spc.files (every atomic write syncs before its rename) fails from the nth call on."""
    real, calls = os.fsync, [0]

    def fsync(fd: int) -> None:
        calls[0] += 1
        if calls[0] >= nth:
            raise OSError(code, os.strerror(code))
        real(fd)

    monkeypatch.setattr(spc_files.os, "fsync", fsync)


@pytest.mark.parametrize(("code", "says"), [(errno.ENOSPC, "no space left"), (errno.EROFS, "read-only")],
                         ids=["disk-full", "read-only"])
def test_npz_run_stops_in_one_line_and_keeps_what_it_wrote(small_plan: Path, images: dict[str, Path],
                                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             code: int, says: str) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    for i, name in enumerate(("camera", "astronaut", "coffee", "camera")):
        shutil.copy(images[name], folder / f"{i}.png")
    _fail_on(monkeypatch, 3, code)
    status, _, err = spc("-q", "run", small_plan, folder, "-o", tmp_path / "out")
    one_line_error(status, err, contains=says)
    assert "stopped after 2 of 4 frame(s)" in err, err
    left = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert left == ["0.png.npz", "1.png.npz"], left  # whole files only: no .part, no third file
    import numpy as np

    assert "keypoints" in np.load(tmp_path / "out" / "1.png.npz").files


def test_h5_run_on_a_full_disk_leaves_the_file_as_it_was(small_plan: Path, images: dict[str, Path],
                                                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h5 = tmp_path / "f.h5"
    assert spc("run", small_plan, images["camera"], "--format", "h5", "-o", h5)[0] == 0
    before = h5.read_bytes()
    real = shutil.copyfile

    def full(src, dst, *a, **k):  # the merge's copy of the file runs out of space
        real(src, dst, *a, **k)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))

    monkeypatch.setattr(shutil, "copyfile", full)
    status, _, err = spc("-q", "run", small_plan, images["coffee"], "--format", "h5", "-o", h5)
    one_line_error(status, err, contains="no space left")
    assert h5.read_bytes() == before
    with h5py.File(h5) as f:
        assert list(f) == ["camera.png"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]
    monkeypatch.undo()  # space again: the next run merges what the journal kept
    assert spc("run", small_plan, images["astronaut"], "--format", "h5", "-o", h5)[0] == 0
    with h5py.File(h5) as f:
        assert sorted(f) == ["astronaut.png", "camera.png", "coffee.png"]
