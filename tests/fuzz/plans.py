"""Hostile plans: the bytes of a real plan flipped and cut (``plan-bytes``), and its members
edited with their hashes recomputed, so that the edit reaches validation and, when it passes,
the runtime (``plan-members``): program.json fields (call names, arguments, shapes, formats,
memory configurations, tensor names, host attributes), the weights (header, dtypes, NaN), the
manifest (format_version, target ...) and the zip itself (extra, missing and duplicate members,
huge declared sizes, other compressions)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
import struct
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from tests.fuzz.harness import PLAN_VARIANTS, Case, Fixtures, npz_consistent, python_consistent, save_npy
from tests.fuzz.mutate import flip_bytes, mutate_json, neighbour, strings_of

MEMBERS = ("manifest.json", "program.json", "weights.safetensors", "ir.txt")


def _variant(rng: random.Random) -> str:
    return rng.choices(list(PLAN_VARIANTS), weights=[3, 1, 1])[0]


# -- the command run on a plan --------------------------------------------------------------
def _input_shape(program: Any, fallback: list[int]) -> list[int]:
    """The input shape the (edited) program declares, where it is one a .npy can have."""
    try:
        shape = program["inputs"][0]["shape"]
        if (isinstance(shape, list) and all(type(d) is int and 1 <= d <= 4096 for d in shape)
                and math.prod(shape) <= 1 << 20):
            return shape
    except (KeyError, IndexError, TypeError):
        pass
    return fallback


def command(rng: random.Random, work: Path, plan: str, shape: list[int]) -> tuple[list[str], Any, str]:
    """A command that reads ``plan`` and, mostly, runs it on one input: (args, check, what)."""
    x = rng.choice([np.random.default_rng(rng.randrange(1 << 30)).random(shape, dtype=np.float32),
                    np.zeros(shape, np.float32), np.full(shape, 0.5, np.float32)])
    save_npy(work / "x.npy", x)
    r = rng.random()
    if r < 0.65:
        dense = rng.random() < 0.25
        args = ["run", plan, "x.npy", "-o", "out.npz", *(["--dense"] if dense else [])]
        return args, lambda w: npz_consistent(w / "out.npz", w / plan, dense), "run"
    if r < 0.8:
        return ["inspect", plan, *(["--json"] if rng.random() < 0.5 else [])], None, "inspect"
    if r < 0.9:
        return ["emit-py", plan, "-o", "prog.py"], lambda w: python_consistent(w / "prog.py"), "emit-py"
    return ["bench", plan, "x.npy", "--frames", "1"], None, "bench"


# -- plan-bytes -----------------------------------------------------------------------------
def zip_regions(data: bytes) -> list[tuple[int, int]]:
    """Where a plan's structure is: local headers, the JSON members' (deflated) data, the
    safetensors header, the central directory and its end record."""
    regions = []
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for info in zf.infolist():
            start = info.header_offset
            name_len, extra_len = struct.unpack("<HH", data[start + 26:start + 30])
            body = start + 30 + name_len + extra_len
            regions.append((start, body))
            if info.filename.endswith(".safetensors"):
                regions.append((body, body + 8 + int.from_bytes(data[body:body + 8], "little")))
            else:
                regions.append((body, body + info.compress_size))
    cd = int.from_bytes(data[-6:-2], "little")
    regions.append((cd, len(data)))
    return regions


def odd_file(rng: random.Random, path: Path) -> str:
    """``path`` made something that is not a regular file of bytes: what it is."""
    import os

    kind = rng.choice(["fifo", "folder", "dev-zero", "dev-urandom", "dev-null", "dangling", "loop", "empty",
                       "unreadable"])
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
        (path / "manifest.json").write_text("{}")
    elif kind.startswith("dev-"):
        os.symlink("/dev/" + kind[4:], path)
    elif kind == "dangling":
        os.symlink("nowhere", path)
    elif kind == "loop":
        os.symlink(path.name, path)
    elif kind == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(b"PK\x03\x04")
        path.chmod(0)
    return f"the file is {kind}"


def plan_bytes(rng: random.Random, fx: Fixtures, work: Path) -> Case:
    variant = _variant(rng)
    if rng.random() < 0.05:
        what = odd_file(rng, work / "p.ttplan")
        args, check, cmd = command(rng, work, "p.ttplan", fx.input_shape(variant))
        return Case(f"{what}; {cmd}", args, check=check)
    data = fx.plan_bytes(variant)
    regions = zip_regions(data)
    done = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        data, what = flip_bytes(rng, data, regions)
        done.append(what)
    (work / "p.ttplan").write_bytes(data)
    args, check, cmd = command(rng, work, "p.ttplan", fx.input_shape(variant))
    return Case(f"{variant} plan, {'; '.join(done)}; {cmd}", args, check=check)


# -- plan-members ---------------------------------------------------------------------------
def json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True, allow_nan=True) + "\n").encode()


def _vocabulary() -> list[str]:
    from spc.ir import ops
    from spc.kernels import KERNELS
    from spc.ttnn.calls import CALLS
    from spc.ttnn.formats import DataFormat, MathFidelity

    ops.get("onnx.Relu")
    words = [*CALLS, *ops.REGISTRY, *KERNELS, *(m.value for m in MathFidelity), *(d.value for d in DataFormat),
             "f32", "f64", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "u16", "u32", "u64", "i1", "bool",
             "DRAM_INTERLEAVED", "L1_INTERLEAVED", "L1_HEIGHT_SHARDED", "DRAM_BLOCK_SHARDED", "TILE_LAYOUT",
             "ROW_MAJOR_LAYOUT", "TILE", "ROW_MAJOR", "HEIGHT_SHARDED", "WIDTH_SHARDED", "BLOCK_SHARDED",
             "INTERLEAVED", "relu", "gelu", "l1_full", "dram_height", "dram_width", "nhwc", "plain", "nchw",
             "p150", "n150", "n300", "wormhole", "threshold", "topk", "keypoints", "scores", "descriptors", "mask",
             "score_map", "descriptor_map", "nms_map"]
    return sorted(set(words))


def _calls(program: dict, ops: set[str] | None = None) -> list[dict]:
    calls = [c for c in program.get("device_ops", []) if isinstance(c, dict)]
    return [c for c in calls if isinstance(c.get("op"), str) and c["op"] in ops] if ops else calls


def _tensor_names(program: dict) -> list[str]:
    names = []
    for c in _calls(program):
        names += [n for n in [*c.get("inputs", []), c.get("output")] if isinstance(n, str)]
    return sorted(set(names))


def _rename(tree: Any, old: str, new: str) -> Any:
    if isinstance(tree, dict):
        return {(new if k == old else k): _rename(v, old, new) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_rename(v, old, new) for v in tree]
    return new if tree == old else tree


def semantic_edit(rng: random.Random, program: dict, words: list[str]) -> tuple[dict, str]:
    """An edit that keeps the program's JSON well-formed and often valid: what gets past the
    schema to the verifier and the runtime."""
    from spc.ttnn.calls.elementwise import BINARY, UNARY

    unary, binary = sorted(f"ttnn.{n}" for n in UNARY), sorted(f"ttnn.{n}" for n in BINARY)
    calls = _calls(program)
    kind = rng.choice(["unary", "binary", "activation", "fidelity", "format", "memory", "slice", "host-attr",
                       "rename", "swap-inputs", "drop-fallback", "drop-probes", "reshape", "form", "args",
                       "roles", "output-dtype", "scalar", "input-shape", "conv-geometry", "kernel-params"])
    if kind == "unary" and _calls(program, set(unary)):
        c = rng.choice(_calls(program, set(unary)))
        c["op"] = rng.choice(unary)
        return program, f"a unary call becomes {c['op']}"
    if kind == "binary" and _calls(program, set(binary)):
        c = rng.choice(_calls(program, set(binary)))
        c["op"] = rng.choice(binary)
        return program, f"a binary call becomes {c['op']}"
    convs = _calls(program, {"ttnn.conv2d"})
    if kind == "activation" and convs:
        c = rng.choice(convs)
        v = rng.choice([None, "relu", "gelu", "RELU", ""])
        c["args"]["conv_config"]["activation"] = v
        return program, f"a conv's activation = {v!r}"
    if kind == "fidelity" and convs:
        c = rng.choice(convs)
        cc = c["args"]["compute_config"]
        key = rng.choice(list(cc))
        cc[key] = rng.choice(["LoFi", "HiFi2", "HiFi3", "HiFi4", "HiFi5", True, False, 1, None])
        return program, f"a conv's compute_config.{key} = {cc[key]!r}"
    if kind == "format" and calls:
        c = rng.choice(calls)
        fmt = rng.choice(["float32", "bfloat16", "bfloat8_b", "bfloat4_b", "uint32", "uint16", "int32", "f32"])
        where = rng.choice(["dtype", "args.dtype", "conv_config.weights_dtype", "extra_dtypes"])
        if where == "dtype":
            c["dtype"] = fmt
        elif where == "args.dtype" and "dtype" in c.get("args", {}):
            c["args"]["dtype"] = fmt
        elif where == "conv_config.weights_dtype" and "conv_config" in c.get("args", {}):
            c["args"]["conv_config"]["weights_dtype"] = fmt
        elif c.get("extra_dtypes"):
            c["extra_dtypes"] = [fmt]
        else:
            c["dtype"] = fmt
        return program, f"call {c['op']}: {where} = {fmt}"
    if kind == "memory" and calls:
        c = rng.choice(calls)
        key = rng.choice(["DRAM_INTERLEAVED", "L1_INTERLEAVED", "L1_HEIGHT_SHARDED", "DRAM_WIDTH_SHARDED", "L1", ""])
        c.setdefault("args", {})["memory_config"] = key
        return program, f"call {c['op']}: memory_config = {key}"
    if kind == "slice":
        sliced = [c for c in calls if "slice_config" in c.get("args", {})]
        if sliced:
            c = rng.choice(sliced)
            v: dict[str, Any] = {"type": rng.choice(["l1_full", "dram_height", "dram_width", "dram", "L1_FULL"])}
            if rng.random() < 0.8:
                v["num_slices"] = rng.choice([1, 2, 3, 8, 64, 0, -1, 2**31, 10**12, math.inf, math.nan, 1.5, "2"])
            c["args"]["slice_config"] = v
            return program, f"call {c['op']}: slice_config = {v}"
    if kind == "host-attr":
        nodes = [n for stage in ("host_pre", "host_post", "fallback_post") for n in program.get(stage, [])
                 if isinstance(n, dict) and n.get("attrs")]
        if nodes:
            n = rng.choice(nodes)
            key = rng.choice(list(n["attrs"]))
            n["attrs"][key] = neighbour(rng, n["attrs"][key], words)
            return program, f"host node {n.get('op')}: {key} = {str(n['attrs'][key])[:40]}"
    if kind == "rename":
        names = _tensor_names(program)
        if names:
            old = rng.choice(names)
            new = rng.choice([old + "_renamed", "x" * 300, "a b", "é", "renamed"])
            return _rename(program, old, new), f"tensor {old} renamed {new[:20]} everywhere"
    if kind == "swap-inputs":
        two = [c for c in calls if len(c.get("inputs", [])) >= 2]
        if two:
            c = rng.choice(two)
            c["inputs"] = list(reversed(c["inputs"]))
            return program, f"call {c['op']}: inputs swapped"
    if kind == "drop-fallback":
        program["fallback_outputs"], program["fallback_post"] = [], []
        return program, "the fallback stage removed"
    if kind == "drop-probes":
        probes = program.get("probes", {})
        if probes:
            probes.pop(rng.choice(sorted(probes)))
            return program, "a probe removed"
    if kind == "reshape" and calls:
        c = rng.choice(calls)
        shape = c.get("shape")
        if isinstance(shape, list) and shape:
            new = list(shape)
            rng.shuffle(new)
            if rng.random() < 0.5:
                new = [math.prod(d for d in shape if type(d) is int)] if rng.random() < 0.5 else [*new, 1]
            c["shape"] = new
            return program, f"call {c['op']}: shape {shape} -> {new}"
    if kind == "form":
        tensors = [t for k in ("device_inputs", "device_outputs", "fallback_outputs")
                   for t in program.get(k, []) if isinstance(t, dict)]
        if tensors:
            t = rng.choice(tensors)
            t["form"] = "plain" if t.get("form") == "nhwc" else "nhwc"
            return program, f"device tensor {t.get('name')}: form {t['form']}"
    if kind == "args":
        with_args = [c for c in calls if c.get("args")]
        if with_args:
            c = rng.choice(with_args)
            key = rng.choice(sorted(c["args"]))
            c["args"][key] = neighbour(rng, c["args"][key], words)
            return program, f"call {c['op']}: {key} = {str(c['args'][key])[:40]}"
    if kind == "roles" and program.get("roles"):
        name = rng.choice(sorted(program["roles"]))
        program["roles"][name] = rng.choice([{}, {"role": rng.choice(words)}, {"role": "keypoints", "spec": "bogus"}])
        return program, f"role of {name} = {program['roles'][name]}"
    if kind == "output-dtype" and program.get("outputs"):
        o = rng.choice(program["outputs"])
        o["dtype"] = rng.choice(["f32", "f16", "i32", "i64", "i1", "u8", "bf16"])
        return program, f"output {o.get('name')}: dtype {o['dtype']}"
    if kind == "scalar":
        scalar = [c for c in calls if any(k in c.get("args", {}) for k in ("scalar", "min", "max"))]
        if scalar:
            c = rng.choice(scalar)
            key = next(k for k in ("scalar", "min", "max") if k in c["args"])
            c["args"][key] = rng.choice([math.nan, math.inf, -math.inf, 0, -1e38, 1e38, 3e38])
            return program, f"call {c['op']}: {key} = {c['args'][key]}"
    if kind == "input-shape" and program.get("inputs"):
        shape = program["inputs"][0].get("shape")
        if isinstance(shape, list) and len(shape) == 4:
            new = rng.choice([[1, 3, 32, 48], [1, 1, shape[2], shape[3]], [2, *shape[1:]], [1, 3, 8, 8],
                              [1, 3, shape[2] + 8, shape[3]], [1, 3, shape[3], shape[2]]])
            program["inputs"][0]["shape"] = new
            return program, f"input shape {shape} -> {new}"
    if kind == "conv-geometry" and convs:
        c = rng.choice(convs)
        key = rng.choice(["kernel_size", "stride", "padding", "dilation", "groups", "input_height", "input_width",
                          "in_channels", "out_channels", "batch_size"])
        c["args"][key] = neighbour(rng, c["args"][key], words)
        return program, f"conv {c.get('block')}: {key} = {c['args'][key]}"
    if kind == "kernel-params":
        kernels = _calls(program, {"spc.kernel"})
        if kernels:
            c = rng.choice(kernels)
            params = c["args"].get("params", {})
            if params:
                key = rng.choice(sorted(params))
                params[key] = neighbour(rng, params[key], words)
                return program, f"kernel {c['args'].get('kernel')}: params.{key} = {str(params[key])[:40]}"
            c["args"]["kernel"] = rng.choice(words)
            return program, f"kernel renamed {c['args']['kernel']}"
    what = mutate_json(rng, program, words, focus=[("device_ops",), ("host_post",), ("device_outputs",)])
    return program, what


def weights_edit(rng: random.Random, data: bytes, program: dict, words: list[str]) -> tuple[bytes, str]:
    """The safetensors member edited: a tensor's values, dtype, shape or name, or its header."""
    try:
        return _weights_edit(rng, data, words)
    except Exception:  # an earlier edit broke the file: edit its bytes instead
        return flip_bytes(rng, data)


