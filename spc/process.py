"""A compile's process: one BLAS thread, freed arrays kept in its heap, no cyclic collection.

* BLAS: the compile's matrix products are small (the validation's window convolutions); OpenBLAS's
  worker threads would spin on the second core after each one, the core the validation's source
  side runs on (validation/translation.py). Set before numpy is imported, as OpenBLAS reads it then.
* The allocator: glibc hands each freed array over 128 KiB back to the kernel and faults the next
  one in page by page; kept in the heap, the next array reuses those pages.
* The cyclic garbage collector: a compile makes objects that live until it ends (modules, the IR,
  the program), and each collection walks every object made since the last: 70-90 collections,
  13-20 ms of a 480x640 compile, to free little (its peak grows by 2 MB without them). Raising
  the threshold makes fewer, longer collections, not less work. Paused for one command, so an
  in-process caller (tests, notebooks) gets it back.

Measured on the 480x640 compile (docs/validation.md). Elsewhere than Linux and glibc nothing changes."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import sys
from collections.abc import Iterator

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3  # malloc.h
_MMAP_AT = 1 << 30  # arrays up to 1 GiB from the heap: larger ones are mapped, as before
_TRIM_AT = 1 << 30  # free heap kept up to 1 GiB: the command ends soon, and the kernel takes it back
_PAD = 64 << 20  # the heap grows by 64 MiB at a time


def tune_for_compile() -> None:
    """Before numpy is imported (else only the allocator changes). The user's own setting of
    OPENBLAS_NUM_THREADS is kept."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return
    for param, value in ((_M_MMAP_THRESHOLD, _MMAP_AT), (_M_TRIM_THRESHOLD, _TRIM_AT), (_M_TOP_PAD, _PAD)):
        mallopt(ctypes.c_int(param), ctypes.c_int(value))


@contextlib.contextmanager
def collector_paused(pause: bool = True) -> Iterator[None]:
    """The cyclic garbage collector off inside (when ``pause``), as it was after."""
    was = gc.isenabled()
    if pause:
        gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
