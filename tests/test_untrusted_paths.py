"""Output paths: no command ever replaces one of its inputs or another output of the same run
(symlinks and hard links included), existing results are kept unless --overwrite is given,
inputs with the same name get distinct outputs, and filesystem errors are one `spc: error:` line
with nothing left behind."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

from spc.errors import SpcError
from spc.files import atomic_write
from spc.plan.io import read_plan
from tests.conftest import spc
from tests.test_untrusted_inputs import refused, snapshot


@pytest.fixture
def work(tmp_path: Path, small_plan: Path, small_onnx: Path, images: dict[str, Path]) -> Path:
    """Copies to be (not) overwritten: img.png, plan.ttplan, m.onnx."""
    shutil.copy(images["camera"], tmp_path / "img.png")
    shutil.copy(small_plan, tmp_path / "plan.ttplan")
    shutil.copy(small_onnx, tmp_path / "m.onnx")
    return tmp_path


# --- an output that is an input ------------------------------------------------------------------

def test_outputs_never_replace_inputs(work: Path) -> None:
    plan, img, model = work / "plan.ttplan", work / "img.png", work / "m.onnx"
    (work / "link.npz").symlink_to(img)
    os.link(img, work / "hard.npz")
    (work / "dir_link").symlink_to(work)
    for args in (("run", plan, img, "-o", img), ("run", plan, img, "-o", plan),
                 ("run", plan, img, "-o", work / "x.npz", "--viz", img),  # --viz over the image
                 ("run", plan, img, "-o", work / "link.npz"), ("run", plan, img, "-o", work / "hard.npz"),
                 ("run", plan, img, "-o", work / "dir_link" / "img.png"), ("run", plan, img, "-o", "img.png"),
                 ("emit-py", plan, "-o", plan), ("compile", model, "-o", model),
                 ("compile", model, "-o", work / "dir_link" / "m.onnx"), ("export", "-o", model, "--weights", model)):
        old = Path.cwd()
        os.chdir(work)  # "img.png" relative to the current folder
        try:
            refused(*args, "--overwrite", contains="writing it would replace the input", folder=work)
        finally:
            os.chdir(old)


def test_compile_default_output_is_never_the_source(work: Path) -> None:
    shutil.copy(work / "m.onnx", work / "m.ttplan")  # an ONNX that happens to be called .ttplan
    refused("compile", work / "m.ttplan", "--overwrite", contains="m.ttplan: is the input", folder=work)
    (work / "p.toml").write_text('preset = "fast"\n')
    refused("compile", work / "m.onnx", "--precision-config", work / "p.toml", "-o", work / "p.toml", "--overwrite",
            contains="p.toml: is the input", folder=work)


def test_two_outputs_of_one_run_never_meet(work: Path) -> None:
    plan, img = work / "plan.ttplan", work / "img.png"
    refused("run", plan, img, "-o", work / "same.png", "--viz", work / "same.png",
            contains="two outputs of this run would both be written to this file", folder=work)
    (work / "d").mkdir()
    refused("run", plan, work, img, "-o", work / "d", contains="img.png: given twice", folder=work)


def test_inputs_with_one_name_get_distinct_outputs(work: Path, images: dict[str, Path]) -> None:
    """x.png and x.jpg in one folder, y.png in two: each output is the input's path below the
    folder holding all inputs, extension kept, plus .npz (the overlays: plus .png)."""
    from PIL import Image

    for sub in ("a", "b"):
        (work / sub).mkdir()
    shutil.copy(work / "img.png", work / "a" / "x.png")
    Image.open(images["coffee"]).save(work / "a" / "x.jpg")
    shutil.copy(images["astronaut"], work / "a" / "y.png")
    np.save(work / "b" / "y.npy", np.zeros((1, 3, 120, 160), np.float32))
    shutil.copy(images["coffee"], work / "b" / "y.png")
    inputs = {p: p.read_bytes() for p in (work / "a").iterdir()} | {p: p.read_bytes() for p in (work / "b").iterdir()}
    code, out, err = spc("run", work / "plan.ttplan", work / "a", work / "b", "-o", work / "out", "--viz", work / "out")
    assert code == 0, err
    names = ["a/x.jpg", "a/x.png", "a/y.png", "b/y.npy", "b/y.png"]
    assert sorted(p.relative_to(work / "out").as_posix() for p in (work / "out").rglob("*.npz")) == \
        [f"{n}.npz" for n in names]
    assert sorted(p.relative_to(work / "out").as_posix() for p in (work / "out").rglob("*.png")) == \
        [f"{n}.png" for n in names]
    assert all(p.read_bytes() == data for p, data in inputs.items())
    # x.png and x.jpg are different images, and so are their results
    a, b = np.load(work / "out/a/x.png.npz"), np.load(work / "out/a/x.jpg.npz")
    assert not np.array_equal(a["keypoints"], b["keypoints"])
    # one input without -o: beside it, the whole name plus .npz
    code, out, err = spc("run", work / "plan.ttplan", work / "a" / "x.jpg")
    assert code == 0 and (work / "a" / "x.jpg.npz").is_file() and f"-> {work / 'a' / 'x.jpg.npz'}" in out, err
    # one input and -o an existing folder: into it, by the same name
    code, out, err = spc("run", work / "plan.ttplan", work / "img.png", "-o", work / "b")
    assert code == 0 and (work / "b" / "img.png.npz").is_file(), err


# --- existing results ----------------------------------------------------------------------------

def test_existing_results_are_kept_without_overwrite(work: Path) -> None:
    plan, img, model = work / "plan.ttplan", work / "img.png", work / "m.onnx"
    for path in ("old.npz", "old.png", "old.ttplan", "old.py", "old.onnx", "folder/img.png.npz"):
        (work / path).parent.mkdir(exist_ok=True)
        (work / path).write_text("earlier result\n")
    for args in (("run", plan, img, "-o", work / "old.npz"), ("run", plan, img, "-o", work / "n.npz",
                                                              "--viz", work / "old.png"),
                 ("run", plan, img, work / "plan.ttplan", "-o", work / "folder"),  # the first output exists
                 ("compile", model, "-o", work / "old.ttplan"), ("emit-py", plan, "-o", work / "old.py"),
                 ("export", "-o", work / "old.onnx")):
        err = refused(*args, contains="already exists; pass --overwrite to replace it", folder=work)
        assert "old." in err or "folder/img.png.npz" in err
    code, _, err = spc("run", plan, img, "-o", work / "old.npz", "--viz", work / "old.png", "--overwrite")
    assert code == 0, err
    assert set(np.load(work / "old.npz").files) >= {"keypoints"} and (work / "old.png").read_bytes()[:4] == b"\x89PNG"
    code, _, err = spc("emit-py", plan, "-o", work / "old.py", "--overwrite")
    assert code == 0 and "import ttnn" in (work / "old.py").read_text(), err


def test_compile_overwrites_only_when_told(work: Path) -> None:
    model, plan = work / "m.onnx", work / "m.ttplan"
    code, _, err = spc("compile", model)  # the default: SOURCE with the suffix .ttplan
    assert code == 0 and plan.is_file(), err
    refused("compile", model, contains="m.ttplan: already exists; pass --overwrite", folder=work)
    before = plan.stat().st_mtime_ns
    code, _, err = spc("compile", model, "--overwrite", "--nms-single-pass")
    assert code == 0 and plan.stat().st_mtime_ns != before, err
    assert "iterations = 0" in read_plan(plan).ir_text  # the new plan replaced the old


def test_dump_dir_is_checked_before_compiling(work: Path) -> None:
    model = work / "m.onnx"
    (work / "dumps").mkdir()
    (work / "dumps" / "03-fold-constants.ir").write_text("an earlier dump\n")
    refused("compile", model, "-o", work / "p.ttplan", "--dump-dir", work / "dumps",
            contains="holds earlier dumps (03-fold-constants.ir, ...); pass --overwrite", folder=work)
    refused("compile", model, "-o", work / "p.ttplan", "--dump-dir", work / "img.png",
            contains="is a file, not a folder", folder=work)
    refused("compile", model, "-o", work / "dumps" / "summary.txt", "--dump-dir", work / "dumps", "--overwrite",
            contains="writes files of this name", folder=work)


# --- filesystem errors ---------------------------------------------------------------------------

def test_unwritable_outputs_are_one_line(work: Path) -> None:
    plan, img, model = work / "plan.ttplan", work / "img.png", work / "m.onnx"
    (work / "file.txt").write_text("a file\n")
    (work / "folder.ttplan").mkdir()
    shutil.copy(img, work / "img2.png")
    cases = [(("run", plan, img, "-o", work / "file.txt" / "out.npz"), "file.txt is a file, not a folder"),
             (("run", plan, img, work / "img2.png", "-o", work / "file.txt"), "need a folder for -o/--viz"),
             (("run", plan, img, img, "-o", work / "out"), "given twice"),
             (("compile", model, "-o", work / "folder.ttplan"), "folder.ttplan: is a folder; give a file name"),
             (("compile", model, "-o", work / "file.txt" / "deep" / "x.ttplan"), "is a file, not a folder"),
             (("emit-py", plan, "-o", work), "is a folder; give a file name"),
             (("run", plan, img, "-o", work / ("n" * 300 + ".npz")), "name too long")]
    for args, message in cases:
        refused(*args, contains=message, folder=work)


def test_no_permission(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ro = work / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        if os.geteuid() == 0:  # root writes anywhere: make os.access say what it says to others
            real = os.access
            monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == ro else real(p, mode, **kw))
        refused("run", work / "plan.ttplan", work / "img.png", "-o", ro / "out.npz",
                contains=f"out.npz: cannot write: no permission to write in {ro}", folder=work)
    finally:
        ro.chmod(0o755)


@pytest.mark.parametrize("where, error, message", [
    ("mkstemp", OSError(errno.EROFS, "Read-only file system"), "cannot write: read-only file system"),
    ("mkstemp", PermissionError(errno.EACCES, "Permission denied"), "cannot write: no permission"),
    ("fsync", OSError(errno.ENOSPC, "No space left on device"), "cannot write: no space left on the device"),
    ("replace", OSError(errno.EDQUOT, "Disk quota exceeded"), "cannot write: disk quota exceeded")])
def test_a_failing_write_leaves_the_old_file_and_no_part_file(where: str, error: OSError, message: str, work: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    (work / "out.npz").write_text("earlier result\n")

    def fail(*args, **kwargs):
        raise error

    target = {"mkstemp": (tempfile, "mkstemp"), "fsync": (os, "fsync"), "replace": (os, "replace")}[where]
    monkeypatch.setattr(*target, fail)
    err = refused("run", work / "plan.ttplan", work / "img.png", "-o", work / "out.npz", "--overwrite",
                  contains=message, folder=work)
    assert f"{work / 'out.npz'}: cannot write" in err and ".part" not in err


def test_atomic_write_refuses_a_folder_and_cleans_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(SpcError, match="d: cannot write: is a folder"):
        atomic_write(tmp_path / "d", b"x")
    (tmp_path / "f").write_text("")
    with pytest.raises(SpcError, match="a parent is a file"):
        atomic_write(tmp_path / "f" / "x", b"x")
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    with pytest.raises(SpcError, match="no space left"):
        atomic_write(tmp_path / "y", b"x" * 100000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "f"]
    assert snapshot(tmp_path)["f"][0] == b""


@pytest.mark.parametrize("verify", [True, False])
def test_a_plan_whose_write_fails_midway_leaves_the_old_plan_and_no_part_file(work: Path, verify: bool,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's members are written by a thread while the validation compares (plan/io.py
    PlanWriter): a disk that fills under the weights is still one line, the earlier plan kept."""
    import spc.plan.io as plan_io
    from spc.compiler import compile_onnx

    before = (work / "plan.ttplan").read_bytes()
    add = plan_io._add

    def full(zf, name: str, data: bytes) -> None:
        if name.endswith(".safetensors"):
            raise OSError(errno.ENOSPC, "No space left on device")
        add(zf, name, data)

    monkeypatch.setattr(plan_io, "_add", full)
    with pytest.raises(SpcError, match=r"plan\.ttplan: cannot write: no space left on the device"):
        compile_onnx(work / "m.onnx", work / "plan.ttplan", verify=verify)
    assert (work / "plan.ttplan").read_bytes() == before
    assert not [p for p in work.iterdir() if p.name.endswith(".part")]


