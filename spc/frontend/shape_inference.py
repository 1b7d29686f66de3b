"""onnx's shape inference on a model spc's checks passed (frontend/validate.py), in a child
process: a crash the checks did not foresee is an error line naming the node, not a dead process.
Where forking is safe the child is forked (started while the parent checks the model:
:class:`Inference`, a refusal ends it), else a fresh interpreter that loads onnx's C++ extension
alone; both under an address-space limit and a deadline."""

from __future__ import annotations

import contextlib
import faulthandler
import math
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spc.errors import SpcError
from spc.frontend import onnx_proto
from spc.frontend.validate import node_label
from spc.text import byte_size, one_line


def can_fork() -> bool:
    """A forked child (no new interpreter: ~5 ms, not ~70) where forking is safe: Linux, and no
    other Python thread that could hold a lock the child needs."""
    return sys.platform == "linux" and hasattr(os, "fork") and threading.active_count() == 1


# onnx's shape inference in its child process (import_onnx): wall time and address space. SuperPoint's
# inference runs in 128 MiB; a hostile data propagation fills 1 GiB in ~2 s, then runs without it
INFER_TIMEOUT_S = 60.0
INFER_MEMORY_BYTES = 1 << 30


# -- shape inference --------------------------------------------------------------------------
# The child loads onnx's C++ extension alone (no numpy, no spc: 0.07 s), under an address-space
# limit and with no core dump (a crash is expected here, and a core of a hostile model is not
# worth the disk), reads the model from stdin and writes the inferred model to stdout. Exit codes:
# 3 the inference raised (message on stderr), 5 the extension did not load, 6 out of memory.
_CHILD = r"""
import importlib.machinery, importlib.util, sys
try:
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[2]), int(sys.argv[2])))
except Exception:
    pass
try:
    loader = importlib.machinery.ExtensionFileLoader("onnx_cpp2py_export", sys.argv[1])
    spec = importlib.util.spec_from_file_location("onnx_cpp2py_export", sys.argv[1], loader=loader)
    C = importlib.util.module_from_spec(spec)
    loader.exec_module(C)
except BaseException as exc:
    sys.stderr.write(str(exc))
    sys.exit(5)
data = sys.stdin.buffer.read()
try:
    out = C.shape_inference.infer_shapes(data, False, False, sys.argv[3] == "1")
except MemoryError:
    sys.exit(6)
except BaseException as exc:
    sys.stderr.write(str(exc))
    sys.exit(3)
sys.stdout.buffer.write(out)
"""
# floating-point initializers larger than this go to inference without their data (shape_view)
_SHAPE_VIEW_KEEP = 64
_FLOAT_TYPES = (1, 10, 11)


class _Crash(Exception):
    """onnx's inference died in the child (a signal) or ran out of time or memory."""

    def __init__(self, why: str, resources: bool) -> None:
        super().__init__(why)
        self.why, self.resources = why, resources


def shape_view(model: Any, restore: bool = True) -> bytes:
    """The model serialised as shape inference needs it: floating-point initializers of more than
    a few elements without their data. Their values never decide a shape (onnx's data propagation
    follows integer shape tensors; a float Resize scale has a few elements), and leaving them out
    keeps the child's pipes and memory small (SuperPoint's 5 MB of weights would cross twice) and
    a model with over 2 GiB of external weights serialisable. ``restore=False``: the data is left
    out of ``model`` too (a forked child's own copy: putting 5 MB back costs ~4 ms)."""
    held: list[tuple[Any, bytes]] = []
    try:
        for init in model.graph.initializer:
            if init.data_type in _FLOAT_TYPES and math.prod(init.dims) > _SHAPE_VIEW_KEEP and init.raw_data:
                if restore:
                    held.append((init, init.raw_data))
                init.ClearField("raw_data")
        return model.SerializeToString()
    finally:
        for init, raw in held:
            init.raw_data = raw


def _view_bytes(model: Any, path: Path) -> bytes:
    try:
        return shape_view(model)
    except SpcError:
        raise
    except Exception:  # protobuf refuses to write more than 2 GiB
        raise SpcError(_TOO_LARGE.format(path=path)) from None


_TOO_LARGE = ("{path}: the model is too large to serialise (over 2 GiB without its weights); this is not a "
              "SuperPoint-sized model")


