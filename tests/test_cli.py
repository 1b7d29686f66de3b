"""The `spc` commands end to end at a small size, and every bad input: one line, non-zero exit,
no output file."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from spc.cli import main
from spc.ir.parser import parse_graph
from spc.passes.pipeline import PASS_NAMES
from spc.plan.io import read_plan
from spc.plan.program import DEFAULT_IMAGE
from spc.plan.schema import MAX_INPUTS
from tests.conftest import one_line_error, spc


def test_check_against_onnxruntime(small_plan: Path, small_onnx: Path, images: dict[str, Path]) -> None:
    code, out, err = spc("check", small_plan, *images.values(), "--json", "--min-pcc", "0.995", "--min-f1", "0.9")
    assert code == 0, err
    reports = json.loads(out)
    assert [r["input"] for r in reports] == ["camera.png", "astronaut.png", "coffee.png"]
    for r in reports:
        assert r["score_pcc"] > 0.995 and r["descriptor_pcc"] > 0.995 and r["f1"] > 0.9
        assert r["descriptor_cosine"] > 0.99 and r["keypoints"] > 20


def test_check_fails_under_threshold(small_plan: Path, images: dict[str, Path]) -> None:
    code, _, err = spc("check", small_plan, images["camera"], "--min-f1", "1.01")
    assert code == 1 and "check failed on 1 of 1" in err


def test_run_is_a_drop_in_for_onnxruntime(small_plan: Path, small_onnx: Path, tmp_path: Path,
                                          images: dict[str, Path]) -> None:
    import onnxruntime as ort

    from spc.runtime.inputs import load_input

    out = tmp_path / "kp.npz"
    code, _, err = spc("run", small_plan, images["astronaut"], "-o", out, "--dense", "--viz", tmp_path / "kp.png")
    assert code == 0, err
    ours = np.load(out)
    x = load_input(images["astronaut"], [1, 3, 120, 160], DEFAULT_IMAGE)
    ref = dict(zip(["keypoints", "scores", "descriptors", "mask"],
                   ort.InferenceSession(str(small_onnx), providers=["CPUExecutionProvider"]).run(None, {"pixel_values": x})))
    for name, want in ref.items():
        assert ours[name].dtype == want.dtype and ours[name].ndim == want.ndim
        assert ours[name].shape[0] == 1 and ours[name].shape[2:] == want.shape[2:]
    assert abs(int(ours["mask"].sum()) - int(ref["mask"].sum())) <= 5
    assert ours["score_map"].shape == (1, 120, 160) and ours["descriptor_map"].shape == (1, 256, 15, 20)
    assert (tmp_path / "kp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_several_inputs_into_a_folder(small_plan: Path, tmp_path: Path, images: dict[str, Path]) -> None:
    npy = tmp_path / "frame.npy"
    np.save(npy, np.random.default_rng(0).random((1, 3, 120, 160)).astype(np.float32))
    folder = tmp_path / "out"
    folder.mkdir()
    code, _, err = spc("run", small_plan, images["camera"].parent, npy, "-o", folder)
    assert code == 0, err
    # in the folder, each input's path below the folder holding them all, extension kept, plus .npz
    # (the images and the .npy are in two sibling folders here)
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.npz")) == sorted(
        [f"{images['camera'].parent.name}/{n}.png.npz" for n in ("astronaut", "camera", "coffee")]
        + [f"{tmp_path.name}/frame.npy.npz"])


def test_several_inputs_need_a_folder(small_plan: Path, tmp_path: Path, images: dict[str, Path]) -> None:
    code, _, err = spc("run", small_plan, images["camera"], images["coffee"], "-o", tmp_path / "one.npz")
    one_line_error(code, err, contains="need a folder")
    assert not (tmp_path / "one.npz").exists()


def test_compile_is_deterministic_and_dumps_every_pass(small_onnx: Path, small_plan: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.ttplan"
    dumps = tmp_path / "dumps"
    code, _, err = spc("compile", small_onnx, "-o", again, "--dump-dir", dumps)
    assert code == 0, err
    assert again.read_bytes() == small_plan.read_bytes()
    names = sorted(p.name for p in dumps.iterdir())
    for i, name in enumerate(["input", *PASS_NAMES]):
        assert f"{i:02d}-{name}.ir" in names and f"{i:02d}-{name}.dot" in names
    summary = (dumps / "summary.txt").read_text()
    assert "insert-device-nms" in summary and "spc.Nms 0->1" in summary
    plan = read_plan(again)
    final = (dumps / f"{len(PASS_NAMES):02d}-{PASS_NAMES[-1]}.ir").read_text()
    assert final == plan.ir_text
    g = parse_graph(final, plan.weights)
    assert g.op_counts()["spc.Nms"] == 1
    # the memory planner works on the lowered program: its dump is the program it leaves
    planned = (dumps / f"{len(PASS_NAMES) + 1:02d}-choose-memory-config.txt").read_text()
    assert planned.count(" = ttnn.") == len(plan.program.device_ops) and "slice_config = " in planned
    assert f"{len(PASS_NAMES) + 1:>2}  choose-memory-config" in summary and "l1=16" in summary
    assert plan.manifest["pipeline"] == [*PASS_NAMES, "choose-memory-config"]


def test_stop_after_and_print_ir(small_onnx: Path, tmp_path: Path) -> None:
    code, out, err = spc("compile", small_onnx, "--stop-after", "fuse-score-fold", "--print-ir-after-all")
    assert code == 0 and "no plan written" in out
    assert "IR after fuse-score-fold" in err and "IR after insert-device-nms" not in err
    assert not small_onnx.with_name("sp.ttplan.part").exists()
    code, _, err = spc("compile", small_onnx, "--stop-after", "no-such-pass")
    one_line_error(code, err, contains="no such pass")
    code, _, err = spc("compile", small_onnx, "--stop-after", "a\rb\nc")  # a value with line breaks: one line
    one_line_error(code, err, contains="--stop-after a\\rb\\nc: no such pass")


def test_stop_after_the_memory_stage_dumps_it_and_writes_no_plan(small_onnx: Path, tmp_path: Path) -> None:
    code, out, err = spc("compile", small_onnx, "--stop-after", "choose-memory-config", "--dump-dir", tmp_path / "d")
    assert code == 0 and "no plan written" in out, err
    assert (tmp_path / "d" / f"{len(PASS_NAMES) + 1:02d}-choose-memory-config.txt").exists()


def test_disable_pass_lowers_its_region_op_by_op_and_the_manifest_says_so(small_onnx: Path, tmp_path: Path) -> None:
    code, out, err = spc("compile", small_onnx, "-o", tmp_path / "d.ttplan", "--disable-pass", "fuse-keypoints")
    assert code == 0, err
    assert "fuse-keypoints: not fired (dropped: disabled with --disable-pass)" in out
    plan = read_plan(tmp_path / "d.ttplan")
    assert plan.manifest["options"]["disabled_passes"] == ["fuse-keypoints"]
    assert not any(n.op == "spc.Keypoints" for n in plan.program.host_post)
    code, _, _ = spc("compile", small_onnx, "-o", tmp_path / "e.ttplan")
    assert code == 0 and "disabled_passes" not in read_plan(tmp_path / "e.ttplan").manifest["options"]
    for name, why in [("nope", "no such pass"), ("simplify-shapes", "fuse-score-fold requires it"),
                      ("choose-memory-config", "needs its memory configurations"),
                      ("fuse\nkeypoints", "--disable-pass fuse\\nkeypoints: no such pass")]:  # still one line
        code, _, err = spc("compile", small_onnx, "-o", tmp_path / "f.ttplan", "--disable-pass", name)
        one_line_error(code, err, contains=why)
        assert not (tmp_path / "f.ttplan").exists()


def test_list_passes_needs_no_model() -> None:
    code, out, _ = spc("compile", "--list-passes")
    passes = [line.split()[1] for line in out.splitlines() if not line.lstrip().startswith("rules:")]
    assert code == 0 and passes == [*PASS_NAMES, "choose-memory-config"]
    assert "rules: conv-relu, conv" in out  # what --explain can name
    code, _, err = spc("compile")
    one_line_error(code, err, contains="compile needs the ONNX file")


def test_single_pass_nms_is_opt_in(small_onnx: Path, tmp_path: Path) -> None:
    code, _, err = spc("compile", small_onnx, "-o", tmp_path / "sp1.ttplan", "--nms-single-pass")
    assert code == 0 and "single-pass NMS replaces the source's 2" in err
    assert "iterations = 0" in read_plan(tmp_path / "sp1.ttplan").ir_text


def test_compile_imports_only_what_it_needs(small_onnx: Path, tmp_path: Path) -> None:
    """No torch, onnxruntime or Ray; nor onnx's Python package (the importer reads models with
    its messages: frontend/onnx_proto.py, ~50 ms of the command), nor onnx's C++ extension (only
    the forked child that checks the model and infers its shapes loads it: frontend/reading.py),
    nor numpy.random (passes/trial_values.py, ~10 ms)."""
    code = ("import sys; from spc.cli import main\n"
            f"try: main(['compile', {str(small_onnx)!r}, '-o', {str(tmp_path / 'x.ttplan')!r}])\n"
            "except SystemExit: pass\n"
            f"assert __import__('os').path.exists({str(tmp_path / 'x.ttplan')!r})\n"
            "assert 'torch' not in sys.modules and 'onnxruntime' not in sys.modules, 'heavy import'\n"
            "assert 'onnx' not in sys.modules and 'onnx.onnx_ml_pb2' in sys.modules, 'onnx package'\n"
            "assert 'onnx.onnx_cpp2py_export' not in sys.modules, 'onnx extension (the child loads it)'\n"
            "assert 'numpy.random' not in sys.modules, 'numpy.random (passes/trial_values.py)'\n"
            "assert 'ray' not in sys.modules and 'pandas' not in sys.modules, 'Ray without --ray'\n")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_an_option_refused_after_the_read_began_ends_its_child(small_onnx: Path, tmp_path: Path) -> None:
    """`spc compile` begins reading its model, in a forked child, before it reads its other options
    (frontend/reading.py): an option refused then is the one error, and the child is ended and
    reaped, as after a compile."""
    plan = tmp_path / "x.ttplan"
    plan.write_bytes(b"an earlier plan")
    code = ("import os, sys; from spc.cli import main; from spc.frontend import shape_inference\n"
            "pids, fork = [], shape_inference._fork_inference\n"
            "shape_inference._fork_inference = lambda *a: (lambda c: (pids.append(c.pid), c)[1])(fork(*a))\n"
            "for plan in (sys.argv[2], sys.argv[2] + '2'):\n"
            "    try: main(['-q', 'compile', sys.argv[1], '-o', plan])\n"
            "    except SystemExit: pass\n"
            "try: os.waitpid(-1, os.WNOHANG)\n"
            "except ChildProcessError: print(len(pids), 'none left')\n")
    done = subprocess.run([sys.executable, "-c", code, str(small_onnx), str(plan)], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "2 none left", done.stdout + done.stderr
    assert done.stderr.startswith(f"spc: error: {plan}: already exists"), done.stderr
    assert plan.read_bytes() == b"an earlier plan" and (tmp_path / "x.ttplan2").exists()


def test_file_commands_end_without_teardown_and_lose_no_output(small_onnx: Path, tmp_path: Path) -> None:
    """compile, inspect and emit-py end with os._exit once done (cli.entry): what they printed to a
    pipe arrives whole, the plan is complete, an error is still one line and exit code 1, and the
    other commands still end through the interpreter (their atexit handlers run)."""
    def cli(*args: object) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "spc.cli", *map(str, args)], capture_output=True, text=True,
                              check=False)

    plan = tmp_path / "p.ttplan"
    done = cli("compile", small_onnx, "-o", plan, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["plan"] == str(plan)
    assert read_plan(plan).program.device_ops
    shown = cli("inspect", plan, "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["calls"], shown.stderr
    again = cli("compile", small_onnx, "-o", plan)
    assert again.returncode == 1 and again.stderr.count("\n") == 1 and "already exists" in again.stderr
    # the fast set skips atexit; any other command ends through the interpreter, its handlers run
    def ends(*argv: str) -> subprocess.CompletedProcess:
        code = ("import atexit, sys; atexit.register(lambda: print('atexit ran'))\n"
                f"sys.argv = ['spc', *{list(argv)!r}]; from spc.cli import entry; entry()\n")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)

    listed = ends("compile", "--list-passes")
    assert listed.returncode == 0 and "choose-memory-config" in listed.stdout and "atexit ran" not in listed.stdout
    refused = ends("check", str(tmp_path / "none.ttplan"), str(tmp_path / "none.png"))
    assert refused.returncode == 1 and refused.stdout.rstrip().endswith("atexit ran"), refused


def _rewrite_member(src: Path, dst: Path, member: str, edit) -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            zout.writestr(info, edit(data) if info.filename == member else data)
    dst.write_bytes(out.getvalue())


def _bad_onnx(tmp_path: Path, small_onnx: Path) -> dict[str, tuple[Path, str]]:
    xs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1, 3, 8, 8]) for i in range(MAX_INPUTS + 1)]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])
    total = helper.make_node("Sum", [x.name for x in xs], ["y"])
    many = helper.make_model(helper.make_graph([total], "g", xs, [y]), opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(many, tmp_path / "many.onnx")
    (tmp_path / "trunc.onnx").write_bytes(small_onnx.read_bytes()[:4000])
    return {"missing": (tmp_path / "nope.onnx", "no such file"),
            "truncated": (tmp_path / "trunc.onnx", "not an ONNX model"),
            "too-many-inputs": (tmp_path / "many.onnx", f"has {MAX_INPUTS + 1} inputs; a plan takes at most {MAX_INPUTS}")}


def test_a_valid_model_that_is_not_superpoint_compiles_and_runs(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])
    relu = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                             opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(relu, tmp_path / "relu.onnx")
    code, _, err = spc("compile", tmp_path / "relu.onnx", "-o", tmp_path / "relu.ttplan")
    assert code == 0, err
    a = np.linspace(-1, 1, 192, dtype=np.float32).reshape(1, 3, 8, 8)
    np.save(tmp_path / "x.npy", a)
    code, _, err = spc("run", tmp_path / "relu.ttplan", tmp_path / "x.npy", "-o", tmp_path / "y.npz")
    assert code == 0, err
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], np.maximum(a, 0), atol=1e-2)


@pytest.mark.parametrize("case", ["missing", "truncated", "too-many-inputs"])
def test_bad_onnx(case: str, small_onnx: Path, tmp_path: Path) -> None:
    path, message = _bad_onnx(tmp_path, small_onnx)[case]
    out = tmp_path / "out.ttplan"
    code, _, err = spc("compile", path, "-o", out)
    one_line_error(code, err, contains=message)
    assert not out.exists() and not list(tmp_path.glob("*.part"))


def _bad_plans(tmp_path: Path, plan: Path) -> dict[str, tuple[Path, str]]:
    (tmp_path / "trunc.ttplan").write_bytes(plan.read_bytes()[: plan.stat().st_size // 2])
    def edit(d: bytes) -> bytes:
        edited = d.replace(b'"in_channels":64', b'"in_channels":32', 1)
        assert edited != d
        return edited

    _rewrite_member(plan, tmp_path / "edited.ttplan", "program.json", edit)

    def newer(d: bytes) -> bytes:
        m = json.loads(d)
        m["format_version"] = 99
        return json.dumps(m).encode()

    _rewrite_member(plan, tmp_path / "newer.ttplan", "manifest.json", newer)
    return {"truncated": (tmp_path / "trunc.ttplan", "not a readable .ttplan"),
            "edited": (tmp_path / "edited.ttplan", "program.json does not match its hash"),
            "newer": (tmp_path / "newer.ttplan", "newer than this spc understands"),
            "missing": (tmp_path / "nope.ttplan", "no such plan file")}


@pytest.mark.parametrize("case", ["truncated", "edited", "newer", "missing"])
def test_bad_plans(case: str, small_plan: Path, tmp_path: Path, images: dict[str, Path]) -> None:
    path, message = _bad_plans(tmp_path, small_plan)[case]
    out = tmp_path / "kp.npz"
    code, _, err = spc("run", path, images["camera"], "-o", out)
    one_line_error(code, err, contains=message)
    assert not out.exists()


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    (tmp_path / "empty.png").write_bytes(b"")
    (tmp_path / "text.jpg").write_text("hello")
    np.save(tmp_path / "wrong.npy", np.zeros((1, 3, 10, 10), np.float32))
    np.save(tmp_path / "strings.npy", np.array([["a"]]))
    return {"empty": (tmp_path / "empty.png", "empty file"),
            "not-an-image": (tmp_path / "text.jpg", "not a readable image"),
            "wrong-shape": (tmp_path / "wrong.npy", "does not match the plan input"),
            "not-numeric": (tmp_path / "strings.npy", "does not match the plan input"),
            "missing": (tmp_path / "nope.png", "no such file")}


@pytest.mark.parametrize("case", ["empty", "not-an-image", "wrong-shape", "not-numeric", "missing"])
def test_bad_inputs(case: str, small_plan: Path, tmp_path: Path) -> None:
    path, message = _bad_inputs(tmp_path)[case]
    out = tmp_path / "kp.npz"
    code, _, err = spc("run", small_plan, path, "-o", out)
    one_line_error(code, err, contains=message)
    assert not out.exists()


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "P", "I;16"])
def test_image_modes(mode: str, small_plan: Path, tmp_path: Path, images: dict[str, Path]) -> None:
    from PIL import Image

    im = Image.open(images["astronaut"]).convert("RGB").resize((97, 61))
    im = Image.fromarray(np.asarray(im.convert("L"), np.uint16) * 257) if mode == "I;16" else im.convert(mode)
    path = tmp_path / f"img_{mode.replace(';', '')}.png"
    im.save(path)
    code, _, err = spc("run", small_plan, path, "-o", tmp_path / "o.npz")
    assert code == 0, err
    assert int(np.load(tmp_path / "o.npz")["mask"].sum()) > 5


def test_a_missing_extra_is_one_line_saying_what_to_install(small_plan: Path, images: dict[str, Path],
                                                            tmp_path: Path) -> None:
    """A base install (no `full` extra): the emulator's torch is missing."""
    from spc.plan.io import read_plan

    frame = tmp_path / "frame.npy"
    np.save(frame, np.zeros([int(d) for d in read_plan(small_plan).program.inputs[0].shape], np.float32))
    blocked = ("import sys; sys.modules['torch'] = None; from spc.cli import main; "
               "sys.argv = ['spc', *sys.argv[1:]]; main()")
    done = subprocess.run([sys.executable, "-c", blocked, "run", str(small_plan), str(frame), "-o",
                           str(tmp_path / "o.npz")], capture_output=True, text=True, check=False)
    one_line_error(done.returncode, done.stderr, contains="needs torch")
    assert "pip install 'spc[full]'" in done.stderr and not (tmp_path / "o.npz").exists()


