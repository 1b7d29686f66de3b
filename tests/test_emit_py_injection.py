"""`spc emit-py` on a hostile plan: no text from the plan ever becomes code in the program.

A plan is untrusted (anyone can edit one and recompute its hashes and the manifest's digest).
Here every string of a compiled plan that could reach the program is replaced by one built to
break out of a literal, a docstring, a comment or a format string (each carrying a
payload that creates a marker file), and the program emit-py writes is checked: plan strings
appear in it only as string literals (tokens and AST), its structure is the clean plan's, and
running it (on a stub ttnn that records calls, and without ttnn) makes the clean plan's ttnn
calls and never creates the marker.
"""

from __future__ import annotations

import ast
import collections
import copy
import functools
import io
import math
import os
import re
import subprocess
import sys
import tokenize
import zipfile
from pathlib import Path

import numpy as np
import pytest

from spc.errors import SpcError
from spc.plan.io import Plan, read_plan
from spc.plan.schema import MAX_NAME
from spc.tools.emit_py import RESERVED, Names, literal, render
from spc.ttnn.calls import Attr, Call, Ref
from tests.conftest import spc
from tests.test_ttnn_mock import rewrite

MARK = "ZQX"  # in every hostile string, and in nothing else
# what the tokenizer or an editor may take for a line break, or what no source should hold raw
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")

# a ttnn that records the calls a program makes (module-level __getattr__, PEP 562): every
# attribute is a stub, calling one returns a stub that unpacks into two (conv2d, topk) and reads
# back as zeros
STUB_TTNN = '''
import atexit, os

LOG = []


class Stub:
    def __init__(self, path="result"):
        self._path = path

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Stub(self._path + "." + name)

    def __call__(self, *args, **kwargs):
        if self._path.startswith("ttnn."):
            LOG.append(self._path + "(" + ", ".join(sorted(kwargs)) + ")")
        return Stub()

    def __iter__(self):
        return iter((Stub(), Stub()))

    def __int__(self):
        return 1

    def __float__(self):
        return 0.0


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return Stub("ttnn." + name)


atexit.register(lambda: open(os.environ["STUB_TTNN_LOG"], "w").write("\\n".join(LOG)))
'''


def payload(marker: Path) -> str:
    return f"__import__('pathlib').Path({str(marker)!r}).touch()"


def long_name(p: str) -> str:
    """A name as long as a plan may hold (with MARK and a number before it), ending in ``p``: as long
    whatever folder the marker is in (a longer pytest temporary folder must not push it past)."""
    return "A" * (MAX_NAME - 16 - len(p)) + p


def printable_fragments(p: str) -> list[str]:
    """Break-outs with printable characters only (what any check of names lets through)."""
    return [f'"""; {p}; """', f"'''; {p}; '''", f'"); {p}; ("', f"'); {p}; ('", f"]); {p}; ([", f"# {p}",
            "\\", f"\\'; {p}; '", f'\\"; {p}; "', "{" + p + "}", "{0}{1!r}{x.__class__}", "{{}}", "${" + p + "}",
            f"a b; {p}", f"x=1, y={p}", "\\N{BULLET}", f"%s%(x)s; {p}", "é ﬁ Ω", long_name(p),
            f"}}}}\"\"\"\n'''; {p}".replace("\n", " "), f"`{p}`", f"*/{p}/*", "<!--", "ttnn.relu; " + p]


def lone_fragments(p: str) -> list[str]:
    """What breaks out of one literal, docstring or comment on its own."""
    return [f'"""; {p}; """', f"'''; {p}; '''", f'"); {p}; ("', f"'); {p}; ('", f"\n{p}\n", f"\r{p}\r",
            f"\u2028{p}\u2028", f"\x0c{p}", f"\\\n{p}", "{" + p + "}", "${" + p + "}", "A" * 5000 + f"\n{p}\n"]


def control_fragments(p: str) -> list[str]:
    """Break-outs with line breaks and control characters (a comment ends at any of them)."""
    breaks = ["\n", "\r", "\r\n", "\u2028", "\u2029", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\x00",
              "\t", "\x1b[2J", "\x7f"]
    return ([f"{b}{p}{b}" for b in breaks] + [f'"""\n{p}\n"""', f"'''\n{p}\n'''", f"\nimport os; os.system('{p}')\n",
                                              f"\\\n{p}", f"#\n{p}\n#", "A" * 5000 + p + "\n"]
            + printable_fragments(p))


