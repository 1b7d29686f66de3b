"""Hostile output paths: ``-o`` (and ``--viz``, ``--dump-dir``) naming an input, a link to one, a
hard link, an existing file with and without ``--overwrite``, a folder, a dangling or looping
link, a parent that is a file, a read-only folder, a name too long, odd characters; for `spc run`,
`spc emit-py`, `spc compile` and `spc export` (whose refusals come before any export)."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import numpy as np

from tests.fuzz.harness import Case, Fixtures, npz_consistent, plan_consistent, python_consistent, save_npy
from tests.fuzz.inputs import expanded

_INPUTS = {"run": ["p.ttplan", "img.png", "x.npy"], "emit-py": ["p.ttplan"], "compile": ["sp.onnx"], "export": []}
_SUFFIX = {"run": ".npz", "emit-py": ".py", "compile": ".ttplan", "export": ".onnx"}


def _setup(rng: random.Random, fx: Fixtures, work: Path, command: str) -> None:
    from PIL import Image

    (work / "p.ttplan").write_bytes(fx.plan_bytes("default"))
    shape = fx.input_shape("default")
    g = np.random.default_rng(rng.randrange(1 << 30))
    Image.fromarray((g.random((shape[-2], shape[-1])) * 255).astype(np.uint8)).save(work / "img.png")
    save_npy(work / "x.npy", g.random(shape, dtype=np.float32))
    if command == "compile":
        shutil.copyfile(fx.onnx, work / "sp.onnx")
    for name in ("existing.npz", "existing.py", "existing.ttplan", "existing.onnx", "existing.png"):
        (work / name).write_bytes(b"an earlier result, to be kept\n")
    (work / "afile").write_text("a file, not a folder\n")
    (work / "dir").mkdir()
    (work / "dir" / "inner.txt").write_text("inside\n")
    (work / "ro").mkdir()
    (work / "sub").mkdir()
    (work / "sub" / "img.png").write_bytes((work / "img.png").read_bytes())


def _target(rng: random.Random, work: Path, command: str, label: str) -> tuple[str, str]:
    """An output path below ``work`` (made as it needs to be): (path as given, what it is)."""
    suffix = _SUFFIX[command]
    inputs = _INPUTS[command] or ["p.ttplan"]
    kind = rng.choice(["new", "new", "existing", "existing", "input", "input-spelled", "input-absolute",
                       "link-to-input", "hardlink-to-input", "link-to-existing", "dangling", "loop", "link-to-dir",
                       "folder", "folder-slash", "new-parents", "parent-file", "read-only", "long", "odd", "dot",
                       "part", "dev-null", "fifo", "link-to-parent-file", "input-folder"])
    name = f"{label}{suffix}"
    if kind == "new":
        return name, "a new file"
    if kind == "existing":
        return f"existing{suffix}", "an existing file"
    if kind == "input":
        return (p := rng.choice(inputs)), f"the input {p}"
    if kind == "input-spelled":
        p = rng.choice(inputs)
        return rng.choice([f"./{p}", f"dir/../{p}", f"sub/../{p}", f".//{p}"]), f"the input {p}, spelled otherwise"
    if kind == "input-absolute":
        p = rng.choice(inputs)
        return str(work / p), f"the input {p}, absolute"
    if kind == "link-to-input":
        p = rng.choice(inputs)
        os.symlink(p, work / f"link_{label}{suffix}")
        return f"link_{label}{suffix}", f"a link to the input {p}"
    if kind == "hardlink-to-input":
        p = rng.choice(inputs)
        os.link(work / p, work / f"hard_{label}{suffix}")
        return f"hard_{label}{suffix}", f"a hard link to the input {p}"
    if kind == "link-to-existing":
        os.symlink(f"existing{suffix}", work / f"elink_{label}{suffix}")
        return f"elink_{label}{suffix}", "a link to an existing file"
    if kind == "dangling":
        os.symlink(f"nowhere{suffix}", work / f"dangling_{label}{suffix}")
        return f"dangling_{label}{suffix}", "a dangling link"
    if kind == "loop":
        os.symlink(f"loop_{label}{suffix}", work / f"loop_{label}{suffix}")
        return f"loop_{label}{suffix}", "a link to itself"
    if kind == "link-to-dir":
        os.symlink("dir", work / f"dirlink_{label}{suffix}")
        return f"dirlink_{label}{suffix}", "a link to a folder"
    if kind == "folder":
        return "dir", "an existing folder"
    if kind == "folder-slash":
        return "dir/", "an existing folder, with a slash"
    if kind == "new-parents":
        return f"new/deeper/{name}", "a file in folders yet to make"
    if kind == "parent-file":
        return f"afile/{name}", "a file below a file"
    if kind == "read-only":
        os.chmod(work / "ro", 0o555)
        return f"ro/{name}", "a file in a read-only folder"
    if kind == "long":
        return "n" * rng.choice([255, 256, 300, 5000]) + suffix, "a name too long"
    if kind == "odd":
        return rng.choice([f"out\n{suffix}", f" {name}", f"{name} ", f"ü{suffix}", f"a:b{suffix}", f"*{suffix}",
                           f"{name}.part", f"x{suffix}\\y{suffix}"]), "an odd name"
    if kind == "dot":
        return rng.choice([".", "..", "./", "sub"]), "the current or an input's folder"
    if kind == "part":
        (work / f".{name}.part").write_text("someone else's temporary file\n")
        return name, "a new file whose temporary name is taken"
    if kind == "dev-null":
        os.symlink("/dev/null", work / f"null_{label}{suffix}")
        return f"null_{label}{suffix}", "a link to /dev/null"
    if kind == "fifo":
        os.mkfifo(work / f"fifo_{label}{suffix}")
        return f"fifo_{label}{suffix}", "a FIFO"
    if kind == "link-to-parent-file":
        os.symlink("afile", work / f"filelink_{label}")
        return f"filelink_{label}/{name}", "a file below a link to a file"
    return "sub", "the folder of an input"


def path_case(rng: random.Random, fx: Fixtures, work: Path) -> Case:
    command = rng.choices(["run", "emit-py", "compile", "export"], weights=[50, 25, 15, 10])[0]
    _setup(rng, fx, work, command)
    target, what = _target(rng, work, command, "out")
    overwrite = rng.random() < 0.4
    flags = ["--overwrite"] if overwrite else []
    outputs = [target]
    check = None
    if command == "run":
        inputs = rng.choice([["img.png"], ["x.npy"], ["img.png", "sub/img.png"], ["sub"], ["img.png", "x.npy"]])
        args = ["run", "p.ttplan", *inputs, "-o", target, *flags]
        if rng.random() < 0.3:
            viz, viz_what = (target, "the same as -o") if rng.random() < 0.3 else _target(rng, work, "run", "viz")
            viz = viz if not viz.endswith(".npz") or viz == target else viz[:-4] + ".png"
            args += ["--viz", viz]
            outputs.append(viz)
            what += f"; --viz {viz_what}"

        files = expanded(work, inputs)  # before the run: its results may land among the inputs

        def check(w: Path) -> str | None:
            import contextlib

            from spc.tools.run import output_paths

            with contextlib.chdir(w):
                for npz in output_paths(files, Path(target), ".npz"):
                    why = npz_consistent(npz, Path("p.ttplan"))
                    if why:
                        return why
            return None

        replaceable = _replaceable(work, outputs, inputs, overwrite)
    elif command == "emit-py":
        args = ["emit-py", "p.ttplan", "-o", target, *flags]
        check = lambda w: python_consistent(w / target)
        replaceable = _replaceable(work, outputs, ["p.ttplan"], overwrite)
    elif command == "compile":
        args = ["compile", "sp.onnx", "-o", target, *flags]
        if rng.random() < 0.3:
            dump = rng.choice(["dumps", "dir", "afile", ".", "sub", target])
            if dump == "." and rng.random() < 0.5:
                (work / "01-import.ir").write_text("an earlier dump\n")
            args += ["--dump-dir", dump]
            what += f"; --dump-dir {dump}"
        check = lambda w: plan_consistent(w / target)
        replaceable = _replaceable(work, outputs, ["sp.onnx"], overwrite)
        if "--dump-dir" in args and overwrite:
            dump_dir = args[args.index("--dump-dir") + 1]
            replaceable |= {os.path.normpath(os.path.join(dump_dir, p.name)) for p in (work / dump_dir).glob("[0-9]*")
                            if (work / dump_dir).is_dir()}
    else:
        # only refusals, decided before anything is exported: an existing output, a folder, an input
        target, what = rng.choice([("existing.onnx", "an existing file"), ("dir", "an existing folder"),
                                   ("afile/x.onnx", "a file below a file"), ("p.ttplan", "the weights it reads")])
        weights = target == "p.ttplan" or rng.random() < 0.3
        args = ["export", "-o", target, *(["--weights", "p.ttplan"] if weights else []),
                *(["--overwrite"] if target == "p.ttplan" and overwrite else [])]
        replaceable = frozenset()
    return Case(f"{command} -o {target[:40]!r}: {what}" + (" (--overwrite)" if overwrite else ""), args,
                replaceable=replaceable, check=check)


def _replaceable(work: Path, outputs: list[str], inputs: list[str], overwrite: bool) -> frozenset[str]:
    """What an ok run with ``--overwrite`` may replace: the outputs that are no input (a link named as
    the output is replaced itself, never the file it points to)."""
    if not overwrite:
        return frozenset()
    ins = {os.path.normpath(p) for p in inputs}
    out = set()
    for o in outputs:
        rel = os.path.normpath(os.path.relpath(os.path.join(work, o), work)) if os.path.isabs(o) else os.path.normpath(o)
        if rel not in ins:
            out.add(rel)
    return frozenset(out)
