"""A compile's process: one BLAS thread, freed arrays kept in its heap of huge pages, no cyclic
collection.

* BLAS: the compile's matrix products are small (the validation's window convolutions); OpenBLAS's
  worker threads would spin on the second core after each one, the core the validation's source
  side runs on (validation/translation.py). Set before numpy is imported, as OpenBLAS reads it then.
* The allocator: glibc hands each freed array over 128 KiB back to the kernel and faults the next
  one in page by page; kept in the heap, the next array reuses those pages.
* Huge pages: glibc's heap, where every thread's arrays come from (one arena: the validation's
  thread's arrays would otherwise come from a mapped arena of their own), is reserved (untouched,
  so not resident) and marked for transparent huge pages, as glibc's own ``glibc.malloc.hugetlb``
  tunable would (it can only be set before the process starts). Each 4 KiB page's first touch
  costs a few microseconds here: a 480x640 compile faulted 31k pages, 12k so (0.94x its time, 8 %
  less processor time, a peak 15 MB lower: 30 pairs). Where the kernel has no transparent huge
  pages, the heap is kept in 4 KiB pages as before. Only in a process the command starts (numpy
  not yet imported): an in-process caller's threads keep their arenas.
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

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -2, -3, -8  # malloc.h
_MMAP_AT = 1 << 30  # arrays up to 1 GiB from the heap: larger ones are mapped, as before
_TRIM_AT = 1 << 30  # free heap kept up to 1 GiB: the command ends soon, and the kernel takes it back
_PAD = 64 << 20  # the heap grows by 64 MiB at a time
_HUGE_RESERVE = 768 << 20  # heap reserved for huge pages (virtual: only what is touched is resident)
_MADV_HUGEPAGE = 14  # mman.h
_HUGE = 2 << 20


def tune_for_compile() -> None:
    """Before numpy is imported (else only the allocator's thresholds change). The user's own
    setting of OPENBLAS_NUM_THREADS is kept."""
    fresh = "numpy" not in sys.modules
    if fresh:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return
    for param, value in ((_M_MMAP_THRESHOLD, _MMAP_AT), (_M_TRIM_THRESHOLD, _TRIM_AT), (_M_TOP_PAD, _PAD),
                         *([(_M_ARENA_MAX, 1)] if fresh else [])):
        mallopt(ctypes.c_int(param), ctypes.c_int(value))
    if fresh:
        _huge_heap(libc)


def _huge_heap(libc: ctypes.CDLL) -> None:
    """Grow the heap by :data:`_HUGE_RESERVE` (a block allocated and freed: kept, as the trim
    threshold says, and never touched) and advise huge pages on it."""
    try:
        sbrk, malloc, free, madvise = libc.sbrk, libc.malloc, libc.free, libc.madvise
    except AttributeError:
        return
    sbrk.restype, sbrk.argtypes = ctypes.c_void_p, [ctypes.c_ssize_t]
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    free.restype, free.argtypes = None, [ctypes.c_void_p]
    madvise.restype, madvise.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    before = sbrk(0)
    if before is None:
        return
    block = malloc(_HUGE_RESERVE)
    if not block:
        return
    free(block)
    after = sbrk(0)
    start = (before + _HUGE - 1) // _HUGE * _HUGE
    if after is None or after - start < _HUGE_RESERVE // 2:  # the block was mapped, not taken from the heap
        return
    madvise(start, after - start, _MADV_HUGEPAGE)  # refused (no transparent huge pages): 4 KiB pages as before


@contextlib.contextmanager
def collector_paused(pause: bool = True, resume: bool = True) -> Iterator[None]:
    """The cyclic garbage collector off inside (when ``pause``), as it was after, unless not to
    ``resume``: a process that ends then would only pay for a collection of all it made (the
    first allocation after the collector is back runs one: 5-8 ms after a compile)."""
    was = gc.isenabled()
    if pause:
        gc.disable()
    try:
        yield
    finally:
        if was and resume:
            gc.enable()


def release_free_heap() -> None:
    """Give the heap's free memory back to the kernel (``malloc_trim``): a forked child that
    limits its own address space counts from what it holds, not from the reserve it inherited."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL(None).malloc_trim(ctypes.c_size_t(0))
