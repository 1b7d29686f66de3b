"""Mutations shared by the generators: bytes (flips, truncation, splices) and JSON trees (a value
replaced by a neighbour, another value of the tree, another type; a key or element dropped or
duplicated)."""

from __future__ import annotations

import copy
import math
import random
from typing import Any

# strings that have broken parsers, printers and file systems before
NASTY_STRINGS = ["", " ", "x" * 600, "é", "名前", "\n", "a\nb", "\x00", "\x7f", "\u2028", "\ud7ff", "../../etc/passwd",
                 "/abs/path", "C:\\x", "%s%n", "{0}", "${HOME}", "'; import os; os.system('true') #",
                 "__import__('os').system('true')", '"""', "\\", "NaN", "Infinity", "-1", "0", "1e309", "null",
                 "true", "ttnn.conv2d", "onnx.Relu", "DRAM_INTERLEAVED", "bfloat16", "f32"]
INTS = [0, 1, -1, 2, 3, 7, 8, 31, 32, 33, 64, 255, 256, 1023, 1024, 65535, 65536, 2**24, 2**24 + 1, 2**28, 2**31 - 1,
        2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -2**31, -2**63, 10**30]
FLOATS = [0.0, -0.0, 0.5, -1.5, 1e-45, 5e-324, 1e38, 3.5e38, 1e308, math.inf, -math.inf, math.nan]


def flip_bytes(rng: random.Random, data: bytes, regions: list[tuple[int, int]] | None = None) -> tuple[bytes, str]:
    """One byte-level mutation of ``data``, positions drawn from ``regions`` (start, end) when given."""
    b = bytearray(data)

    def pos() -> int:
        if regions and rng.random() < 0.75:
            lo, hi = rng.choice(regions)
            return min(rng.randrange(lo, max(lo + 1, min(hi, len(b)))), len(b) - 1)
        return rng.randrange(max(1, len(b)))

    if not b:
        return bytes(rng.randbytes(rng.randint(1, 64))), "random bytes for an empty file"
    kind = rng.choice(["bit", "bit", "byte", "zero", "ff", "int32", "truncate", "truncate-end", "append", "insert",
                       "delete", "dup", "zero-span", "swap"])
    if kind == "bit":
        i = pos()
        b[i] ^= 1 << rng.randrange(8)
        return bytes(b), f"bit flipped at {i}"
    if kind == "byte":
        i = pos()
        b[i] = rng.randrange(256)
        return bytes(b), f"byte {i} set"
    if kind in ("zero", "ff"):
        i = pos()
        b[i] = 0 if kind == "zero" else 0xFF
        return bytes(b), f"byte {i} set to {b[i]:#x}"
    if kind == "int32":
        i = min(pos(), max(0, len(b) - 4))
        b[i:i + 4] = rng.choice([b"\xff\xff\xff\xff", b"\xff\xff\xff\x7f", b"\x00\x00\x00\x80", b"\0\0\0\0"])
        return bytes(b), f"4 bytes at {i} set to an extreme"
    if kind == "truncate":
        n = rng.randrange(len(b))
        return bytes(b[:n]), f"truncated to {n} of {len(b)} bytes"
    if kind == "truncate-end":
        n = max(0, len(b) - rng.randint(1, min(len(b), 400)))
        return bytes(b[:n]), f"truncated to {n} of {len(b)} bytes"
    if kind == "append":
        extra = rng.randbytes(rng.randint(1, 256)) if rng.random() < 0.5 else data[:rng.randint(1, 4096)]
        return bytes(b) + extra, f"{len(extra)} bytes appended"
    if kind == "insert":
        i = pos()
        extra = rng.randbytes(rng.randint(1, 64))
        return bytes(b[:i] + extra + b[i:]), f"{len(extra)} bytes inserted at {i}"
    if kind == "delete":
        i = pos()
        n = rng.randint(1, 64)
        return bytes(b[:i] + b[i + n:]), f"{n} bytes deleted at {i}"
    if kind == "dup":
        i = pos()
        n = rng.randint(1, 256)
        return bytes(b[:i] + b[i:i + n] + b[i:]), f"{n} bytes at {i} repeated"
    if kind == "zero-span":
        i = pos()
        n = rng.randint(1, 512)
        b[i:i + n] = bytes(len(b[i:i + n]))
        return bytes(b), f"{n} bytes zeroed at {i}"
    i, j = pos(), pos()
    b[i], b[j] = b[j], b[i]
    return bytes(b), f"bytes {i} and {j} swapped"


