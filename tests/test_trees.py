"""`spc run` on real folders: trees walked whole (relative paths name the groups and files, what
is left out counted), --keep-going past bad files, --skip-existing after a kill
(scripts/kill_resume.py runs issue 27's 200 images and 10 kills; here 24 images and one kill)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from tests.conftest import spc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from kill_resume import groups, make_tree


def test_a_tree_with_bad_files_keeps_going_and_names_them(small_plan: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    corrupt = make_tree(tree, 24)
    code, _, err = spc("run", small_plan, tree, "--format", "h5", "-o", tmp_path / "f.h5", "--keep-going")
    assert code == 1 and err.strip().splitlines()[-1].startswith("spc: error: 3 of 24 input(s) failed"), err
    assert all(c in err for c in corrupt) and "not a readable image" in err, err
    assert "skipped 5 file(s) that are not images or .npy" in err and "1 hidden" in err and "a loop" in err, err
    got = groups(tmp_path / "f.h5")
    assert len(got) == 21 and all(g.startswith(("db/s", "query/s")) for g in got), sorted(got)
    # without --keep-going the first bad file stops the run before anything is written
    code, _, err = spc("run", small_plan, tree, "--format", "h5", "-o", tmp_path / "g.h5")
    assert code == 1 and len(err.strip().splitlines()) == 1 and not (tmp_path / "g.h5").exists(), err
    # npz: the tree's relative paths below -o, and a rerun with --skip-existing keeps them all
    code, _, err = spc("run", small_plan, tree, "-o", tmp_path / "npz", "--keep-going")
    npz = sorted(p.relative_to(tmp_path / "npz").as_posix() for p in (tmp_path / "npz").rglob("*.npz"))
    assert code == 1 and len(npz) == 21 and npz[0].startswith("db/s0/"), npz
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "npz").rglob("*.npz")}
    code, out, err = spc("run", small_plan, tree, "-o", tmp_path / "npz", "--keep-going", "--skip-existing")
    assert code == 1 and "21 input(s) kept" in out, out + err
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    code, _, err = spc("run", small_plan, tree, "-o", tmp_path / "npz", "--keep-going")
    assert code == 1 and "pass --overwrite" in err, err


def test_a_killed_h5_run_resumes_to_the_same_file(small_plan: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    make_tree(tree, 24, seed=1)

    def run(out: Path, *extra: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "spc.cli", "run", str(small_plan), str(tree), "--format", "h5",
                                 "-o", str(out), "--keep-going", *extra], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    ref = run(tmp_path / "ref.h5")
    ref.communicate()
    p = run(tmp_path / "out.h5", "--skip-existing")
    while p.poll() is None and not (tmp_path / ".out.h5.spc-journal").is_dir():  # killed mid-run
        time.sleep(0.02)
    time.sleep(0.2)
    p.send_signal(signal.SIGKILL)
    p.communicate()
    assert p.returncode == -signal.SIGKILL
    last = run(tmp_path / "out.h5", "--skip-existing")
    _, err = last.communicate()
    want, got = groups(tmp_path / "ref.h5"), groups(tmp_path / "out.h5")
    assert want.keys() == got.keys() and len(got) == 21, err
    for g in want:
        for d in want[g]:
            np.testing.assert_array_equal(got[g][d], want[g][d], err_msg=f"{g}/{d}")
    assert not (tmp_path / ".out.h5.spc-journal").exists()


def test_skip_existing_resumes_a_video_stopped_partway(small_plan: Path, images: dict[str, Path],
                                                       tmp_path: Path) -> None:
    import imageio.v3 as iio
    from PIL import Image

    rgb = np.asarray(Image.open(images["astronaut"]).convert("RGB").resize((160, 120)))
    clip = tmp_path / "v.mp4"
    iio.imwrite(clip, np.stack([rgb, rgb[:, ::-1], rgb[::-1], rgb[::-1, ::-1]]), plugin="FFMPEG", fps=4)
    out = tmp_path / "out"
    assert spc("run", small_plan, clip, "-o", out)[0] == 0
    frames = sorted(out.glob("v.mp4.frame_*.npz"))
    assert len(frames) == 4
    kept = {p: p.stat().st_mtime_ns for p in frames[:2]}
    for p in frames[2:]:
        p.unlink()  # as a stop after frame 2 leaves it
    code, _, err = spc("run", small_plan, clip, "-o", out, "--skip-existing")
    assert code == 0, err
    assert sorted(out.glob("v.mp4.frame_*.npz")) == frames and {p: p.stat().st_mtime_ns for p in kept} == kept