class Hostile:
    """Distinct hostile strings, cycling through ``fragments``: MARK and a number first, so the
    fragment is what follows the opening of whatever literal or comment it lands in."""

    def __init__(self, fragments: list[str]) -> None:
        self.fragments, self.made = fragments, []

    def __call__(self) -> str:
        n = len(self.made)
        text = f"{MARK}{n}{self.fragments[n % len(self.fragments)]}"
        self.made.append(text)
        return text


def make_hostile(plan: Plan, new: Hostile, everything: bool) -> tuple[Plan, list[str]]:
    """``plan`` with every name, weight key, block, host node name and the source file hostile
    (names renamed consistently, so the plan stays coherent), and with ``everything`` also the
    source's sha256, the target, notes, roles and a call argument (which a check of the plan's
    schema refuses); and the strings the program must carry."""
    p = plan.program
    names: set[str] = set(plan.weights)
    names |= {t.name for t in p.inputs + p.outputs + p.device_inputs + p.device_outputs + p.fallback_outputs}
    names |= {t.name for t in p.probes.values()} | {c.name for c in p.constants} | {c.weight for c in p.constants}
    names |= set(p.values) | {t.name for t in p.values.values()}
    for n in p.host_pre + p.host_post + p.fallback_post:
        names |= {i for i in n.inputs if i is not None} | set(n.outputs)
    for op in p.device_ops:
        names |= set(op.inputs) | set(op.results) | set(op.weights.values())
    rename = {n: new() for n in sorted(names)}
    blocks = {b: new() for b in sorted({op.block for op in p.device_ops})}

    for t in p.inputs + p.outputs + p.device_inputs + p.device_outputs + p.fallback_outputs:
        t.name = rename[t.name]
    p.values = {rename[k]: t for k, t in p.values.items()}
    for t in p.values.values():
        t.name = rename[t.name]
    p.probes = {new(): t for t in p.probes.values()}
    for t in p.probes.values():
        t.name = rename.get(t.name, t.name)
    for n in p.host_pre + p.host_post + p.fallback_post:
        n.name = new()
        n.inputs = [None if i is None else rename[i] for i in n.inputs]
        n.outputs = [rename[o] for o in n.outputs]
    for c in p.constants:
        c.name, c.weight = rename[c.name], rename[c.weight]
    p.roles = {rename.get(k, k): {**v, "role": new(), "spec": new()} if everything else v for k, v in p.roles.items()}
    hostile_args = []
    for op in p.device_ops:
        op.inputs = [rename[i] for i in op.inputs]
        op.output, op.extra_outputs = rename[op.output], [rename[o] for o in op.extra_outputs]
        op.weights = {k: rename[v] for k, v in op.weights.items()}
        op.block, op.source = blocks[op.block], new()
        if everything and op.op == "ttnn.softmax":  # a plain argument: only ever a literal
            op.args["numeric_stable"] = new()
            hostile_args.append(op.args["numeric_stable"])
    weights = {rename[k]: v for k, v in plan.weights.items()}
    source = dict(plan.manifest["source"], file=new())
    manifest = dict(plan.manifest, source=source)
    if everything:
        manifest.update(source=dict(source, sha256=new()), target=new(), notes=[new()])

    shown = [manifest["source"]["file"], *([manifest["source"]["sha256"]] if everything else []), *hostile_args,
             *blocks.values(),
             *{n for op in p.device_ops for n in [*op.inputs, *op.results, *op.weights.values()]},
             *(t.name for t in p.device_inputs + p.device_outputs), *(c.weight for c in p.constants)]
    return Plan(manifest, p, weights, plan.ir_text), shown


@functools.lru_cache(maxsize=8)
def clean_shape(source: str) -> tuple:
    return shape_of(ast.parse(source))