class Inference:
    """onnx's shape inference under way in a forked child, on the model as it was when started:
    the importer starts it before its own checks run here (frontend/reading.py), or has the child
    run them first (``marks``: the child then says whether its checks passed, :attr:`checked`). A
    check here that refuses the model ends it (:meth:`cancel`): the child saw the model first but
    cannot harm the compiler, and what is reported is the check's refusal. ``start`` gives None
    where no child can be forked (:func:`infer_shapes` then runs one itself)."""

    def __init__(self, child: _ForkedChild, marks: bool) -> None:
        self.child: _ForkedChild | None = child
        self.marks = marks
        self.checked = False  # (``marks``) the child's check passed: what ended it came after

    @staticmethod
    def start(view: Callable[[], bytes], check: Callable[[], None] | None = None, *, load_here: bool = True,
              marks: bool = False) -> Inference | None:
        """Inference on the bytes ``view()`` makes in the child (:func:`shape_view` of its copy of
        the model), after ``check`` there (onnx's checker: the child builds onnx's schema registry
        for the inference anyway; or spc's checks too). ``load_here``: onnx's extension loaded in
        this process first, so that every later child inherits it (~5 ms each); else only the
        child loads it (a process that never needs it)."""
        if not can_fork():
            return None
        if load_here:
            onnx_proto.cpp()
        try:
            return Inference(_fork_inference(view, True, check, marks), marks)
        except OSError:  # no child now: infer_shapes tries again, then runs it here
            return None

    def result(self) -> tuple[int, bytes, bytes]:
        """The child's (exit code or -signal, the inferred model's bytes, its message)."""
        assert self.child is not None, "an inference's result is taken once"
        child, self.child = self.child, None
        code, out, err = _collect(child)
        if self.marks:
            self.checked = out[:1] == _CHECKED
            out = out[1:] if self.checked else out
        return code, out, err

    def cancel(self) -> None:
        if self.child is not None:
            child, self.child = self.child, None
            _kill(child)


def infer_shapes(model: Any, path: Path, isolate: bool, done: tuple[int, bytes, bytes] | None = None,
                 check: Callable[[], None] | None = None) -> Any:
    """onnx's shape inference with data propagation (so shape chains resolve), its results written
    into ``model`` (value_info, the outputs' types), which is returned. ``isolate``: in a child
    process, for a model from a file: what our checks missed cannot take the compiler down
    (``done``: what a child started earlier gave, :meth:`Inference.result`). When data propagation
    exhausts the child's time or memory (it materialises 1-D values, ~200 bytes per element),
    inference runs again without it; spc's own inference fills in. ``check``: run in each child
    before its inference (what the child of ``done`` ran)."""
    out, data_prop = None, True
    if isolate:
        try:
            out = _outcome(done, path) if done is not None else _infer_in_child(model, path, data_prop, check)
        except _Crash as crash:
            if not crash.resources:
                raise SpcError(_crash_message(_view_bytes(model, path), path, crash)) from None
            data_prop = False
            try:
                out = _infer_in_child(model, path, data_prop, check)
            except _Crash as again:
                raise SpcError(_crash_message(_view_bytes(model, path), path, again)) from None
    if out is None:  # not isolated, or the child could not start or load onnx here: in this process
        try:
            out = onnx_proto.cpp().shape_inference.infer_shapes(_view_bytes(model, path), False, False, data_prop)
        except SpcError:
            raise
        except Exception as exc:  # a malformed graph fails here first
            raise SpcError(f"{path}: ONNX shape inference failed: {one_line(exc)}") from None
    inferred = type(model).FromString(out)
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.graph.value_info)
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    return model


