"""`spc run` for a plan of several inputs (a matcher's keypoints, descriptors and image sizes): each
input file is an .npz with one array per plan input, each result an .npz of the model's outputs.

Every file is checked from its headers before the first run (runtime/inputs.py: read_npz); each is
then read as it is run, so memory does not grow with the number of files. No output replaces an
input, the plan or another output; existing results are kept unless --overwrite.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from spc import console
from spc.errors import SpcError
from spc.files import atomic_write, check_outputs, file_sha256
from spc.plan.io import Plan
from spc.runtime.inputs import read_npz
from spc.runtime.runner import Runner
from spc.tools.run import PLAN_KEY, npz_bytes, output_paths

# what `spc run` offers image plans and not a plan of tensors: option -> its default
IMAGE_ONLY = {"--viz": None, "--format": "npz", "--resize": "stretch", "--dense": False, "--coords": "onnx",
              "--keep-going": False, "--skip-existing": False}


def input_specs(plan: Plan) -> list[tuple[str, list[int]]]:
    """Each plan input's name and shape, as read_npz checks a file against them."""
    return [(t.name, [int(d) for d in t.shape]) for t in plan.program.inputs]


def run_tensor_files(plan: Plan, files: list[Path], output: Path | None, backend: str, trace: bool = True, *,
                     plan_path: Path | None = None, overwrite: bool = False, allow_nonfinite: bool = False,
                     as_json: bool = False, image_options: dict[str, object] | None = None) -> None:
    """Run the plan on each .npz of ``files``; ``image_options``: the image options as given
    (any that is not its default is refused)."""
    names = ", ".join(n for n, _ in input_specs(plan))
    given = [k for k, v in (image_options or {}).items() if v != IMAGE_ONLY.get(k)]
    if given:
        raise SpcError(f"{given[0]} is offered for image plans; this plan takes tensors ({names}) and writes "
                       "its outputs to .npz: drop it")
    if not files:
        raise SpcError(f"no inputs: give .npz files holding the plan's inputs ({names})")
    odd = [f for f in files if f.suffix.lower() != ".npz"]
    if odd:
        raise SpcError(f"{odd[0]}: this plan takes {len(plan.program.inputs)} tensors ({names}); give each run's "
                       "as one .npz (numpy.savez(FILE, NAME=array, ...))")
    specs = input_specs(plan)
    targets = output_paths(files, output, ".npz")
    check_outputs(targets, [*files, *([plan_path] if plan_path else [])], overwrite)
    for f in files:  # every file checked before the first run
        read_npz(f, specs, allow_nonfinite, check_only=True)
    sha = file_sha256(plan_path) if plan_path is not None else str(plan.manifest.get("digest", ""))
    if backend == "ttnn-mock" and not as_json:
        console.note("the mock p150 validates every call and allocates its memory but computes no values (zeros): "
                     "the outputs below mean nothing; --backend emu computes them")
    done = 0
    try:
        with Runner(plan, backend, trace) as runner:
            for f, t in zip(files, targets):
                result = runner.run(read_npz(f, specs, allow_nonfinite))
                atomic_write(t, npz_bytes({**result.outputs, PLAN_KEY: np.array(sha)}))
                done += 1
                shapes = {name: list(a.shape) for name, a in result.outputs.items()}
                if as_json:
                    print(json.dumps({"input": str(f), "output": str(t), "outputs": shapes}), flush=True)
                else:
                    console.info(f"{f}: " + ", ".join(f"{k} {v}" for k, v in shapes.items()) + f" -> {t}")
    except SpcError as exc:
        if done:
            raise SpcError(f"{exc} (stopped after {done} of {len(files)} input(s); their results are kept)") from None
        raise