def shape_of(tree: ast.AST) -> tuple:
    """A program's structure without its constants: node types, call targets, imports."""

    def target(node: ast.AST) -> str:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return f"{target(node.value)}.{node.attr}"
        if isinstance(node, ast.Subscript):
            return f"{target(node.value)}[]"
        if isinstance(node, ast.Call):
            return f"{target(node.func)}()"
        return type(node).__name__

    types = collections.Counter(type(n).__name__ for n in ast.walk(tree) if not isinstance(n, ast.Constant))
    calls = collections.Counter(target(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call))
    imports = [ast.dump(n) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    return types, calls, imports


def assert_safe(source: str, clean: str, shown: list[str]) -> None:
    compile(source, "program.py", "exec", dont_inherit=True)
    assert not RAW_CONTROL.search(source), RAW_CONTROL.search(source)
    # a plan string is inside a string literal, or nowhere: not in a name, a comment, an operator
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        assert MARK not in tok.string or tok.type == tokenize.STRING, (tokenize.tok_name[tok.type], tok.string[:200])
    tree = ast.parse(source)
    docs = [ast.get_docstring(n) or "" for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef))]
    assert not any(MARK in d for d in docs)
    # ... whole, as the value of a literal (what the program reads is what the plan says)
    constants = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert [s for s in shown if s not in constants] == []
    # and the program is the clean plan's program, but for its constants
    assert shape_of(tree) == clean_shape(clean)


def run_program(program: Path, plan_path: Path, x: np.ndarray, tmp: Path, stub: bool) -> tuple[subprocess.CompletedProcess, Path]:
    np.save(tmp / "x.npy", x)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    env["STUB_TTNN_LOG"] = str(tmp / "calls.log")
    if stub:
        (tmp / "stub").mkdir(exist_ok=True)
        (tmp / "stub" / "ttnn.py").write_text(STUB_TTNN)
        env["PYTHONPATH"] = str(tmp / "stub")
    out = tmp / "out.npz"
    done = subprocess.run([sys.executable, str(program), str(plan_path), str(tmp / "x.npy"), str(out)],
                          capture_output=True, text=True, check=False, cwd=tmp, env=env)
    return done, tmp / "calls.log"