def _infer_in_child(model: Any, path: Path, data_prop: bool, check: Callable[[], None] | None = None) -> bytes | None:
    """The inferred model's bytes (``model``: a ModelProto, or its bytes as inference takes them);
    None when no child can run here; _Crash when it died. ``check`` runs first (in the child
    where one is forked)."""
    onnx_cpp2py_export = onnx_proto.cpp()
    if can_fork():
        view = (lambda: model) if isinstance(model, bytes) else (lambda: shape_view(model, restore=False))
        try:
            child = _fork_inference(view, data_prop, check)
        except OSError:  # no fork now: a new interpreter below, or in this process
            pass
        else:
            return _outcome(_collect(child), path)
    if check is not None:
        check()
    data = model if isinstance(model, bytes) else _view_bytes(model, path)
    limit = INFER_MEMORY_BYTES + 4 * len(data)
    cmd = [sys.executable, "-I", "-S", "-c", _CHILD, onnx_cpp2py_export.__file__, str(limit),
           "1" if data_prop else "0"]
    try:
        proc = subprocess.run(cmd, input=data, capture_output=True, timeout=INFER_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise _Crash(f"did not finish within {INFER_TIMEOUT_S:.0f} s", resources=True) from None
    except OSError:  # no way to start a child here
        return None
    return _outcome((proc.returncode, proc.stdout, proc.stderr), path)


def _outcome(done: tuple[int, bytes, bytes], path: Path) -> bytes | None:
    """A child's (exit code or -signal, stdout, stderr) as the inferred model's bytes."""
    code, out, err = done
    if code == 0:
        return out
    if code == 3:
        raise SpcError(f"{path}: ONNX shape inference failed: {one_line(err.decode(errors='replace'))}")
    if code == 5:
        return None
    if code == 6:
        raise _Crash(f"needed more than {byte_size(INFER_MEMORY_BYTES)} of memory beyond the model", resources=True)
    if code == 7:
        raise SpcError(_TOO_LARGE.format(path=path))
    if code == REFUSED:
        raise SpcError(err.decode(errors="replace"))
    if code == _TIMED_OUT:
        raise _Crash(f"did not finish within {INFER_TIMEOUT_S:.0f} s", resources=True)
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        # SIGKILL is what an out-of-memory killer sends
        raise _Crash(f"crashed ({name})", resources=code == -signal.SIGKILL)
    raise _Crash(f"failed (exit code {code})", resources=False)


_TIMED_OUT = 1000  # not an exit code: the parent killed the child at the deadline
REFUSED = 8  # the child's check refused the model: its message on stderr
_CHECKED = b"\x01"  # what a child that marks writes once its check has passed


class _ForkedChild:
    """A forked inference: its pid and the read ends of its stdout and stderr, each closed and the
    child reaped once (a closed descriptor's number may be another file's by then)."""

    def __init__(self, pid: int, out_r: int, err_r: int) -> None:
        self.pid, self.out_r, self.err_r = pid, out_r, err_r
        self.open, self.reaped = [out_r, err_r], False

    def close(self) -> None:
        for fd in self.open:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.open = []


def _fork_inference(view: Callable[[], bytes], data_prop: bool, check: Callable[[], None] | None = None,
                    marks: bool = False) -> _ForkedChild:
    """Shape inference in a forked child on the bytes ``view()`` makes there from the child's own
    copy of the model, after ``check()`` under the same limits (``marks``: then :data:`_CHECKED`
    is the first byte it writes). Its address space may grow by INFER_MEMORY_BYTES plus four times
    the model's bytes beyond the parent's; exit codes as the interpreter child's, 7 when the model
    does not serialise, :data:`REFUSED` when ``check`` (or the view) refused it (its message on
    stderr). OSError when no child can be forked (its pipes closed)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:  # room for an inferred model (SuperPoint's: 0.24 MB) while the parent is busy (checking, importing)
        import fcntl  # POSIX only: at the top it would stop this module importing on other systems

        fcntl.fcntl(out_w, fcntl.F_SETPIPE_SZ, 1 << 20)
    except (ImportError, AttributeError, OSError):
        pass
    try:
        pid = os.fork()
    except OSError:  # no memory or process left for a child
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        raise
    if pid == 0:  # the child: never returns into the parent's stack
        code = 3
        try:
            os.close(out_r)
            os.close(err_r)
            try:
                data = view()
            except SpcError as exc:  # (a view that fixes an input's shape first)
                os.write(err_w, str(exc).encode(errors="replace")[:4096])
                os._exit(REFUSED)
            except Exception:  # protobuf refuses to write more than 2 GiB
                os._exit(7)
            try:
                import resource  # POSIX only, as fcntl above

                from spc.process import release_free_heap

                faulthandler.disable()  # a crash here is reported by the parent, in one line
                # the compile's free heap (spc/process.py reserves 768 MiB of it) given back first:
                # the limit below counts from what the child holds, not from what it may still fill
                release_free_heap()
                with open("/proc/self/statm", "rb") as f:
                    size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
                limit = size + INFER_MEMORY_BYTES + 4 * len(data)
                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            except Exception:
                pass
            try:
                if check is not None:
                    try:
                        check()
                    except SpcError as exc:
                        os.write(err_w, str(exc).encode(errors="replace")[:4096])
                        os._exit(REFUSED)
                    if marks:
                        os.write(out_w, _CHECKED)
                try:
                    cpp = onnx_proto.cpp()
                except Exception:  # as the interpreter child's: the parent tries in its own process
                    os._exit(5)
                result = cpp.shape_inference.infer_shapes(data, False, False, data_prop)
            except MemoryError:
                code = 6
            except BaseException as exc:
                os.write(err_w, str(exc).encode(errors="replace")[:4096])
            else:
                view_ = memoryview(result)
                while view_:
                    view_ = view_[os.write(out_w, view_):]
                code = 0
        finally:
            os._exit(code)
    os.close(out_w)
    os.close(err_w)
    return _ForkedChild(pid, out_r, err_r)


def _collect(child: _ForkedChild) -> tuple[int, bytes, bytes]:
    """The forked child's (exit code or -signal, stdout, stderr); _TIMED_OUT once it ran
    INFER_TIMEOUT_S past the call (killed: the time counts from here, not from the fork, so that a
    child that finished while the importer checked or imported is never taken for a slow one). Whatever
    interrupts the wait (Ctrl-C) ends the child too."""
    chunks: dict[int, list[bytes]] = {child.out_r: [], child.err_r: []}
    deadline = time.monotonic() + INFER_TIMEOUT_S
    try:
        with selectors.DefaultSelector() as sel:
            for fd in chunks:
                sel.register(fd, selectors.EVENT_READ)
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    _kill(child)
                    return _TIMED_OUT, b"", b""
                for key, _ in sel.select(left):
                    block = os.read(key.fd, 1 << 16)
                    if block:
                        chunks[key.fd].append(block)
                    else:
                        sel.unregister(key.fd)
        child.close()
        _, status = os.waitpid(child.pid, 0)
        child.reaped = True
    except BaseException:
        _kill(child)
        raise
    return os.waitstatus_to_exitcode(status), b"".join(chunks[child.out_r]), b"".join(chunks[child.err_r])


def _kill(child: _ForkedChild) -> None:
    """End the child and reap it: no zombie, no open pipe left behind (whoever reaped it first)."""
    if not child.reaped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):  # reaped already (SIGCHLD ignored, a handler)
            os.waitpid(child.pid, 0)
        child.reaped = True
    child.close()


def _crash_message(data: bytes, path: Path, crash: _Crash) -> str:
    # bisecting a timeout or an exhausted memory would cost a dozen such runs: name no node then
    node = None if crash.resources else _culprit(data, path)
    where = f" at node {node}" if node else ""
    return (f"{path}: onnx's shape inference {crash.why}{where}; spc's checks did not catch why, so the model is "
            "malformed in a way onnx does not guard against: check the node's attributes and inputs "
            "against the ONNX spec and re-export")


def _culprit(data: bytes, path: Path) -> str | None:
    """The node where inference crashes: the shortest prefix of the graph that crashes ends with
    it (inference runs in node order). A dozen child runs for a few hundred nodes."""
    model = onnx_proto.messages().ModelProto.FromString(data)
    nodes = list(model.graph.node)

    def crashes(k: int) -> bool:
        m = type(model)()
        m.CopyFrom(model)
        del m.graph.node[k:]
        del m.graph.output[:]
        try:
            _infer_in_child(m.SerializeToString(), path, data_prop=True)
        except _Crash as crash:
            return not crash.resources
        except SpcError:
            return False
        return False

    lo, hi = 0, len(nodes)  # the prefix of lo nodes runs; that of hi crashes (the whole graph did)
    if not crashes(hi):  # the outputs' declared types took part: no prefix to blame
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if crashes(mid):
            hi = mid
        else:
            lo = mid
    node = nodes[hi - 1]
    return f"{node_label(node, hi - 1)} ({node.op_type})"
