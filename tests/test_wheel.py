"""The wheel `pip wheel .` builds is a working spc on its own, not only the editable checkout.

Built offline from the working tree, the wheel is installed into fresh virtual environments, one
for the main interpreter (3.11) and one for the ttnn interpreter (3.12, so the wheel must be
py3-none-any). From there, and from a folder outside the checkout, `spc compile` writes a plan,
`spc run` runs it on the emu backend, and `spc run --backend ttnn-mock` hands over to the 3.12
environment (SPC_TTNN_PYTHON), whose copy of the mock p150 harness, its cluster descriptor (package
data) and its stand-in compiler come from the wheel. The wheel's file list is checked as well:
every file of the package and its package data, nothing else (no tests/, no scripts/).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
OUTPUTS = ["descriptors", "image_size", "keypoints", "mask", "scores", "spc_plan_sha256"]  # `spc run` on an image, without --dense


def sh(*cmd: object, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=False, cwd=cwd, env=env,
                          timeout=600)


def purelib(python: str | Path) -> Path:
    done = sh(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=Path("/"))
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip())


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without anything that would put another spc (or mock home) in play."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "SPC_TTNN_PYTHON", "SPC_TTNN_MOCK_HOME")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Built from a copy of the working tree (tracked and untracked files, .gitignore respected), not
    # in place: setuptools writes build/ and spc.egg-info/ into the source folder, and a stale
    # build/lib/ keeps modules deleted since the last build, which would end up in the wheel.
    folder = tmp_path_factory.mktemp("wheel")
    src = folder / "src"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():  # a tracked file deleted in the working tree is not part of it
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    # --no-index: offline; --no-build-isolation: build with this environment's setuptools rather
    # than fetch one into an isolated environment
    done = sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
              "-w", folder / "dist", src, cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = (folder / "dist").glob("spc-*.whl")
    return built


def fresh_venv(base_python: str | Path, wheel: Path, folder: Path) -> Path:
    """A new venv with the wheel installed (no dependencies) and the base environment's
    site-packages appended for the dependencies; returns its python."""
    subprocess.run([str(base_python), "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    # the main environment's pip installs into the new venv (--python), which has no pip of its own
    done = sh(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", wheel,
              cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    # A path line in a .pth file only appends the folder to sys.path; the .pth files inside it are
    # not processed, so the base environment's editable spc (an import hook installed by its
    # __editable__ .pth) stays out, and the wheel's copy, earlier on sys.path, is the one imported.
    (purelib(python) / "base_deps.pth").write_text(f"{purelib(base_python)}\n")
    return python


def spc_location(python: Path, cwd: Path) -> Path:
    done = sh(python, "-c", "import spc.runtime.ttnn_mock.harness as h; print(h.__file__)", cwd=cwd,
              env=clean_env())
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip())


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("outside")
    # the current folder is first on sys.path: outside the checkout, its spc/ cannot be picked up
    assert ROOT not in folder.resolve().parents
    return folder


@pytest.fixture(scope="module")
def main_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory, work: Path) -> Path:
    python = fresh_venv(sys.executable, wheel, tmp_path_factory.mktemp("venv311") / "env")
    assert spc_location(python, work).is_relative_to(python.parent.parent)
    return python


@pytest.fixture(scope="module")
def ttnn_venv(wheel: Path, ttnn_python: str, tmp_path_factory: pytest.TempPathFactory, work: Path) -> Path:
    python = fresh_venv(ttnn_python, wheel, tmp_path_factory.mktemp("venv312") / "env")
    assert spc_location(python, work).is_relative_to(python.parent.parent)
    return python


@pytest.fixture(scope="module")
def wheel_plan(main_venv: Path, small_onnx: Path, work: Path) -> Path:
    """The small export compiled by the wheel's `spc compile` (its console script)."""
    plan = work / "p.ttplan"
    done = sh(main_venv.parent / "spc", "compile", small_onnx, "-o", plan, cwd=work, env=clean_env())
    assert done.returncode == 0, done.stderr
    assert plan.is_file() and "wrote" in done.stdout
    return plan


def test_wheel_holds_the_package_its_data_and_nothing_else(wheel: Path) -> None:
    assert wheel.name == "spc-0.1.0-py3-none-any.whl"  # pure Python: installs under 3.11 and 3.12 alike
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {n.split("/")[0] for n in names} == {"spc", "spc-0.1.0.dist-info"}  # no tests/, scripts/, docs/
    assert "spc/runtime/ttnn_mock/p150_cluster_desc.yaml" in names  # the mock p150 opens with it
    # every package-data pattern matches files, and each of them is in the wheel (calibration images)
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for package, patterns in config["tool"]["setuptools"]["package-data"].items():
        folder = ROOT.joinpath(*package.split("."))
        for pattern in patterns:
            found = sorted(p.relative_to(ROOT).as_posix() for p in folder.glob(pattern))
            assert found, f"{package}: {pattern} matches nothing"
            assert set(found) <= names, set(found) - names
    assert {"spc/tuning/calibration/clock.png", "spc/tuning/calibration/NOTICE.md"} <= names
    # and every file of the package in the checkout (a folder without __init__.py would be dropped)
    source = {p.relative_to(ROOT).as_posix() for p in (ROOT / "spc").rglob("*")
              if p.is_file() and "__pycache__" not in p.parts}
    assert source <= names, sorted(source - names)
    entry_points = zipfile.ZipFile(wheel).read("spc-0.1.0.dist-info/entry_points.txt").decode()
    assert "spc = spc.cli:entry" in entry_points


