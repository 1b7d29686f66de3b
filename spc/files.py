"""Writing output files: whole or not at all, never over an input or another output of the same
run, and never over an existing file unless the user said ``--overwrite``."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from spc.errors import SpcError

_WHY = {errno.EACCES: "no permission", errno.EPERM: "no permission", errno.EROFS: "read-only file system",
        errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
        errno.EISDIR: "is a folder, not a file", errno.ENOTDIR: "a parent is a file, not a folder",
        errno.ENAMETOOLONG: "name too long", errno.ENOENT: "no such file or folder"}


def os_error(path: Path | str, exc: OSError, doing: str = "cannot write") -> SpcError:
    """One line for a filesystem error: the path, what failed and why (never a traceback)."""
    why = _WHY.get(exc.errno or -1) or exc.strerror or type(exc).__name__
    where = exc.filename if exc.filename and str(exc.filename) != str(path) else None
    if where and os.path.basename(str(where)).startswith(".") and str(where).endswith(".part"):
        where = None  # our own temporary file: the output's path says it
    return SpcError(f"{path}: {doing}: {why}" + (f" ({where})" if where else "")
                    + "; choose another path or fix the folder")


@contextlib.contextmanager
def os_errors(path: Path | str, doing: str = "cannot write") -> Iterator[None]:
    """Turn an OSError inside the block into one line naming ``path``."""
    try:
        yield
    except OSError as exc:
        raise os_error(exc.filename or path, exc, doing) from None


class AtomicFile:
    """A file written whole or not at all: a temporary file in ``path``'s folder (``file``),
    renamed over ``path`` by :meth:`commit` after an fsync, with the permissions an ordinary file
    would get, or removed by :meth:`discard`. Any filesystem error (no permission, read-only,
    disk full, a parent that is a file, a folder at ``path``) is one SpcError naming ``path``, and
    leaves no temporary file behind."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            if path.is_dir():
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
            if not _first_existing(path.parent).is_dir():  # mkdir would say "exists"
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path.parent))
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, self.tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name[:200], suffix=".part")
        except OSError as exc:
            raise os_error(path, exc) from None
        self.file: BinaryIO = os.fdopen(fd, "wb")

    def settle(self) -> None:
        """Put what is written so far on the disk, so that :meth:`commit`'s fsync waits only for
        what follows (a writer thread calls it while its caller works on)."""
        self.file.flush()
        getattr(os, "fdatasync", os.fsync)(self.file.fileno())  # macOS and Windows have fsync only

    def commit(self) -> None:
        try:
            self.file.flush()
            os.fsync(self.file.fileno())  # a full disk can also show at the flush; never rename a short file
            self.file.close()
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(self.tmp, 0o666 & ~umask)  # mkstemp makes 0600
            os.replace(self.tmp, self.path)
        except OSError as exc:
            self.discard()
            raise os_error(self.path, exc) from None
        except BaseException:  # an interrupt: no temporary file left either
            self.discard()
            raise

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()
        with contextlib.suppress(OSError):
            os.unlink(self.tmp)


def atomic_write(path: Path, data: bytes | Callable[[BinaryIO], None]) -> None:
    """Write ``data`` (or what ``data(file)`` writes: a file built in place, not in memory first)
    to ``path`` whole or not at all (:class:`AtomicFile`)."""
    out = AtomicFile(path)
    try:
        if callable(data):
            data(out.file)
        else:
            out.file.write(data)
    except OSError as exc:
        out.discard()
        raise os_error(path, exc) from None
    except BaseException:
        out.discard()
        raise
    out.commit()


def file_keys(path: Path) -> set[tuple]:
    """What identifies ``path``'s file: its resolved path (symlinks followed) and, when it exists,
    its device and inode (hard links). Two paths name one file when their keys meet."""
    keys: set[tuple] = set()
    try:
        keys.add(("path", str(path.resolve())))
    except (OSError, RuntimeError):  # a symlink loop
        keys.add(("path", os.path.abspath(path)))
    try:
        st = os.stat(path)
        keys.add(("inode", st.st_dev, st.st_ino))
    except OSError:  # does not exist (yet)
        pass
    return keys


def same_file(a: Path, b: Path) -> bool:
    return bool(file_keys(a) & file_keys(b))


def duplicate(paths: Iterable[Path], seen: dict[tuple, Path] | None = None) -> tuple[Path, Path] | None:
    """The first path of ``paths`` that names the same file as an earlier one (or one in
    ``seen``), with that earlier one."""
    seen = {} if seen is None else seen
    for p in paths:
        keys = file_keys(p)
        hit = next((seen[k] for k in keys if k in seen), None)
        if hit is not None:
            return p, hit
        seen.update(dict.fromkeys(keys, p))
    return None


def _first_existing(path: Path) -> Path:
    p = path.absolute()
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    return p


def check_outputs(outputs: Sequence[Path], inputs: Iterable[Path], overwrite: bool) -> None:
    """Refuse, before any work, outputs that would replace an input or each other, outputs that
    already exist (unless ``overwrite``), and outputs that cannot be written (a folder in their
    place, a parent that is a file, a folder without write permission)."""
    try:
        _check_outputs(outputs, inputs, overwrite)
    except OSError as exc:  # a name too long, a symlink loop: checked here, before any work
        raise os_error(exc.filename or outputs[0], exc) from None


def _check_outputs(outputs: Sequence[Path], inputs: Iterable[Path], overwrite: bool) -> None:
    known: dict[tuple, Path] = {}
    for src in inputs:
        if os.path.lexists(src):
            known.update(dict.fromkeys(file_keys(src), src))
    for out in outputs:
        hit = next((known[k] for k in file_keys(out) if k in known), None)
        if hit is not None:
            raise SpcError(f"{out}: is the input {hit}; writing it would replace the input: choose another output")
    clash = duplicate(outputs)
    if clash is not None:
        raise SpcError(f"{clash[0]}: two outputs of this run would both be written to this file"
                       + ("" if clash[0] == clash[1] else f" (also named {clash[1]})")
                       + "; give each output its own path")
    for out in outputs:
        if out.is_dir():
            raise SpcError(f"{out}: is a folder; give a file name for the output")
        base = _first_existing(out.parent)
        if not base.is_dir():
            raise SpcError(f"{out}: cannot write: {base} is a file, not a folder; choose another path")
        if not os.access(base, os.W_OK | os.X_OK):
            raise SpcError(f"{out}: cannot write: no permission to write in {base}; choose another path")
    existing = [out for out in outputs if os.path.lexists(out)]
    if existing and not overwrite:
        more = f" (and {len(existing) - 1} more output(s))" if len(existing) > 1 else ""
        raise SpcError(f"{existing[0]}: already exists{more}; pass --overwrite to replace it, or choose another output")


def file_sha256(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB chunks (weights can be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
