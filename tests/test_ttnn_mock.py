"""The plan's ttnn program run by the real ttnn 0.81.1 library on a mock Blackhole p150.

Values read back are zeros (nothing executes); what is checked is that ttnn accepts every call:
arguments, layouts, memory configurations, L1 allocation and circular buffers. The ttnn
environment comes from `make mock-env` (part of `make test`); without it these tests fail,
they do not skip.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from spc.plan.io import manifest_digest, read_plan, write_plan

ROOT = Path(__file__).resolve().parents[1]


def rewrite(plan, path: Path) -> Path:
    """Write an edited plan as a valid .ttplan (fresh hashes), to test what ttnn makes of it."""
    manifest = {k: v for k, v in plan.manifest.items() if k not in ("members", "format", "format_version")}
    write_plan(path, plan.program, plan.weights, plan.ir_text, manifest)
    return path


def forge_program(plan: Path, path: Path, edit) -> Path:
    """``plan`` with its program.json text edited and the manifest's hash made to match."""
    with zipfile.ZipFile(plan) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    members["program.json"] = edit(members["program.json"].decode()).encode()
    manifest = json.loads(members["manifest.json"])
    manifest["members"]["program.json"] = hashlib.sha256(members["program.json"]).hexdigest()
    manifest["digest"] = manifest_digest(manifest)
    members["manifest.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def run(python: str, *args: object) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-m", "spc.cli", *map(str, args)], capture_output=True, text=True, check=False,
                          cwd=ROOT)


def test_plan_runs_on_the_mock_p150(ttnn_python: str, small_plan: Path, images: dict[str, Path],
                                    tmp_path: Path) -> None:
    out = tmp_path / "mock.npz"
    done = run(ttnn_python, "run", small_plan, images["camera"], "-o", out, "--dense", "--backend", "ttnn-mock")
    assert done.returncode == 0, done.stderr
    got = np.load(out)
    assert got["score_map"].shape == (1, 120, 160) and got["descriptor_map"].shape == (1, 256, 15, 20)
    assert not got["score_map"].any()  # mock device: nothing executes


@pytest.mark.parametrize("size", [(240, 320), (480, 640), (720, 1280)], ids=["240x320", "480x640", "720x1280"])
@pytest.mark.parametrize("preset", ["accurate", "balanced", "fast"])
def test_every_preset_at_real_sizes(ttnn_python: str, exports, size: tuple[int, int], preset: str,
                                    images: dict[str, Path], tmp_path: Path) -> None:
    from spc.compiler import compile_onnx
    from spc.ttnn.precision import PrecisionPlan

    plan = tmp_path / f"{preset}.ttplan"
    compile_onnx(exports(*size), plan, precision=PrecisionPlan(preset))
    done = run(ttnn_python, "run", plan, images["camera"], "-o", tmp_path / "out.npz", "--backend", "ttnn-mock")
    assert done.returncode == 0, done.stderr


def test_main_interpreter_hands_over_to_the_ttnn_one(ttnn_python: str, small_plan: Path, images: dict[str, Path],
                                                     tmp_path: Path) -> None:
    out = tmp_path / "mock.npz"
    done = run(sys.executable, "run", small_plan, images["camera"], "-o", out, "--backend", "ttnn-mock")
    assert done.returncode == 0, done.stderr
    assert out.exists()


def test_a_plan_for_another_chip_is_refused_by_the_device(ttnn_python: str, small_plan: Path,
                                                          images: dict[str, Path], tmp_path: Path) -> None:
    """--target n150 says the user means an n150 plan; the mock device is a p150 (Blackhole), and
    its arch() says so before any call is made."""
    plan = read_plan(small_plan)
    manifest = dict(plan.manifest, target="n150")
    other = tmp_path / "n150.ttplan"
    write_plan(other, plan.program, plan.weights, plan.ir_text,
               {k: v for k, v in manifest.items() if k not in ("members", "format", "format_version", "digest")})
    out = tmp_path / "never.npz"
    done = run(ttnn_python, "run", other, images["camera"], "-o", out, "--backend", "ttnn-mock")
    assert done.returncode == 1 and "pass --target n150" in done.stderr, done.stderr
    done = run(ttnn_python, "run", other, images["camera"], "-o", out, "--backend", "ttnn-mock", "--target", "n150")
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and last == ("spc: error: the plan is for n150 (wormhole_b0), and mock p150 is a "
                                             "blackhole; recompile it with the --target of this device"), done.stderr
    assert not out.exists()