def test_wheel_compiles_and_runs_on_emu(main_venv: Path, wheel_plan: Path, images: dict[str, Path],
                                        work: Path) -> None:
    out = work / "kp.npz"
    done = sh(main_venv.parent / "spc", "run", wheel_plan, images["camera"], "-o", out, cwd=work, env=clean_env())
    assert done.returncode == 0, done.stderr
    got = np.load(out)
    assert sorted(got) == OUTPUTS
    assert got["keypoints"].shape[0] == 1 and int(got["mask"].sum()) > 0  # the emu backend computes


def test_wheel_runs_on_the_mock_p150(main_venv: Path, ttnn_venv: Path, wheel_plan: Path, images: dict[str, Path],
                                     work: Path) -> None:
    # the 3.11 venv has no ttnn: the wheel's CLI hands the command over to SPC_TTNN_PYTHON (there is
    # no checkout beside an installed spc to find .venv-ttnn in), which runs the wheel's copy
    out = work / "mock.npz"
    done = sh(main_venv.parent / "spc", "run", wheel_plan, images["camera"], "-o", out, "--backend", "ttnn-mock",
              cwd=work, env=clean_env(SPC_TTNN_PYTHON=str(ttnn_venv)))
    assert done.returncode == 0, done.stderr
    assert sorted(np.load(out)) == OUTPUTS
    # the harness prepared its overlay in the fresh venv (its default home, sys.prefix/mock) around
    # the stand-in compiler installed from the wheel
    stamp = json.loads((ttnn_venv.parent.parent / "mock" / "ready.json").read_text())
    # (its C twin where the machine has a C compiler, as this one has)
    here = purelib(ttnn_venv).resolve() / "spc" / "runtime" / "ttnn_mock"
    assert str(here / ("fake_riscv_gxx.c" if shutil.which("cc") else "fake_riscv_gxx.py")) in stamp["compiler"]


def test_a_new_user_follows_the_readme(main_venv: Path, images: dict[str, Path], work: Path) -> None:
    """The README's first commands, as written (the export made small with its documented
    --height/--width), then the h5 output, inspect and the Python API, from the wheel alone."""
    import shutil

    import h5py

    folder = work / "user"
    folder.mkdir()
    shutil.copy(images["camera"], folder / "img.jpg")
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```\n", 2)[1]
    commands = [line.split("#")[0].split() for line in block.splitlines() if line.startswith("spc ")]
    assert [c[1] for c in commands] == ["export", "compile", "run", "check"]
    seen = [list(c) for c in commands]
    commands[0] += ["--height", "120", "--width", "160"]
    # every other `spc` command of the README's code blocks, as written, once each; photos/ is a tree
    blocks = readme.split("```")[1::2]
    for line in (ln.removeprefix("$ ") for b in blocks for ln in b.splitlines()):
        if line.startswith("spc ") and line.split("#")[0].split() not in seen:
            seen.append(line.split("#")[0].split())
            commands.append(seen[-1])
    assert any("--coords" in c for c in commands) and any("photos/" in c for c in commands), commands
    (folder / "photos" / "db").mkdir(parents=True)
    shutil.copy(images["astronaut"], folder / "photos" / "db" / "1.png")
    shutil.copy(images["coffee"], folder / "photos" / "2.png")
    commands += [["spc", "run", "sp.ttplan", "img.jpg", "--format", "h5", "-o", "more.h5"],
                 ["spc", "inspect", "sp.ttplan"]]
    bin_dir = main_venv.parent
    # the matcher the README's `spc match` pairs with the extractor: a mutual nearest neighbour
    # exported by torch.onnx, compiled by the wheel
    from tests.corpus.mnn import export

    export(folder / "matcher.onnx", k=64, dim=256)
    done = sh(bin_dir / "spc", "compile", "matcher.onnx", "-o", "matcher.ttplan", cwd=folder, env=clean_env())
    assert done.returncode == 0, done.stderr
    for command in commands:
        done = sh(bin_dir / "spc", *command[1:], cwd=folder, env=clean_env())
        assert done.returncode == 0, f"{' '.join(command)}: {done.stderr}"
    python = next(b for b in blocks if b.startswith("python\n"))[len("python\n"):]
    done = sh(main_venv, "-c", python, cwd=folder, env=clean_env())
    assert done.returncode == 0 and "(512, 512)" in done.stdout, done.stderr
    with h5py.File(folder / "features.h5", "r") as h5:
        assert sorted(h5) == ["2.png", "db"] and "1.png" in h5["db"]
    with h5py.File(folder / "out" / "matches.h5", "r") as h5:
        assert list(h5) == ["2.png"] and list(h5["2.png"]) == ["db-1.png"]
        assert h5["2.png/db-1.png/matches0"].dtype == np.int16
    with h5py.File(folder / "more.h5", "r") as h5:
        group = h5["img.jpg"]
        assert group["keypoints"].shape[1] == 2 and tuple(group["image_size"][()]) == (512, 512)
    code = "import spc; f = spc.load('sp.ttplan').run('img.jpg'); print(f.image_size, f.keypoints.shape[1])"
    done = sh(main_venv, "-c", code, cwd=folder, env=clean_env())
    assert done.returncode == 0 and done.stdout.strip() == "(512, 512) 2", done.stderr