def _weights_edit(rng: random.Random, data: bytes, words: list[str]) -> tuple[bytes, str]:
    from safetensors.numpy import load, save

    kind = rng.choice(["nan", "nan", "dtype", "reshape", "drop", "add", "rename", "empty", "header", "header",
                       "header-length", "truncate", "metadata"])
    if kind in ("header", "header-length", "truncate", "metadata"):
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + n])
        body = data[8 + n:]
        if kind == "truncate":
            cut = rng.randrange(len(body))
            return data[:8 + n] + body[:cut], f"weights' data truncated to {cut} bytes"
        if kind == "header-length":
            v = rng.choice([0, 1, n - 1, n + 1, len(data), 2**63, 2**64 - 1])
            return v.to_bytes(8, "little") + data[8:], f"weights' header length = {v}"
        if kind == "metadata":
            header["__metadata__"] = rng.choice([{"format": "pt"}, {"x": 1}, [], None, {"format": "x" * 5000}])
            what = f"weights' __metadata__ = {str(header['__metadata__'])[:40]}"
        else:
            focus = [(k,) for k in header if k != "__metadata__"]
            what = "weights' header: " + mutate_json(rng, header, [*words, "F32", "F16", "BF16", "I64", "I32", "BOOL",
                                                                  "U8", "F64", "F8_E4M3", "C64", "dtype", "shape",
                                                                  "data_offsets"], focus=focus)
        text = json.dumps(header, allow_nan=True).encode()
        text += b" " * (-len(text) % 8)
        return len(text).to_bytes(8, "little") + text + body, what
    tensors = dict(load(data))
    names = sorted(tensors)
    name = rng.choice(names)
    a = tensors[name]
    if kind == "nan":
        b = a.astype(np.float32, copy=True).reshape(-1)
        if b.size:
            b[rng.randrange(b.size)] = rng.choice([np.nan, np.inf, -np.inf, 3e38, 1e-45])
        tensors[name] = b.reshape(a.shape)
        what = f"weight {name}: one value non-finite or extreme"
    elif kind == "dtype":
        dt = rng.choice([np.float16, np.float64, np.int32, np.int64, np.uint8, np.bool_, np.int8])
        tensors[name] = a.astype(dt)
        what = f"weight {name} stored as {np.dtype(dt).name}"
    elif kind == "reshape":
        shape = rng.choice([(a.size,), (1, *a.shape), a.shape[::-1], (a.size, 1)])
        tensors[name] = a.reshape(shape)
        what = f"weight {name} reshaped {list(a.shape)} -> {list(shape)}"
    elif kind == "drop":
        del tensors[name]
        what = f"weight {name} removed"
    elif kind == "add":
        tensors[rng.choice(["extra", name + "_", "x" * 300])] = np.zeros(rng.choice([(1,), (0,), (3, 3), ()]),
                                                                          np.float32)
        what = "a weight added"
    elif kind == "rename":
        tensors[name + rng.choice(["_", ".", " "])] = tensors.pop(name)
        what = f"weight {name} renamed"
    else:
        tensors[name] = np.zeros((0,) + a.shape[1:], a.dtype)
        what = f"weight {name} emptied"
    return save(tensors), what