def test_a_call_ttnn_rejects_fails_in_one_line(ttnn_python: str, small_plan: Path, images: dict[str, Path],
                                               tmp_path: Path) -> None:
    out = tmp_path / "never.npz"
    # a call inconsistent with its weights is the plan verifier's to refuse, before ttnn sees it
    plan = read_plan(small_plan)
    plan.program.device_ops[0].args["out_channels"] = 7  # the bias has 64
    done = run(ttnn_python, "run", rewrite(plan, tmp_path / "broken.ttplan"), images["camera"], "-o", out,
               "--backend", "ttnn-mock")
    assert done.returncode == 1 and done.stderr.strip().splitlines()[-1].startswith("spc: error: ") \
        and "holds 64 values for 7 channels" in done.stderr, done.stderr
    # a configuration the plan's schema allows and ttnn's own checks refuse (rows not a tile multiple)
    odd = forge_program(small_plan, tmp_path / "odd.ttplan",
                        lambda text: text.replace('"act_block_h_override":0', '"act_block_h_override":7', 1))
    done = run(ttnn_python, "run", odd, images["camera"], "-o", out, "--backend", "ttnn-mock")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr
    assert lines[-1].startswith("spc: error: ttnn rejected ttnn.conv2d for block encoder.conv_blocks.0.conv_a:")
    assert "multiple of 32" in lines[-1]
    assert not out.exists()