def _nodes(tree: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    out = []
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.append(((*path, k), v))
            out.extend(_nodes(v, (*path, k)))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out.append(((*path, i), v))
            out.extend(_nodes(v, (*path, i)))
    return out


def _get(tree: Any, path: tuple) -> Any:
    for k in path:
        tree = tree[k]
    return tree


def neighbour(rng: random.Random, v: Any, strings: list[str]) -> Any:
    """A value near ``v`` of (mostly) its own type: the edits that get past a schema."""
    if isinstance(v, bool):
        return rng.choice([not v, int(v), None, str(v).lower()])
    if isinstance(v, int):
        return rng.choice([v + 1, v - 1, -v, 2 * v, v // 2, 0, -1, 1, rng.choice(INTS), rng.choice(INTS), float(v),
                           str(v), True])
    if isinstance(v, float):
        return rng.choice([*FLOATS, -v, 2 * v, v / 3, int(v) if math.isfinite(v) else 0, str(v)])
    if isinstance(v, str):
        r = rng.random()
        if r < 0.55 and strings:
            return rng.choice(strings)
        if r < 0.85:
            return rng.choice(NASTY_STRINGS)
        return rng.choice([v + "_", v[:-1], v.upper(), v * 2, v + "\n", " " + v])
    if isinstance(v, list):
        if not v:
            return rng.choice([[0], [None], [{}], [1] * 9, [""]])
        return rng.choice([[], v[:-1], v[1:], v + [copy.deepcopy(v[-1])], list(reversed(v)), [v], v * 2,
                           [copy.deepcopy(v[0])] * 9])
    if isinstance(v, dict):
        if not v:
            return {"x": 1}
        keys = list(v)
        k = rng.choice(keys)
        d = dict(v)
        r = rng.random()
        if r < 0.4:
            d.pop(k)
        elif r < 0.7:
            d[rng.choice(["extra", "__array__", "__class__", k + "_", ""])] = rng.choice([1, "x", None, [], {}])
        else:
            d[k] = other_type(rng, d[k])
        return d
    return rng.choice([0, "", [], {}, False, 1.5])


def other_type(rng: random.Random, v: Any) -> Any:
    choices: list[Any] = [None, True, 0, -1, 2**63, 1.5, math.nan, "", "x", [], [1, 2], {}, {"a": 1}]
    return rng.choice([c for c in choices if type(c) is not type(v)] or choices)


def mutate_json(rng: random.Random, tree: Any, strings: list[str], focus: list[tuple] | None = None) -> str:
    """Mutate ``tree`` in place once; ``focus``: path prefixes to draw the node from (most of the
    time). Returns what was done."""
    nodes = _nodes(tree)
    if not nodes:
        return "nothing to mutate"
    if focus and rng.random() < 0.8:
        focused = [n for n in nodes if any(n[0][:len(f)] == f for f in focus)]
        nodes = focused or nodes
    path, value = rng.choice(nodes)
    parent = _get(tree, path[:-1])
    key = path[-1]
    where = ".".join(str(p) for p in path)
    r = rng.random()
    if r < 0.5:
        new = neighbour(rng, value, strings)
        parent[key] = new
        return f"{where} = {_short(new)}"
    if r < 0.68:
        same = [v for p, v in _nodes(tree) if type(v) is type(value) and p != path]
        if same:
            new = copy.deepcopy(rng.choice(same))
            parent[key] = new
            return f"{where} = another value of the plan ({_short(new)})"
    if r < 0.8:
        if isinstance(parent, dict):
            del parent[key]
        else:
            parent.pop(key)
        return f"{where} removed"
    if r < 0.9:
        if isinstance(parent, list):
            parent.insert(key, copy.deepcopy(value))
            return f"{where} duplicated"
        parent[rng.choice(["extra", str(key) + "2", "__proto__"])] = copy.deepcopy(value)
        return f"{where} copied under a new key"
    new = other_type(rng, value)
    parent[key] = new
    return f"{where} = {_short(new)} (another type)"


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def strings_of(tree: Any) -> list[str]:
    """Every string of a JSON tree, keys included: the vocabulary the neighbours draw from."""
    out: set[str] = set()

    def walk(t: Any) -> None:
        if isinstance(t, dict):
            for k, v in t.items():
                out.add(k)
                walk(v)
        elif isinstance(t, list):
            for v in t:
                walk(v)
        elif isinstance(t, str):
            out.add(t)

    walk(tree)
    return sorted(out)