def manifest_edit(rng: random.Random, manifest: dict, words: list[str]) -> tuple[set[str], str]:
    """Edit the manifest; returns what must stay as edited (``digest``, member names), not be
    recomputed."""
    kind = rng.choice(["version", "version", "target", "format", "field", "field", "field", "stale", "extra"])
    if kind == "version":
        v = rng.choice([0, 1, 3, 5, 99, -1, "4", 4.0, True, None, 2**64, [4]])
        manifest["format_version"] = v
        return set(), f"format_version = {v!r}"
    if kind == "target":
        v = rng.choice(["n150", "n300", "p150", "p151", "", None, "P150", 150, ["p150"]])
        manifest["target"] = v
        return set(), f"target = {v!r}"
    if kind == "format":
        v = rng.choice(["spc.ttplan2", "", None, "SPC.TTPLAN", 1])
        manifest["format"] = v
        return set(), f"format = {v!r}"
    if kind == "stale":
        r = rng.random()
        if r < 0.3:
            manifest["digest"] = rng.choice(["0" * 64, "", None, manifest.get("digest", "").upper()])
            return {"digest"}, "digest wrong"
        if r < 0.5:
            manifest.pop("digest", None)
            return {"digest"}, "digest removed"
        member = rng.choice(["program.json", "weights.safetensors", "ir.txt"])
        manifest["members"][member] = rng.choice(["0" * 64, "", None, 1])
        return {member}, f"members.{member} wrong (digest recomputed)"
    if kind == "extra":
        key = rng.choice(["extra", "__class__", "program", "weights", "x" * 100])
        manifest[key] = rng.choice([1, "x", None, {"a": [1, 2]}, "x" * 100000])
        return set(), f"manifest gains {key[:20]}"
    focus = [(k,) for k in manifest if k not in ("digest", "members")]
    return set(), "manifest: " + mutate_json(rng, manifest, words, focus=focus)