@pytest.fixture(scope="module")
def clean(small_plan: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    """The clean plan's program and the ttnn calls it makes on the stub."""
    tmp = tmp_path_factory.mktemp("clean")
    code, _, err = spc("emit-py", small_plan, "-o", tmp / "program.py")
    assert code == 0, err
    x = np.zeros(read_plan(small_plan).program.device_inputs[0].device_shape, np.float32)
    done, log = run_program(tmp / "program.py", small_plan, x, tmp, stub=True)
    assert done.returncode == 0, done.stderr[-3000:]
    calls = log.read_text().splitlines()
    assert sum(c.startswith("ttnn.conv2d(") for c in calls) == 12
    return (tmp / "program.py").read_text(), calls


def check_runs(program: Path, plan_path: Path, plan: Plan, clean_calls: list[str], marker: Path, tmp: Path) -> None:
    x = np.zeros(plan.program.device_inputs[0].device_shape, np.float32)
    # without ttnn the program stops at `import ttnn`: nothing of the plan ran before it
    done, _ = run_program(program, plan_path, x, tmp, stub=False)
    assert done.returncode != 0 and "No module named 'ttnn'" in done.stderr, done.stderr[-3000:]
    assert not marker.exists()
    # on the stub it runs to the end, makes the clean program's calls, writes the plan's outputs
    done, log = run_program(program, plan_path, x, tmp, stub=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not marker.exists()
    assert log.read_text().splitlines() == clean_calls
    with np.load(tmp / "out.npz") as got:
        assert sorted(got.files) == sorted(t.name for t in plan.program.device_outputs)


def test_printable_hostile_plan_makes_a_safe_program(small_plan: Path, clean: tuple[str, list[str]],
                                                     tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    plan, shown = make_hostile(read_plan(small_plan), Hostile(printable_fragments(payload(marker))), everything=False)
    path = rewrite(plan, tmp_path / "hostile.ttplan")
    program = tmp_path / "program.py"
    code, _, err = spc("emit-py", path, "-o", program)
    assert code == 0, err
    assert not marker.exists()
    source = program.read_text()
    assert_safe(source, clean[0], shown)
    lint = subprocess.run([str(Path(sys.executable).parent / "ruff"), "check", "--no-cache", "--select", "F,E9",
                           str(program)], capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout[-3000:]
    check_runs(program, path, plan, clean[1], marker, tmp_path)


def test_hostile_plan_with_line_breaks_makes_a_safe_program(small_plan: Path, clean: tuple[str, list[str]],
                                                            tmp_path: Path) -> None:
    """Names with newlines, carriage returns, Unicode line separators, NULs: emit-py writes them
    as escapes inside literals; `spc emit-py` may also refuse such a plan, in one line."""
    from spc.tools.emit_py import emit_py

    marker = tmp_path / "PWNED"
    plan, shown = make_hostile(read_plan(small_plan), Hostile(control_fragments(payload(marker))), everything=True)
    plan.manifest["source"]["file"] += "\ud800"  # a lone surrogate: no UTF-8 for it
    shown[0] = plan.manifest["source"]["file"]
    source = emit_py(plan)
    assert_safe(source, clean[0], shown)
    program = tmp_path / "program.py"
    program.write_text(source)
    # the program reads only the weights from the plan file
    from safetensors.numpy import save

    weights_only = tmp_path / "weights.ttplan"
    with zipfile.ZipFile(weights_only, "w") as zf:
        zf.writestr("weights.safetensors", save(plan.weights))
    check_runs(program, weights_only, plan, clean[1], marker, tmp_path)

    # through the command line: the same program, or a one-line refusal
    plan.manifest["source"]["file"] = plan.manifest["source"]["file"].replace("\ud800", "")
    try:
        path = rewrite(plan, tmp_path / "hostile.ttplan")
    except (SpcError, ValueError):
        return  # refused when written
    code, _, err = spc("emit-py", path, "-o", tmp_path / "cli.py")
    if code == 0:
        assert_safe((tmp_path / "cli.py").read_text(encoding="utf-8"), clean[0], [s.replace("\ud800", "") for s in shown])
    else:
        assert code == 1 and len(err.strip().splitlines()) == 1 and err.startswith("spc: error:"), err
    assert not marker.exists()


def test_an_argument_name_that_is_not_a_keyword_is_refused(small_plan: Path, tmp_path: Path) -> None:
    plan = read_plan(small_plan)
    conv = next(op for op in plan.program.device_ops if op.op == "ttnn.conv2d")
    conv.args["x=__import__('os').system('true'), y"] = 1
    path = rewrite(plan, tmp_path / "bad.ttplan")
    code, _, err = spc("emit-py", path, "-o", tmp_path / "program.py")
    assert code == 1 and len(err.strip().splitlines()) == 1 and err.startswith("spc: error:"), err
    assert not (tmp_path / "program.py").exists()


@pytest.mark.parametrize("bad", [Attr("os.system"), Attr("ttnn.x; import os"), Attr("ttnn.a\nimport os"), Attr("ttnn"),
                                 Attr("ttnn.bfloat16()"), Attr("ttnn..x"), Attr("ttnn.\u0430"), Attr(1),
                                 Call("os.system", ("true",)), Call("ttnn.relu", (), {"a=1, b": 2}),
                                 Call("ttnn.relu", (), {"lambda": 2}), Call("ttnn.relu", (Ref("x"),), {"é": 1}),
                                 Ref(3), object(), {1, 2}, b"bytes", 1j, np.array(["a"])])
def test_what_cannot_be_spelled_safely_is_refused(bad: object) -> None:
    with pytest.raises(SpcError):
        render(bad, Names())


class Sneaky(str):
    def __repr__(self) -> str:
        return "__import__('os')"


def test_literals_are_python_literals_of_the_same_value() -> None:
    values = [None, True, False, 0, -7, 2**70, 0.1, -0.0, 1e300, 5e-324, [1, [2.5, "a"]], (1,), (), {"k": [None]},
              "", "'", '"', "'\"", "\\", "\n\r\u2028\x00", "é\U0001f600", "\ud800"]
    for v in values:
        text = literal(v)
        assert not RAW_CONTROL.search(text), text
        assert ast.literal_eval(text) == v and type(ast.literal_eval(text)) is type(v), text
    for v, want in [(math.nan, "float('nan')"), (math.inf, "float('inf')"), (-math.inf, "-float('inf')")]:
        assert literal(v) == want
        got = eval(compile(literal(v), "<literal>", "eval"), {"__builtins__": {"float": float}})
        assert got == v or (math.isnan(got) and math.isnan(v))
    assert literal(np.float32(0.5)) == "0.5" and literal(np.int64(3)) == "3" and literal(np.bool_(True)) == "True"
    assert literal(np.array([[1, 2]], np.int64)) == 'np.array([[1, 2]], dtype="int64")'
    for bad in [Sneaky("x"), Exception("x"), np.array([object()]), np.str_("x"), {1}, b"x"]:
        with pytest.raises(SpcError):
            literal(bad)


def test_tensor_names_become_distinct_plain_identifiers() -> None:
    names = Names()
    plans = ["a/b", "a__b", "a.b", "a_b", "ttnn", "device", "weights", "w", "b", "np", "float", "t_1", "t_2", "1x",
             "class", "None", "__debug__", "é", "ﬁ", "fi", "x" * 65, "", "a b", "relu"]
    got = [names(n) for n in plans]
    assert len(set(got)) == len(got)
    assert all(g.isidentifier() and g.isascii() and g not in RESERVED and g not in ("None", "class") for g in got)
    assert got[0] == "a__b" and got[-1] == "relu" and names("a/b") == "a__b"
    assert {names.opaque[g] for g in got if g in names.opaque} >= {"é", "ﬁ", "x" * 65, "", "a b", "a__b"}
    with pytest.raises(SpcError):
        names(1)


def _rename_tensor(plan: Plan, old: str, new: str) -> None:
    p = plan.program
    for t in p.device_inputs + p.device_outputs:
        t.name = new if t.name == old else t.name
    for op in p.device_ops:
        op.inputs = [new if i == old else i for i in op.inputs]
        op.output = new if op.output == old else op.output


def _as_kernel(plan: Plan, name: str) -> None:
    from spc.plan.program import TtOp

    ops = plan.program.device_ops
    i, op = next((i, op) for i, op in enumerate(ops) if op.op == "ttnn.softmax")
    ops[i] = TtOp("spc.kernel", op.inputs, op.output, {"kernel": name, "params": {}, "composed": [op.to_json()]},
                  op.source, op.dtype, op.block, op.shape)


def _weight_key(plan: Plan, new: str) -> None:
    conv = next(op for op in plan.program.device_ops if op.op == "ttnn.conv2d")
    for role, key in conv.weights.items():
        plan.weights[new + role] = plan.weights.pop(key)
        conv.weights[role] = new + role


EDITS = {
    "source file": lambda plan, s: plan.manifest["source"].update(file=s),
    "source sha256": lambda plan, s: plan.manifest["source"].update(sha256=s),
    "block": lambda plan, s: setattr(plan.program.device_ops[3], "block", s),
    "weight key": _weight_key,
    "device input": lambda plan, s: _rename_tensor(plan, plan.program.device_inputs[0].name, s),
    "conv output": lambda plan, s: _rename_tensor(plan, plan.program.device_ops[0].output, s),
    "device output": lambda plan, s: _rename_tensor(plan, plan.program.device_outputs[0].name, s),
    "kernel name": _as_kernel,
}


@pytest.mark.parametrize("field", sorted(EDITS))
def test_each_field_alone_takes_every_hostile_string_as_data(field: str, small_plan: Path, tmp_path: Path) -> None:
    """One field at a time (where a lone break-out would work), every fragment: the program is the
    program of the same plan with a plain string there, but for its constants; and run, it
    stops at `import ttnn` without the payload having run."""
    from spc.tools.emit_py import emit_py

    marker = tmp_path / "PWNED"
    original = read_plan(small_plan)
    reference = copy.deepcopy(original)
    EDITS[field](reference, "plain_name")
    clean = emit_py(reference)
    program = tmp_path / "program.py"
    for fragment in lone_fragments(payload(marker)):
        plan = copy.deepcopy(original)
        hostile = MARK + fragment
        EDITS[field](plan, hostile)
        source = emit_py(plan)
        shown = [] if field == "kernel name" else [hostile + "bias_tensor", hostile + "weight_tensor"] \
            if field == "weight key" else [hostile]
        assert_safe(source, clean, shown)
        if fragment.startswith(('"""', "'''", "\n")):
            program.write_text(source)
            done, _ = run_program(program, small_plan, np.zeros([1], np.float32), tmp_path, stub=False)
            assert "No module named 'ttnn'" in done.stderr, done.stderr[-3000:]
            assert not marker.exists()
