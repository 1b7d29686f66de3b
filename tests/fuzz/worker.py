"""``python -m tests.fuzz.worker FIXTURES TIMEOUT BASE``: run the fuzz cases named on stdin, one
``CATEGORY SEED`` a line, each in a fresh folder below BASE; answer each with one JSON line on
stdout.

Native code may write to file descriptor 1 too, so the answers go to a private copy of it and
descriptor 1 itself is pointed at stderr.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> int:
    fixtures, timeout, base = Path(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3])
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from tests.fuzz.harness import Fixtures, run_in_fresh_folder

    fx = Fixtures(fixtures)
    for line in sys.stdin:
        if not line.strip():
            continue
        category, seed = line.split()
        result = run_in_fresh_folder(category, int(seed), fx, base, timeout)
        answers.write(result.as_json() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
