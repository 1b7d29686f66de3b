"""A call run in a forked child while the parent goes on: the second core's share of a compile.

``Forked.start(fn)`` forks; the child runs ``fn()`` on its copy of the parent's memory and hands
back the result, ``result()`` takes it (or raises what ``fn`` raised). Arrays come back without a
pipe's copies: the pickle stream's buffers (protocol 5, out of band) are written to a memfd
made before the fork, which the parent maps; only the small stream goes through the pipe. The
child ends with ``os._exit``: no atexit handler, no buffered output of the parent's, runs twice.

``start`` returns None where a fork is unsafe or unavailable (not Linux, another Python thread
that could hold a lock the child needs, no memfd, no process left): the caller runs ``fn`` itself.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import pickle
import select
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

_CAP = 1 << 31  # the stream's declared length is checked against it before a read


def can_fork() -> bool:
    """A forked child (no new interpreter: ~5 ms, not ~60) where forking is safe: Linux, and no
    other Python thread that could hold a lock the child needs."""
    return sys.platform == "linux" and hasattr(os, "fork") and threading.active_count() == 1


class ChildFailed(Exception):
    """The child ended without a result (killed, out of memory, an exception that does not pickle)."""


class Forked:
    def __init__(self, pid: int, pipe: int, memfd: int) -> None:
        self.pid, self.pipe, self.memfd = pid, pipe, memfd
        self.done = False

    @classmethod
    def start(cls, fn: Callable[[], Any]) -> Forked | None:
        if not can_fork() or not hasattr(os, "memfd_create"):
            return None
        try:
            memfd = os.memfd_create("spc-forked")
        except OSError:
            return None
        try:
            r, w = os.pipe()
        except OSError:
            os.close(memfd)
            return None
        try:
            pid = os.fork()
        except OSError:
            for fd in (r, w, memfd):
                os.close(fd)
            return None
        if pid == 0:  # the child: never returns into the parent's stack
            code = 1
            try:
                os.close(r)
                code = _child(fn, w, memfd)
            finally:
                os._exit(code)
        os.close(w)
        return cls(pid, r, memfd)

    def result(self, timeout: float | None = None) -> Any:
        """What ``fn`` returned, its arrays mapped from the memfd (writable, copy on write); what it
        raised, raised here; :class:`ChildFailed` when the child gives nothing within ``timeout``
        seconds (it is ended). Whatever interrupts the wait (Ctrl-C) ends the child too."""
        assert not self.done, "a forked call's result is taken once"

        try:
            if timeout is not None:
                poll = select.poll()  # not select(): it refuses descriptors >= 1024
                poll.register(self.pipe, select.POLLIN | select.POLLHUP)
                if not poll.poll(timeout * 1000):
                    raise ChildFailed(f"the forked child gave no result within {timeout:g} s")
            head = _read_exactly(self.pipe, 8)
            n = int.from_bytes(head, "little") if len(head) == 8 else 0
            if n > _CAP:  # the child would wait on a full pipe for a reader that stopped
                raise ChildFailed(f"the forked child's result is {n} bytes, more than {_CAP}")
            data = _read_exactly(self.pipe, n) if n else b""
            if len(data) != n:
                raise ChildFailed("the forked child's result was cut short")
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:  # reaped by someone else (SIGCHLD ignored): its stream decides
                status = 0
        except ChildFailed:
            self.cancel()
            raise
        except BaseException:
            self.cancel()
            raise
        self.done = True
        os.close(self.pipe)
        try:
            if not data or os.waitstatus_to_exitcode(status) != 0:
                raise ChildFailed(f"the forked child ended with status {os.waitstatus_to_exitcode(status)}")
            try:
                ok, sizes, stream = pickle.loads(data)
            except Exception as exc:
                raise ChildFailed(f"the forked child's stream does not unpickle ({exc})") from None
            buffers = []
            if sizes and not sum(sizes):  # empty arrays still travel out of band
                buffers = [memoryview(b"")] * len(sizes)
            elif sum(sizes):
                mm = mmap.mmap(self.memfd, sum(sizes), access=mmap.ACCESS_COPY)
                view, at = memoryview(mm), 0
                for n in sizes:
                    buffers.append(view[at:at + n])
                    at += n
            try:
                value = pickle.loads(stream, buffers=buffers)
            except Exception as exc:
                raise ChildFailed(f"the forked child's result does not unpickle ({exc})") from None
        finally:
            os.close(self.memfd)
        if not ok:
            raise value
        return value

    def cancel(self) -> None:
        """End the child and reap it, its pipe and memfd closed (a result not taken is dropped)."""
        if self.done:
            return
        self.done = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        for fd in (self.pipe, self.memfd):
            with contextlib.suppress(OSError):
                os.close(fd)


def _child(fn: Callable[[], Any], w: int, memfd: int) -> int:
    try:
        outcome: tuple[bool, Any] = (True, fn())
    except Exception as exc:  # handed to the parent, which raises it
        outcome = (False, exc)  # (a signal's KeyboardInterrupt, SystemExit: the child ends, ChildFailed there)
    buffers: list[pickle.PickleBuffer] = []
    try:
        stream = pickle.dumps(outcome[1], protocol=5, buffer_callback=buffers.append)
        if not outcome[0]:
            pickle.loads(stream, buffers=buffers)  # an exception may pickle and not unpickle
    except Exception as exc:  # an exception whose arguments do not pickle: its text
        buffers = []
        stream = pickle.dumps(ChildFailed(f"{type(outcome[1]).__name__}: {outcome[1]}"[:2000] if not outcome[0]
                                          else f"the result does not pickle ({exc})"), protocol=5)
        outcome = (False, None)
    sizes = []
    for b in buffers:
        raw = b.raw()
        sizes.append(raw.nbytes)
        while raw:
            raw = raw[os.write(memfd, raw):]
    data = pickle.dumps((outcome[0], sizes, stream), protocol=5)
    view = memoryview(len(data).to_bytes(8, "little") + data)
    while view:
        view = view[os.write(w, view):]
    return 0


def _read_exactly(fd: int, n: int) -> bytes:
    parts, left = [], n
    while left:
        block = os.read(fd, min(left, 1 << 20))
        if not block:
            break
        parts.append(block)
        left -= len(block)
    return b"".join(parts)
