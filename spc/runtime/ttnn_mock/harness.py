"""Prepare the real ttnn 0.81.1 library to run against a mock Blackhole p150 (or several Blackhole
chips on one host: CLUSTERS).

tt-metal's mock cluster mode (TT_METAL_MOCK_CLUSTER_DESC_PATH) mocks every driver call, so
`ttnn.open_device` runs the real host stack — op validation, program factories, the L1
allocator, circular-buffer checks — and nothing executes (values read back are zeros). What
the PyPI wheel lacks, this module supplies, in ``home`` (default ``.venv-ttnn/mock``):

* a runtime root: a symlink overlay of the installed ``ttnn`` package (TT_METAL_RUNTIME_ROOT)
  in which the firmware build key the mock p150 asks for links to a shipped Blackhole firmware
  folder (the key is discovered by opening once, not hard-coded: it depends on the descriptor,
  the dispatch mode and even the compiler's --version banner);
* a stand-in for the SFPI compiler (fake_riscv_gxx.py: empty objects, minimal kernel ELFs; built
  from fake_riscv_gxx.c, its C twin, where the machine has a C compiler);
* the environment (``env(home, cluster)``), which must be set before ``import ttnn``; ``cluster``
  names the cluster descriptor (CLUSTERS: a p150, a p300's two chips, 4 or 8 p150s).

Measured facts behind it: shared/reference/ttnn-without-hardware.md, corrected where this
machine differed (the build key; the kernel ELF's data load address). Every assumption is
checked, and a broken one stops with a message saying which: this must never skip silently.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TTNN_VERSION = "0.81.1"
SHIPPED_BLACKHOLE_FIRMWARE = "10231668919762417454"
HERE = Path(__file__).resolve().parent


class HarnessError(RuntimeError):
    pass


def default_home() -> Path:
    return Path(os.environ.get("SPC_TTNN_MOCK_HOME") or Path(sys.prefix) / "mock")


# the mock clusters, by target name (ttnn/targets.py): the descriptor and the mesh it opens. The
# multi-chip ones are tt-umd's examples with the p150's harvesting, so they share its firmware
# build keys and kernel cache (shared/reference/multichip-mock.md); a target without its own
# descriptor (n150, n300) opens the p150, and the backend then refuses a plan of another arch
CLUSTERS: dict[str, tuple[str, tuple[int, int]]] = {
    "p150": ("p150_cluster_desc.yaml", (1, 1)),
    "p300": ("p300_cluster_desc.yaml", (1, 2)),
    "4xp150": ("4xp150_cluster_desc.yaml", (1, 4)),
    "8xp150": ("8xp150_cluster_desc.yaml", (1, 8)),
}


def cluster_of(target: str | None) -> str:
    """The mock cluster a plan for ``target`` runs on."""
    return target if target in CLUSTERS else "p150"


def env(home: Path, cluster: str = "p150") -> dict[str, str]:
    """The variables ttnn needs, to be set before it is imported; ``cluster``: a key of CLUSTERS."""
    overrides = {"cache_path": str(home / "ttnn-cache"), "model_cache_path": str(home / "ttnn-cache" / "models"),
                 "tmp_dir": str(home / "ttnn-tmp"), "root_report_path": str(home / "reports")}
    return {
        "TT_METAL_MOCK_CLUSTER_DESC_PATH": str(HERE / CLUSTERS[cluster][0]),
        "TT_METAL_RUNTIME_ROOT": str(home / "root") + "/",
        "TT_METAL_CACHE": str(home / "cache") + "/",
        "TTNN_CONFIG_OVERRIDES": json.dumps(overrides, sort_keys=True),
        "TT_LOGGER_LEVEL": os.environ.get("TT_LOGGER_LEVEL", "ERROR"),
        "LOGURU_LEVEL": os.environ.get("LOGURU_LEVEL", "WARNING"),  # ttnn logs its config at import
    }


def _package_dir() -> Path:
    spec = importlib.util.find_spec("ttnn")
    if spec is None or spec.origin is None:
        raise HarnessError("ttnn is not installed in this interpreter; run `make mock-env`")
    version = importlib.metadata.version("ttnn")
    if version != TTNN_VERSION:
        raise HarnessError(f"ttnn {version} is installed; the mock harness is built for {TTNN_VERSION} only")
    return Path(spec.origin).parent


def _overlay(pkg: Path, root: Path) -> None:
    """root/ mirrors the package by symlinks, with the two places we add to made real folders."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    for entry in pkg.iterdir():
        if entry.name not in ("tt_metal", "runtime"):
            (root / entry.name).symlink_to(entry)
    (root / "tt_metal" / "pre-compiled").mkdir(parents=True)
    for entry in (pkg / "tt_metal").iterdir():
        if entry.name != "pre-compiled":
            (root / "tt_metal" / entry.name).symlink_to(entry)
    for entry in (pkg / "tt_metal" / "pre-compiled").iterdir():
        (root / "tt_metal" / "pre-compiled" / entry.name).symlink_to(entry)
    (root / "runtime").mkdir()
    for entry in (pkg / "runtime").iterdir():
        (root / "runtime" / entry.name).symlink_to(entry)
    compiler = root / "runtime" / "sfpi" / "compiler" / "bin"
    compiler.mkdir(parents=True)
    # a wrapper, not a symlink to the script: an installed wheel drops a module's executable bit
    # (setuptools copies .py files without their mode), and tt-metal would get "Permission denied"
    gxx = compiler / "riscv-tt-elf-g++"
    cc = _c_compiler()
    if cc:
        build = subprocess.run([cc, "-O2", "-o", str(gxx), str(HERE / "fake_riscv_gxx.c")], capture_output=True,
                               text=True, check=False)
        if build.returncode == 0:
            return
        gxx.unlink(missing_ok=True)  # a compiler that fails here: the Python stand-in does the same
    gxx.write_text(f'#!/bin/sh\nexec {_python_compiler()} "$@"\n')
    gxx.chmod(0o755)