def test_calls_are_spelled_as_ttnn_spells_them(ttnn_python: str, small_onnx: Path, small_plan: Path,
                                               images: dict[str, Path], tmp_path: Path) -> None:
    """Every keyword of every call, and every config field, against ttnn's nanobind signatures;
    a plan with a ttnn.typecast (an output-format override) is checked and run as well."""
    from spc.compiler import compile_onnx
    from spc.ttnn.precision import PrecisionPlan

    cast = tmp_path / "cast.ttplan"
    compile_onnx(small_onnx, cast, precision=PrecisionPlan("accurate").with_rule("l2norm", output_dtype="float32"))
    assert "ttnn.typecast" in [op.op for op in read_plan(cast).program.device_ops]
    for plan in (small_plan, cast):
        done = subprocess.run([ttnn_python, "-m", "spc.runtime.ttnn_signatures", plan], capture_output=True,
                              text=True, check=False, cwd=ROOT)
        assert done.returncode == 0 and "0 signature mismatch(es)" in done.stdout, done.stdout + done.stderr
    done = run(ttnn_python, "run", cast, images["camera"], "-o", tmp_path / "cast.npz", "--backend", "ttnn-mock")
    assert done.returncode == 0, done.stderr

    # a keyword no overload takes: the checker names it (on a program edited in memory: a plan
    # file holding it is refused by the plan's schema first, below)
    probe = ("import sys; from pathlib import Path; from spc.plan.io import read_plan; "
             "from spc.runtime.ttnn_signatures import check; p = read_plan(Path(sys.argv[1])).program; p.device_ops[0].args['bogus_keyword'] = 1; print(check(p))")
    done = subprocess.run([ttnn_python, "-c", probe, small_plan], capture_output=True, text=True, check=False,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "ttnn.conv2d" in done.stdout and "no overload takes" in done.stdout and "bogus_keyword" in done.stdout
    plan = read_plan(small_plan)
    plan.program.device_ops[0].args["bogus_keyword"] = 1
    done = run(ttnn_python, "run", rewrite(plan, tmp_path / "bad.ttplan"), images["camera"], "-o",
               tmp_path / "b.npz", "--backend", "ttnn-mock")
    assert done.returncode == 1 and "bogus_keyword" in done.stderr and "Traceback" not in done.stderr
    # a configuration's fields are the plan's schema: an unknown one is refused when the plan is read
    forged = forge_program(small_plan, tmp_path / "forged.ttplan",
                           lambda text: text.replace('"act_block_h_override"', '"bogus_field": true, "act_block_h_override"', 1))
    done = run(ttnn_python, "run", forged, images["camera"], "-o", tmp_path / "f.npz", "--backend", "ttnn-mock")
    assert done.returncode == 1 and "conv_config has unknown fields ['bogus_field']" in done.stderr and "Traceback" not in done.stderr


def test_emitted_program_runs_on_the_mock_p150(ttnn_python: str, small_plan: Path, tmp_path: Path) -> None:
    from tests.conftest import spc

    program = tmp_path / "program.py"
    code, _, err = spc("emit-py", small_plan, "-o", program)
    assert code == 0, err
    text = program.read_text()
    assert text.count("ttnn.conv2d(") == 12 and "ttnn.deallocate(" in text and "# encoder.conv_blocks.0.conv_a" in text
    lint = subprocess.run([str(Path(sys.executable).parent / "ruff"), "check", "--no-cache", "--select", "F,E9",
                           str(program)], capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout
    spec = read_plan(small_plan).program.device_inputs[0]
    x = tmp_path / "x.npy"
    np.save(x, np.zeros(spec.device_shape, np.float32))
    out = tmp_path / "out.npz"
    done = subprocess.run([ttnn_python, str(program), str(small_plan), str(x), str(out), "--mock"],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    got = np.load(out)
    assert sorted(got) == sorted(t.name for t in read_plan(small_plan).program.device_outputs)


def test_bench_runs_the_frame_loop_on_the_mock_p150(ttnn_python: str, small_plan: Path,
                                                    images: dict[str, Path]) -> None:
    done = run(ttnn_python, "bench", small_plan, images["camera"], "--backend", "ttnn-mock", "--frames", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "2 frames on ttnn-mock (call by call); medians per frame"
    assert any(line.split()[:1] == ["h2d"] for line in lines) and "end to end (wall)" in done.stdout
    # a CPU's times beside the hand port's p150 figures would mean nothing: said, and no ratio
    assert "vs hand port" not in done.stdout and "these are this CPU's times" in done.stdout


def test_trace_and_queue_calls_are_spelled_as_ttnn_spells_them(ttnn_python: str) -> None:
    """The mock device cannot run trace capture or events (they crash there); their keywords are
    checked against ttnn's signatures instead, and a misspelling is caught."""
    code = ("import os, sys\nfrom spc.runtime.ttnn_mock.harness import prepare\nos.environ.update(prepare())\n"
            "from spc.runtime import ttnn_backend\nfrom spc.runtime.ttnn_signatures import check_runtime_calls\n"
            "assert check_runtime_calls() == [], check_runtime_calls()\n"
            "ttnn_backend.RUNTIME_CALLS['execute_trace'] = ('mesh_device', 'trace_id', 'queue_id')\n"
            "print(check_runtime_calls())\n")
    done = subprocess.run([ttnn_python, "-c", code], capture_output=True, text=True, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "ttnn.execute_trace: no overload takes ['mesh_device', 'queue_id', 'trace_id']" in done.stdout


@pytest.mark.skipif(Path("/dev/tenstorrent").exists(), reason="this machine has a Tenstorrent device")
def test_no_device_is_one_line_naming_the_backends(ttnn_python: str, small_plan: Path, images: dict[str, Path],
                                                   tmp_path: Path) -> None:
    done = run(ttnn_python, "run", small_plan, images["camera"], "-o", tmp_path / "o.npz", "--backend", "ttnn")
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "spc: error: no Tenstorrent device here (/dev/tenstorrent is absent): use --backend emu (the CPU, device "
        "numerics) or --backend ttnn-mock (ttnn's checks on a mock p150)"], done.stderr


def _firmware_elf(path: Path, text_end: int, ldm_end: int) -> Path:
    """An ELF32 with just a symbol table holding the two symbols the link step reads."""
    import struct

    strtab = b"\0other\0__fw_export_text_end\0__fw_export_ldm_end\0"
    symbols = b"\0" * 16 + b"".join(struct.pack("<IIIBBH", strtab.index(name.encode() + b"\0"), value, 0, 0, 0, 1)
                                    for name, value in (("other", 7), ("__fw_export_text_end", text_end),
                                                        ("__fw_export_ldm_end", ldm_end)))
    off_sym = 52
    off_str = off_sym + len(symbols)
    off_sh = (off_str + len(strtab) + 3) & ~3
    header = b"\x7fELF" + bytes([1, 1, 1, 0]) + b"\0" * 8
    header += struct.pack("<HHIIIIIHHHHHH", 2, 243, 1, 0, 0, off_sh, 0, 52, 0, 0, 40, 3, 0)
    sections = b"\0" * 40 + struct.pack("<IIIIIIIIII", 0, 2, 0, 0, off_sym, len(symbols), 2, 1, 4, 16)
    sections += struct.pack("<IIIIIIIIII", 0, 3, 0, 0, off_str, len(strtab), 0, 0, 1, 0)
    blob = header + symbols + strtab
    path.write_bytes(blob + b"\0" * (off_sh - len(blob)) + sections)
    return path


def test_the_c_stand_in_compiler_writes_what_the_python_one_writes(tmp_path: Path) -> None:
    """fake_riscv_gxx.c (built where there is a C compiler: thousands of runs a suite, ~1 ms each
    instead of an interpreter's start) against fake_riscv_gxx.py: the same files and log lines."""
    import shutil

    here = ROOT / "spc" / "runtime" / "ttnn_mock"
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler: the harness runs the Python stand-in")
    binary = tmp_path / "gxx"
    subprocess.run([cc, "-O2", "-o", str(binary), str(here / "fake_riscv_gxx.c")], check=True)
    firmware = _firmware_elf(tmp_path / "brisc_weakened.elf", 0x5E20, 0xFFB00710)
    steps = [["-O2", "-c", "k.cpp", "-o", "obj/k.o", "-MF", "obj/k.d"],
             ["-x", "c++-header", "pch.hpp", "-o", "pch/pch.hpp.gch"],
             ["-O2", f"-Wl,--just-symbols={firmware},-z,max-page-size=16", "obj/k.o", "-o", "out/brisc/k.elf",
              "-MF", "out/k.d", "it's quoted"],
             ["--version"]]
    results = {}
    for name, command in (("c", [str(binary)]), ("py", [sys.executable, "-I", "-S", str(here / "fake_riscv_gxx.py")])):
        work = tmp_path / f"with_{name}"
        work.mkdir()
        env = {"FAKE_GXX_LOG": str(work / "calls.log"), "PATH": "/usr/bin:/bin"}
        outs = [subprocess.run([*command, *step], cwd=work, env=env, capture_output=True, text=True, check=True).stdout
                for step in steps]
        results[name] = (outs, {p.relative_to(work).as_posix(): p.read_bytes().replace(str(work).encode(), b"@")
                                for p in sorted(work.rglob("*")) if p.is_file()})
    assert results["c"] == results["py"]
    assert results["c"][1]["out/brisc/k.elf"][:4] == b"\x7fELF" and "text=0x5e20 data=0xffb00710" in \
        results["c"][1]["calls.log"].decode()
    # a link step without a firmware ELF fails loudly in both
    for command in ([str(binary)], [sys.executable, "-I", "-S", str(here / "fake_riscv_gxx.py")]):
        done = subprocess.run([*command, "obj.o", "-o", "x.elf"], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 1 and "without a firmware ELF" in done.stderr


def _conv_hardsigmoid(tmp_path: Path) -> Path:
    """A plan of a convolution and torch's nn.Hardsigmoid (ONNX HardSigmoid alpha 1/6, beta 0.5)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from spc.compiler import compile_onnx

    w = np.random.default_rng(0).normal(0, 0.2, (8, 8, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
         helper.make_node("HardSigmoid", ["c"], ["y"], alpha=1 / 6, beta=0.5)], "hs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 32, 32])], [numpy_helper.from_array(w, "w")])
    src = tmp_path / "hs.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), src)
    plan = tmp_path / "hs.ttplan"
    compile_onnx(src, plan)
    return plan


def _accepted_by_ttnn(ttnn_python: str, plan: Path, name: str) -> None:
    for module, says in (("spc.runtime.ttnn_signatures", "0 signature mismatch(es)"),
                         ("spc.runtime.ttnn_mock.check_plans", f"ok {name}")):
        done = subprocess.run([ttnn_python, "-m", module, plan], capture_output=True, text=True, check=False, cwd=ROOT)
        assert done.returncode == 0 and says in done.stdout, done.stdout + done.stderr


def test_hardsigmoid_as_torch_exports_it_runs_on_the_mock_p150(ttnn_python: str, tmp_path: Path) -> None:
    """ttnn.hardsigmoid (for nn.Hardsigmoid's alpha 1/6): spelled as ttnn spells it and accepted by
    the real ttnn."""
    plan = _conv_hardsigmoid(tmp_path)
    assert [op.op for op in read_plan(plan).program.device_ops] == ["ttnn.conv2d", "ttnn.hardsigmoid"]
    _accepted_by_ttnn(ttnn_python, plan, "hs")


def test_silu_the_last_call_defined_runs_on_the_mock_p150(ttnn_python: str, tmp_path: Path) -> None:
    """ttnn.silu, defined in ttnn/calls/elementwise.py alone (no lowering emits it yet): a plan
    holding it passes the plan's checks, runs on the emulator as its meaning says, and the real
    ttnn takes it as spc spells it."""
    from spc.ir.ops.onnx_conv import conv2d_nchw
    from spc.runtime.runner import Runner
    from spc.ttnn.calls import MEANINGS

    plan = read_plan(_conv_hardsigmoid(tmp_path))
    plan.program.device_ops[-1].op = "ttnn.silu"
    silu = tmp_path / "silu.ttplan"
    write_plan(silu, plan.program, plan.weights, plan.ir_text, {"target": "p150", "source": plan.manifest["source"]})
    edited = read_plan(silu)  # the schema and the verifier take it
    x = np.random.default_rng(1).normal(size=(1, 8, 32, 32)).astype(np.float32)
    with Runner(edited) as runner:
        got = runner.run(x).outputs["y"]
    w = np.random.default_rng(0).normal(0, 0.2, (8, 8, 3, 3)).astype(np.float32)  # _conv_hardsigmoid's
    c = conv2d_nchw(x, w, None, [1, 1], [1, 1, 1, 1], [1, 1], 1)
    # bfloat16 input, weights and result around an exact float32 silu
    np.testing.assert_allclose(got, MEANINGS["ttnn.silu"]([c], {}, {}), rtol=0.03, atol=0.03)
    _accepted_by_ttnn(ttnn_python, silu, "silu")


def test_float32_window_ops_run_on_the_mock_p150(ttnn_python: str, tmp_path: Path) -> None:
    """A map stored in float32 through a U-Net's steps (DISK's): a conv reading float32, a 2x2
    average pool, a bilinear x2 upsample and a 5x5 NMS max pool, as lowering/shifted.py spells
    them (ttnn's own pools and bilinear upsample take bf16 only), and the real ttnn takes them."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from spc.compiler import compile_onnx
    from spc.ttnn.precision import load_precision_config

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(0, 0.2, shape).astype(np.float32), name)
               for name, shape in (("w1", (32, 3, 3, 3)), ("w2", (32, 32, 3, 3)), ("w3", (1, 32, 3, 3)))]
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["c1"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c2", "", "scales"], ["u"], mode="linear"),
             helper.make_node("Conv", ["u", "w3"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["h"], ["m"], kernel_shape=[5, 5], pads=[2, 2, 2, 2]),
             helper.make_node("Equal", ["h", "m"], ["keep"]),
             helper.make_node("Where", ["keep", "h", "low"], ["y"])]
    low = numpy_helper.from_array(np.array(-1e4, np.float32), "low")
    graph = helper.make_graph(nodes, "unet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 96])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 64, 96])],
                              [*weights, scales, low])
    src = tmp_path / "unet.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9), src)
    config = tmp_path / "f32.toml"
    config.write_text('[blocks."*"]\noutput_dtype = "float32"\n')
    plan = tmp_path / "unet.ttplan"
    compile_onnx(src, plan, precision=load_precision_config(config))
    calls = {op.op for op in read_plan(plan).program.device_ops}
    assert not calls & {"ttnn.max_pool2d", "ttnn.avg_pool2d", "ttnn.upsample"}, sorted(calls)
    _accepted_by_ttnn(ttnn_python, plan, "unet")
