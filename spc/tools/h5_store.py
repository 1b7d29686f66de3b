"""hloc's features.h5 and matches.h5, written so that a kill at any moment loses nothing the file held.

An HDF5 file appended in place can be left unreadable by a kill mid-write, and every earlier
image's features are in that one file. So a run never writes into it:

* each frame's group goes to a journal beside the file (``.features.h5.spc-journal/``: one
  ``.npz`` per group, each written atomically) as soon as it is made;
* at the end of the run (and on Ctrl-C or an error) the journal is merged: the file copied to a
  temporary one in the same folder, the journal's groups written into the copy, the copy synced
  and renamed over the file, then the journal removed. A kill before the rename leaves the old
  file whole and the journal, which the next run on the file merges first (so ``--skip-existing``
  finds what the killed run made); a kill after it leaves only a journal to remove.
* one run at a time: a second ``spc run`` on the same file fails in one line (a lock beside it).

Each group records the plan that made it (attribute ``spc_plan_sha256``), as the ``.npz`` files do.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
import time
from pathlib import Path
from types import TracebackType

import numpy as np

from spc.errors import SpcError
from spc.files import atomic_write, os_error, os_errors

PLAN_ATTR = "spc_plan_sha256"
_META = ("__group__", "__uncertainty__", "__plan__")
_H5_EXTRA = "--format h5 needs h5py: pip install 'spc[full]'"


def h5py_module():
    try:
        import h5py  # an extra (spc[full]), ~20 ms: only --format h5 needs it
    except ModuleNotFoundError:
        raise SpcError(_H5_EXTRA) from None
    return h5py


def _side(path: Path, what: str) -> Path:
    return path.with_name(f".{path.name}.spc-{what}")


class H5Store:
    """A features.h5 being written by this run (a context manager: the journal merged at exit)."""

    def __init__(self, path: Path, plan_sha: str, marker: str = "keypoints") -> None:
        # the file itself, not a symlink to it: one lock and one journal per file, and the rename
        # replaces the file, not the link
        self.path, self.plan_sha = Path(os.path.realpath(path)), plan_sha
        self.marker = marker  # the dataset every group of the file holds: features' keypoints, matches0
        path = self.path
        self.journal = _side(path, "journal")
        self._lock_fd: int | None = None
        self._count = 0
        with os_errors(path):
            path.parent.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            self.merge()  # what a killed run left
            self._count = 0
        except BaseException:
            self._unlock()
            raise

    def _lock(self) -> None:
        import fcntl  # POSIX only: at the top it would stop `spc run` (npz) on other systems

        lock = _side(self.path, "lock")
        with os_errors(lock):
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise SpcError(f"{self.path}: another spc run is writing this file now; wait for it, or choose "
                           "another -o") from None
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing releases the lock; the empty lock file stays (harmless)
            self._lock_fd = None

    def groups(self) -> dict[str, str]:
        """The groups the file holds, each with the sha256 of the plan that made it ("": unknown)."""
        h5py = h5py_module()
        if not os.path.lexists(self.path):
            return {}
        out: dict[str, str] = {}
        with os_errors(self.path, "cannot read"), h5py.File(self.path, "r") as fd:
            def visit(name: str, obj) -> None:
                if isinstance(obj, h5py.Group) and self.marker in obj:
                    sha = obj.attrs.get(PLAN_ATTR, "")
                    out[name] = sha.decode() if isinstance(sha, bytes) else str(sha)

            fd.visititems(visit)
        return out

    def add(self, name: str, arrays: dict[str, np.ndarray], uncertainty: float | None = None) -> None:
        """One group (a frame's features, a pair's matches), into the journal (the file gets it at
        :meth:`merge`); ``uncertainty``: the keypoints' attribute, as hloc writes it."""
        with os_errors(self.journal):
            self.journal.mkdir(exist_ok=True)
        buf = io.BytesIO()
        given = np.float32(np.nan if uncertainty is None else uncertainty)
        np.savez(buf, **arrays, __group__=np.array(name), __uncertainty__=given, __plan__=np.array(self.plan_sha))
        self._count += 1
        # named in the order written, across runs too: a later entry for a group wins at the merge
        atomic_write(self.journal / f"{time.time_ns():020d}_{os.getpid()}_{self._count:09d}.npz", buf.getvalue())

    def merge(self) -> int:
        """The journal's groups written into the file, atomically (see the module's doc); their count."""
        if not self.journal.is_dir():
            return 0
        entries = sorted(p for p in self.journal.iterdir() if p.suffix == ".npz" and not p.name.startswith("."))
        if not entries:
            shutil.rmtree(self.journal, ignore_errors=True)
            return 0
        h5py = h5py_module()
        tmp: str | None = None
        try:
            fd_, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name[:200]}", suffix=".part")
            os.close(fd_)
            if os.path.lexists(self.path):
                shutil.copyfile(self.path, tmp)
            with h5py.File(tmp, "a" if os.path.lexists(self.path) else "w") as fd:
                for entry in entries:
                    try:  # entries are renamed in whole: one that does not read is not ours, or a bad disk
                        with np.load(entry, allow_pickle=False) as z:
                            data = {k: z[k] for k in z.files}
                        name = str(data.pop("__group__"))
                        uncertainty, plan = float(data.pop("__uncertainty__")), str(data.pop("__plan__"))
                    except Exception as exc:
                        raise SpcError(f"{entry}: a journal entry of {self.path.name} that cannot be read "
                                       f"({type(exc).__name__}); the journal is kept: move that entry away and "
                                       "rerun") from None
                    try:
                        if name in fd:
                            del fd[name]
                        grp = fd.create_group(name)
                        for key, value in data.items():
                            grp.create_dataset(key, data=value)
                        if "keypoints" in grp and not np.isnan(uncertainty):
                            grp["keypoints"].attrs["uncertainty"] = np.float32(uncertainty)
                        grp.attrs[PLAN_ATTR] = plan
                    except (ValueError, KeyError, TypeError) as exc:  # h5py: a name that clashes with the file's
                        raise SpcError(f"{self.path}: cannot hold group {name!r} ({exc}); the journal is kept: "
                                       "choose another -o, or move the file away") from None
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            if os.path.lexists(self.path):
                shutil.copymode(self.path, tmp)  # the file keeps its permissions
            else:
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(tmp, 0o666 & ~umask)
            os.replace(tmp, self.path)
            tmp = None
            folder = os.open(self.path.parent, os.O_RDONLY)  # the rename durable before the journal goes
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
        except OSError as exc:
            raise os_error(self.path, exc) from None
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        shutil.rmtree(self.journal, ignore_errors=True)
        return len(entries)

    def close(self) -> None:
        try:
            self.merge()
        finally:
            self._unlock()

    def __enter__(self) -> H5Store:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
