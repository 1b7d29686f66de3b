"""Many chips on one host: a plan for a target of N chips (p300, 4xp150, 8xp150) runs its one-chip
program on every chip, each on its own images (docs/ttnn.md).

On the emulator the N chips' results per image are the one-chip plan's, bit for bit; on the real
ttnn 0.81.1 library the plans run on mock clusters of 2, 4 and 8 Blackhole chips
(runtime/ttnn_mock/*_cluster_desc.yaml) with zero ttnn errors. ``make multichip`` adds the
480x640 network over eight chips (SPC_MULTICHIP_LARGE=1).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from msgspec.structs import replace

from spc.errors import SpcError
from spc.plan.io import images_per_chip, read_plan
from spc.runtime.runner import Runner
from spc.runtime.ttnn_mock.harness import CLUSTERS, HERE
from spc.tools.run import run_files
from spc.ttnn.targets import TARGETS

ROOT = Path(__file__).resolve().parents[1]
MULTI = [name for name, t in TARGETS.items() if t.chips > 1]


def spc(python: str, *args: object) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-m", "spc.cli", *map(str, args)], capture_output=True, text=True, check=False,
                          cwd=ROOT)


@pytest.fixture(scope="module")
def plans(small_onnx: Path, tmp_path_factory: pytest.TempPathFactory):
    """plans(target, batch) -> the 120x160 plan compiled so, once per module."""
    from spc.compiler import compile_onnx

    folder = tmp_path_factory.mktemp("multichip")
    done: dict[tuple[str, int], Path] = {}

    def plan(target: str, batch: int = 1) -> Path:
        if (target, batch) not in done:
            out = folder / f"{target}_b{batch}.ttplan"
            compile_onnx(small_onnx, out, target=target, batch=batch)
            done[target, batch] = out
        return done[target, batch]

    return plan


def test_targets_and_mock_clusters_agree() -> None:
    p150 = TARGETS["p150"]
    assert MULTI == ["p300", "4xp150", "8xp150"]
    for name in MULTI:
        t = TARGETS[name]
        # each chip is modelled as the p150: the compiler needs nothing more than the name
        assert replace(t, name="p150", chips=1, mesh=(1, 1)) == p150
        descriptor, mesh = CLUSTERS[name]
        assert mesh == t.mesh and mesh[0] * mesh[1] == t.chips
        text = (HERE / descriptor).read_text()
        assert "tenstorrent/tt-umd tests/cluster_descriptor_examples/" in text  # says where it came from
        assert len(re.findall(r"^  \d+: blackhole$", text, re.M)) == t.chips
        # the p150's harvesting on every chip: its firmware build keys and kernel cache are reused
        assert re.findall(r"harvest_mask: (\d+)", text) == ["192"] * t.chips


def test_images_per_run_counts_the_chips(plans) -> None:
    plan = read_plan(plans("p300", 2), "p300")
    assert plan.images_per_run == 4 and images_per_chip(plan.program) == 2
    assert read_plan(plans("p300"), "p300").images_per_run == 2


def test_a_plan_for_two_chips_takes_both_chips_images(plans) -> None:
    plan = read_plan(plans("p300"), "p300")
    with Runner(plan, "emu") as runner:
        with pytest.raises(SpcError, match=r"on each of its 2 chips: \[2, 3, 120, 160\], the chips' inputs stacked"):
            runner.run(np.zeros((1, 3, 120, 160), np.float32))
        result = runner.run(np.zeros((2, 3, 120, 160), np.float32), dense=True)
    assert len(result.chips) == 2 and result.dense["score_map"].shape == (2, 120, 160)


@pytest.mark.parametrize("batch", [1, 2])
def test_emu_two_chips_give_the_one_chip_plans_results(plans, images: dict[str, Path], tmp_path: Path,
                                                        batch: int) -> None:
    """Three images: on two chips one run (b=1) or two chips of which the second has one image and
    a pad (b=2); each image's .npz is the one-chip plan's, bit for bit."""
    files = [images["camera"], images["astronaut"], images["coffee"]]
    for target in ("p150", "p300"):
        run_files(read_plan(plans(target, batch), target), files, tmp_path / target, None, True, "emu")
    for f in files:
        one, two = np.load(tmp_path / "p150" / f"{f.name}.npz"), np.load(tmp_path / "p300" / f"{f.name}.npz")
        assert sorted(one.files) == sorted(two.files) and "score_map" in one.files
        for name in (n for n in one.files if n != "spc_plan_sha256"):  # two plans, their own hashes
            assert one[name].shape == two[name].shape and one[name].dtype == two[name].dtype, name
            assert np.array_equal(one[name], two[name]), name
        assert len(one["keypoints"][0][one["mask"][0].astype(bool)]) > 0


@pytest.mark.parametrize("target", MULTI)
def test_mock_cluster_runs_a_batch_plan(ttnn_python: str, plans, images: dict[str, Path], tmp_path: Path,
                                        target: str) -> None:
    """2, 4 and 8 Blackhole chips, two 120x160 images per chip: `spc run` groups 2N frames per
    run, the mesh runs every call, and each image gets its own result; no ttnn error."""
    files = [images["camera"], images["astronaut"], images["coffee"]]
    done = spc(ttnn_python, "run", plans(target, 2), *files, "-o", tmp_path, "--dense", "--backend", "ttnn-mock",
               "--target", target)
    assert done.returncode == 0, done.stderr
    assert not re.search(r"error|fatal|critical", done.stderr, re.I), done.stderr
    for f in files:
        got = np.load(tmp_path / f"{f.name}.npz")
        assert got["score_map"].shape == (1, 120, 160) and got["descriptor_map"].shape == (1, 256, 15, 20)
        assert not got["score_map"].any()  # mock device: nothing executes


def test_mesh_program_splits_and_gathers(ttnn_python: str, plans) -> None:
    """The backend itself on the mock p300: a 1x2 mesh; inputs are the chips' stacked on axis 0
    and so are the results; a second cluster in the same process is refused, saying why."""
    script = f"""
