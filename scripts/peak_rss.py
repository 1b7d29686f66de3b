"""Peak resident memory of one spc command, measured in the process that runs it.

    python scripts/peak_rss.py run PLAN FOLDER -o OUT

runs `spc run PLAN FOLDER -o OUT` in this process and prints, on stderr when it ends, VmHWM from
/proc/self/status: the process's own peak (getrusage's ru_maxrss of a child would include what
it inherited from a forking parent). docs/outputs.md quotes it for 200-image folders.
"""

from __future__ import annotations

import sys

from spc.cli import main


def vmhwm_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    finally:
        print(f"VmHWM {vmhwm_kb()} kB ({vmhwm_kb() / 1024:.0f} MB)", file=sys.stderr)