COMMANDS = ["export", "compile", "run", "bench", "check", "inspect", "emit-py", "bisect", "report"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_shows_examples_and_the_verbosity_flags(command: str) -> None:


    done = CliRunner().invoke(main, [command, "--help"])
    assert done.exit_code == 0, done.output
    examples = done.output.split("Examples:")[1].strip().splitlines()
    assert examples and all(line.strip().startswith(("spc ", "python ")) for line in examples)
    assert any(f"spc {command}" in line for line in examples)
    assert "-q, --quiet" in done.output and "-v, --verbose" in done.output


def test_json_quiet_and_verbose(small_onnx: Path, small_plan: Path, images: dict[str, Path], tmp_path: Path) -> None:
    plan = tmp_path / "p.ttplan"
    code, out, err = spc("compile", small_onnx, "-o", plan, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["plan"] == str(plan) and report["device_macs_share"] == 1.0 and report["passes"][0]["name"]
    code, out, err = spc("-q", "compile", small_onnx, "-o", plan, "--overwrite")  # -q before the command
    assert code == 0 and out == "" and err == "", out + err
    code, out, err = spc("compile", small_onnx, "-o", plan, "--overwrite", "-v")  # -v after it
    assert code == 0 and "fold-constants" in err and " ms " in err and out.startswith("wrote "), out + err
    code, out, err = spc("bench", small_plan, images["camera"], "--frames", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["backend"] == "emu" and json.loads(out)["phases_ms"]["wall"] > 0
    code, out, err = spc("emit-py", small_plan, "-o", tmp_path / "p.py", "--json")
    assert code == 0 and json.loads(out) == {"output": str(tmp_path / "p.py")}, err


@pytest.mark.parametrize(("args", "contains"), [
    (["run"], "Missing argument 'PLAN'. (see `spc run --help`)"),
    (["bogus"], "No such command 'bogus'"),
    (["compile", "--force", "x.onnx"], "No such option '--force'. (see `spc compile --help`)"),
    (["compile", "--precision", "bogus", "x.onnx"], "Invalid value for '--precision'"),
])
def test_bad_usage_is_one_error_line(args: list[str], contains: str) -> None:
    """What click refuses before a command runs is one `spc: error:` line and exit 1, as every
    other refusal (the console script, not CliRunner: entry() turns click's usage errors so)."""
    done = subprocess.run([sys.executable, "-m", "spc.cli", *args], capture_output=True, text=True, check=False)
    one_line_error(done.returncode, done.stderr, contains=contains)
    alone = subprocess.run([sys.executable, "-m", "spc.cli"], capture_output=True, text=True, check=False)
    assert alone.returncode == 0 and alone.stdout.startswith("Usage: spc")


def test_a_reader_that_goes_away_is_no_internal_error() -> None:
    """`spc compile --list-passes | head -1`: the pipe closes before spc writes; no traceback, no
    "internal error" (there was one), exit 1."""
    done = subprocess.Popen([sys.executable, "-m", "spc.cli", "compile", "--list-passes"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=Path(__file__).resolve().parents[1])
    assert done.stdout is not None and done.stderr is not None
    done.stdout.close()
    err = done.stderr.read().decode()
    assert done.wait() == 1 and err == "", err
