"""What a command says besides its result: one verbosity for the process, set by `-q`/`-v`.

``info`` is the usual line (``wrote X``, a run's per-input line), ``note`` a remark on stderr
(``note: ...``), ``detail`` what only ``-v`` shows (per-pass and per-phase times). A command's
result itself (a table asked for, ``--json``) is printed whatever the verbosity; errors always.
"""

from __future__ import annotations

import sys

QUIET, NORMAL, VERBOSE = 0, 1, 2
_level = NORMAL


def set_level(level: int) -> None:
    global _level
    _level = level


def level() -> int:
    return _level


def info(line: str) -> None:
    if _level >= NORMAL:
        print(line, flush=True)


def note(line: str) -> None:
    if _level >= NORMAL:
        print(f"note: {line}", file=sys.stderr, flush=True)


def detail(line: str) -> None:
    if _level >= VERBOSE:
        print(line, file=sys.stderr, flush=True)
