"""The package's layers (pyproject.toml, [tool.importlinter]) hold: import-linter checks every
import, function-level ones included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept() -> None:
    done = subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache"], capture_output=True,
                          text=True, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-4000:]
    assert "2 kept, 0 broken" in done.stdout