import numpy as np
from spc.errors import SpcError
from spc.plan.io import read_plan
from spc.runtime.ttnn_backend import TtnnProgram
plan = read_plan(__import__("pathlib").Path({str(plans("p300", 2))!r}))
p = TtnnProgram(plan.program, plan.weights, mock=True, target="p300")
try:
    assert p.chips == 2 and p.device.get_num_devices() == 2 and tuple(p.device.shape) == (1, 2)
    ins = {{t.name: np.zeros([2 * t.device_shape[0], *t.device_shape[1:]], np.float32) for t in plan.program.device_inputs}}
    read = [t.name for t in plan.program.device_outputs] + [t.name for t in plan.program.probes.values()]
    got = p.run(ins, read)
    for t in [*plan.program.device_outputs, *plan.program.probes.values()]:
        assert list(got[t.name].shape) == [2 * t.device_shape[0], *t.device_shape[1:]], (t.name, got[t.name].shape)
    # the mock reads zeros back; on the host, the chips' parts come back in the order the mapper split them
    import ttnn
    x = np.arange(4 * 32, dtype=np.float32).reshape(4, 1, 1, 32)
    host = ttnn.Tensor(x, data_type=ttnn.float32, layout=ttnn.ROW_MAJOR_LAYOUT, **p._mapper(replicate=False))
    assert (np.concatenate([p._numpy(part) for part in ttnn.get_device_tensors(host)]) == x).all()
finally:
    p.close()
try:
    TtnnProgram(plan.program, plan.weights, mock=True, target="4xp150")
except SpcError as exc:
    print("refused:", exc)
"""
    done = subprocess.run([ttnn_python, "-c", script], capture_output=True, text=True, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "refused: this process has opened the mock p300, and a process opens one mock cluster only" in done.stdout


@pytest.mark.skipif(not os.environ.get("SPC_MULTICHIP_LARGE"), reason="make multichip (SPC_MULTICHIP_LARGE=1)")
@pytest.mark.parametrize("target", ["8xp150"])
def test_full_size_network_over_eight_chips(ttnn_python: str, exports, images: dict[str, Path], tmp_path: Path,
                                            target: str) -> None:
    from spc.compiler import compile_onnx

    plan = tmp_path / "sp.ttplan"
    compile_onnx(exports(480, 640), plan, target=target)
    files = [images["camera"], images["astronaut"], images["coffee"]]
    done = spc(ttnn_python, "run", plan, *files, "-o", tmp_path / "out", "--backend", "ttnn-mock", "--target", target)
    assert done.returncode == 0, done.stderr
    assert not re.search(r"error|fatal|critical", done.stderr, re.I), done.stderr
    assert all((tmp_path / "out" / f"{f.name}.npz").exists() for f in files)