def _c_compiler() -> str | None:
    return shutil.which("cc") or shutil.which("gcc")


def _python_compiler() -> str:
    """The stand-in run by this interpreter, isolated (-I) and without site (-S): it needs the
    standard library only, and a start without site takes a third of the time."""
    return shlex.join([sys.executable, "-I", "-S", str(HERE / "fake_riscv_gxx.py")])


def _compiler_command() -> str:
    """What the overlay's compiler is (the stamp): the C stand-in (fake_riscv_gxx.c) built with the
    machine's C compiler, or the Python one. tt-metal runs it thousands of times over the suite; an
    interpreter's start is ~50 ms each time, the C program's ~1 ms."""
    cc = _c_compiler()
    if cc:
        return shlex.join([cc, "-O2", str(HERE / "fake_riscv_gxx.c")])
    return _python_compiler()


# the device configurations spc opens: one command queue (call by call), and the 1x1 mesh with two
# command queues that trace replay uses. Each has its own firmware build key.
_KEY_SCRIPTS = {
    "one queue": "import ttnn\nd = ttnn.open_device(device_id=0, l1_small_size=0, trace_region_size=0)\n"
                 "ttnn.close_device(d)\n",
    "two queues": "import ttnn\nd = ttnn.open_mesh_device(ttnn.MeshShape(1, 1), num_command_queues=2)\n"
                  "ttnn.close_mesh_device(d)\n",
}


def _mesh_script(mesh: tuple[int, int]) -> str:
    """Open and close the whole mesh of a multi-chip cluster, as the backend opens it."""
    return (f"import ttnn\nd = ttnn.open_mesh_device(ttnn.MeshShape({mesh[0]}, {mesh[1]}), l1_small_size=32768, "
            "trace_region_size=0, num_command_queues=2)\nttnn.close_mesh_device(d)\n")