def test_a_compile_refused_after_its_plan_was_begun_leaves_the_old_plan_and_no_part_file(work: Path) -> None:
    """The plan's file is begun once the program is lowered (its weights go to the disk while the
    memory is planned): a refusal by the memory planner after that leaves the earlier plan as it
    was, and so does a compile that stops after the planner."""
    before, threads = (work / "plan.ttplan").read_bytes(), threading.active_count()
    refused("compile", work / "m.onnx", "-o", work / "plan.ttplan", "--overwrite", "--memory-config", "l2norm=l1",
            contains="only convolutions and max pools", folder=work)
    assert threading.active_count() == threads  # the plan's writer is gone too
    code, out, err = spc("compile", work / "m.onnx", "-o", work / "plan.ttplan", "--overwrite",
                         "--stop-after", "choose-memory-config")
    assert code == 0 and "no plan written" in out, err
    assert (work / "plan.ttplan").read_bytes() == before
    assert not [p for p in work.iterdir() if p.name.endswith(".part")]


def test_a_discarded_plan_writes_nothing_more_and_leaves_no_file(tmp_path: Path) -> None:
    """A refusal or an interrupt after the plan's file was begun does not wait for what was queued
    (the weights' serialising, writing and syncing)."""
    from spc.plan.io import PlanWriter

    gate, made = threading.Event(), []
    writer = PlanWriter(tmp_path / "p.ttplan")
    writer.add("ir.txt", lambda: gate.wait(10) and b"ir")  # holds the writer's thread until released
    writer.add("weights.safetensors", lambda: made.append(1) or b"weights")
    threading.Timer(0.2, gate.set).start()
    writer.discard()
    assert not made and not list(tmp_path.iterdir()) and not writer.thread