def assemble(rng: random.Random, members: dict[str, bytes], trick: bool) -> tuple[bytes, str]:
    """The plan zip from its members, with one zip-level trick when ``trick``."""
    kind = rng.choice(["extra", "missing", "duplicate", "directory", "rename", "compression", "declared-size",
                       "zip64", "encrypted", "bomb", "order", "comment", "prefix", "nested", "method"]) \
        if trick else "none"
    order = list(members)
    entries: list[tuple[str, bytes, int]] = [(n, members[n], zipfile.ZIP_STORED if n.endswith(".safetensors")
                                              else zipfile.ZIP_DEFLATED) for n in order]
    what = ""
    if kind == "extra":
        name = rng.choice(["extra.txt", "../evil", "/abs", "manifest.json/", "program.json ", "ir.TXT", "a" * 300])
        entries.append((name, b"extra", zipfile.ZIP_DEFLATED))
        what = f"an extra member {name[:20]!r}"
    elif kind == "missing":
        gone = rng.randrange(len(entries))
        what = f"member {entries[gone][0]} missing"
        del entries[gone]
    elif kind == "duplicate":
        i = rng.randrange(len(entries))
        name, data, method = entries[i]
        other = data[: len(data) // 2] if rng.random() < 0.5 else data
        entries.insert(rng.randrange(len(entries) + 1), (name, other, method))
        what = f"member {name} twice"
    elif kind == "directory":
        entries.append((rng.choice(["dir/", "manifest.json/"]), b"", zipfile.ZIP_STORED))
        what = "a folder entry"
    elif kind == "rename":
        i = rng.randrange(len(entries))
        name, data, method = entries[i]
        new = rng.choice(["./" + name, name.upper(), name + "\0", "x/" + name, name[:-1]])
        entries[i] = (new, data, method)
        what = f"member {name} named {new!r}"
    elif kind == "compression":
        i = rng.randrange(len(entries))
        method = rng.choice([zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA, zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
        entries[i] = (entries[i][0], entries[i][1], method)
        what = f"member {entries[i][0]} compressed with method {method}"
    elif kind == "bomb":
        size = rng.choice([(64 << 20) + 1, 65 << 20, 5 << 20])
        name = rng.choice(["ir.txt", "manifest.json", "program.json"])
        entries = [(n, b"\0" * size if n == name else d, zipfile.ZIP_DEFLATED if n == name else m)
                   for n, d, m in entries]
        what = f"member {name} inflates to {size} bytes"
    elif kind == "order":
        rng.shuffle(entries)
        what = "members reordered"
    buf = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buf, "w", allowZip64=True) as zf:
        warnings.simplefilter("ignore")  # "Duplicate name": deliberately
        if kind == "comment":
            zf.comment = rng.randbytes(rng.choice([10, 1000, 65535]))
            what = "a zip comment"
        for name, data, method in entries:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = method
            with zf.open(info, "w", force_zip64=kind == "zip64") as f:
                f.write(data)
    data = buf.getvalue()
    if kind == "zip64":
        what = "zip64 records"
    elif kind in ("declared-size", "encrypted", "method"):
        data, what = _patch_central(rng, data, kind)
    elif kind == "prefix":
        data = rng.randbytes(rng.choice([1, 100, 4096])) + data
        what = "bytes before the zip"
    elif kind == "nested":
        inner = data
        buf2 = io.BytesIO()
        with zipfile.ZipFile(buf2, "w") as zf:
            zf.writestr("plan.ttplan", inner)
        data = buf2.getvalue()
        what = "the plan inside another zip"
    return data, what or "no zip trick"


def _patch_central(rng: random.Random, data: bytes, kind: str) -> tuple[bytes, str]:
    """Edit one central directory entry: its declared size, its flags or its method."""
    b = bytearray(data)
    cd = int.from_bytes(b[-6:-2], "little")
    entries = []
    i = cd
    while b[i:i + 4] == b"PK\x01\x02":
        n, m, k = struct.unpack("<HHH", b[i + 28:i + 34])
        entries.append(i)
        i += 46 + n + m + k
    if not entries:
        return data, "no central directory to patch"
    e = rng.choice(entries)
    n = struct.unpack("<H", b[e + 28:e + 30])[0]
    name = bytes(b[e + 46:e + 46 + n]).decode(errors="replace")
    if kind == "declared-size":
        v = rng.choice([0xFFFFFFFF, (1 << 30) + 1, (64 << 20) + 1, 0, 1, 100])
        b[e + 24:e + 28] = v.to_bytes(4, "little")
        if rng.random() < 0.5:
            b[e + 20:e + 24] = rng.choice([0, 1, 0xFFFFFFFF]).to_bytes(4, "little")
        return bytes(b), f"member {name} declares {v} bytes"
    if kind == "encrypted":
        b[e + 8] |= 1
        return bytes(b), f"member {name} flagged encrypted"
    method = rng.choice([1, 6, 9, 12, 14, 98, 99, 0xFFFF])
    b[e + 10:e + 12] = method.to_bytes(2, "little")
    return bytes(b), f"member {name} method {method}"


_WORDS: list[str] = []


def plan_members(rng: random.Random, fx: Fixtures, work: Path) -> Case:
    from spc.plan.io import manifest_digest, sha256

    if not _WORDS:
        _WORDS.extend(_vocabulary())
    variant = _variant(rng)
    raw = fx.members(variant)
    manifest, program = fx.manifest(variant), fx.program(variant)
    words = sorted(set(_WORDS) | set(strings_of(program)))
    weights, ir_text = raw["weights.safetensors"], raw["ir.txt"]
    done: list[str] = []
    frozen: set[str] = set()
    trick = False
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3])):
        family = rng.choices(["semantic", "program", "weights", "manifest", "zip", "ir"],
                             weights=[30, 22, 15, 15, 12, 6])[0]
        if family == "semantic":
            try:
                program, what = semantic_edit(rng, program, words)
            except (KeyError, TypeError, AttributeError, IndexError, ValueError):  # an earlier edit broke the shape
                what = "program: " + mutate_json(rng, program, words)
        elif family == "program":
            what = "program: " + mutate_json(rng, program, words)
        elif family == "weights":
            weights, what = weights_edit(rng, weights, program, words)
        elif family == "manifest":
            keep, what = manifest_edit(rng, manifest, words)
            frozen |= keep
        elif family == "zip":
            trick, what = True, "zip"
        else:
            ir_text, what = rng.choice([(b"", "ir.txt empty"), (b"\xff\xfe\x00bad", "ir.txt not UTF-8"),
                                        (ir_text[: len(ir_text) // 2], "ir.txt cut"),
                                        (rng.randbytes(100), "ir.txt random bytes")])
        if what != "zip":
            done.append(what)
    try:
        program_bytes = json_bytes(program)
    except (TypeError, ValueError):
        program_bytes, done = json.dumps(program, default=str).encode(), [*done, "program.json loosely written"]
    members = {"program.json": program_bytes, "weights.safetensors": weights, "ir.txt": ir_text}
    if isinstance(manifest.get("members"), dict):
        for name, data in members.items():
            if name in manifest["members"] and name not in frozen and "digest" not in frozen:
                manifest["members"][name] = sha256(data)
    if "digest" not in frozen:
        with contextlib.suppress(TypeError, ValueError):
            manifest["digest"] = manifest_digest(manifest)
    data, zipped = assemble(rng, {"manifest.json": json_bytes(manifest), **members}, trick)
    if trick:
        done.append(zipped)
    (work / "p.ttplan").write_bytes(data)
    args, check, cmd = command(rng, work, "p.ttplan", _input_shape(program, fx.input_shape(variant)))
    return Case(f"{variant} plan, {'; '.join(done)}; {cmd}", args, check=check)