def prepare(home: Path | None = None, cluster: str = "p150") -> dict[str, str]:
    """Build (or reuse) the overlay in ``home`` and return the environment for the mock ``cluster``
    (a key of CLUSTERS); idempotent. A multi-chip cluster is opened once as the whole mesh, after
    the p150's set-up, and any build key of its own linked too (none, with the p150's harvesting)."""
    home = (home or default_home()).resolve()
    if cluster not in CLUSTERS:
        raise HarnessError(f"no mock cluster {cluster!r} (known: {', '.join(CLUSTERS)})")
    pkg = _package_dir()
    firmware = pkg / "tt_metal" / "pre-compiled" / SHIPPED_BLACKHOLE_FIRMWARE
    if not (firmware / "active_erisc").is_dir() or not (firmware / "drisc").is_dir():
        raise HarnessError(f"the ttnn wheel no longer ships Blackhole firmware {SHIPPED_BLACKHOLE_FIRMWARE}")
    variables = env(home)
    stamp = home / "ready.json"
    # the overlay runs this very copy of the stand-in compiler with this interpreter: a moved or
    # reinstalled spc (or venv) rebuilds it
    stand_in = hashlib.sha256(b"".join((HERE / f).read_bytes() for f in ("fake_riscv_gxx.c", "fake_riscv_gxx.py")))
    ready = {"package": str(pkg), "ttnn": TTNN_VERSION, "compiler": _compiler_command(),
             "stand_in": stand_in.hexdigest()}
    root = home / "root"
    if not (stamp.exists() and json.loads(stamp.read_text()) == ready):
        _overlay(pkg, root)
        for what, script in _KEY_SCRIPTS.items():
            _link_firmware_key(what, script, home, variables, root, firmware)
        home.mkdir(parents=True, exist_ok=True)
        for old in home.glob("ready-*.json"):  # the clusters opened on the old overlay
            old.unlink()
        stamp.write_text(json.dumps(ready))
    if cluster == "p150":
        return variables
    variables = env(home, cluster)
    cluster_stamp = home / f"ready-{cluster}.json"
    ready = {**ready, "descriptor": (HERE / CLUSTERS[cluster][0]).read_text()}
    if not (cluster_stamp.exists() and json.loads(cluster_stamp.read_text()) == ready):
        _link_firmware_key(f"{cluster}, the {CLUSTERS[cluster][1][0]}x{CLUSTERS[cluster][1][1]} mesh",
                           _mesh_script(CLUSTERS[cluster][1]), home, variables, root, firmware)
        cluster_stamp.write_text(json.dumps(ready))
    return variables


def _link_firmware_key(what: str, script: str, home: Path, variables: dict[str, str], root: Path,
                       firmware: Path) -> None:
    """The build key is discovered, not assumed: open once in a throw-away cache and read the
    name of the folder tt-metal creates for it; link it to the shipped firmware."""
    for _ in range(2):
        with tempfile.TemporaryDirectory(dir=home) as scratch:
            run_env = {**os.environ, **variables, "TT_METAL_CACHE": scratch + "/"}
            proc = subprocess.run([sys.executable, "-c", script], env=run_env, cwd=scratch, capture_output=True,
                                  text=True, check=False)
            keys = [p.name[len("tt-metal-cache"):] for p in Path(scratch).glob("tt-metal-cache*")]
            keys = [k for k in keys if k.isdigit()]  # tt-metal-cache/ itself holds precompiled headers
        if proc.returncode == 0:
            return
        if not keys or (root / "tt_metal" / "pre-compiled" / keys[0]).exists():
            tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
            raise HarnessError(f"opening the mock cluster ({what}) failed ({tail}); the harness's assumptions about "
                               f"ttnn {TTNN_VERSION} no longer hold")
        (root / "tt_metal" / "pre-compiled" / keys[0]).symlink_to(firmware)
    raise HarnessError(f"opening the mock cluster ({what}) still fails after linking its firmware key")

if __name__ == "__main__":  # python -m spc.runtime.ttnn_mock.harness [HOME [CLUSTER]]
    try:
        print(json.dumps(prepare(Path(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] else None,
                                 sys.argv[2] if len(sys.argv) > 2 else "p150"), indent=1))
    except HarnessError as exc:
        sys.exit(f"mock harness: {exc}")
