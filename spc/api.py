"""spc from Python: compile an ONNX export, load a plan, run it on images or arrays.

    import spc
    model = spc.compile("superpoint.onnx")           # or spc.load("sp.ttplan")
    f = model.run("img.jpg")                          # a path, a PIL image or a numpy array
    f.keypoints, f.scores, f.descriptors, f.image_size
    m = spc.match("sp.ttplan", "lightglue.ttplan", "a.jpg", "b.jpg")  # or two loaded models
    m.matches, m.scores                               # (M, 2) indices into m.features0/1, (M,)

``keypoints`` are (N, 2) float32 (x, y) in the original image's pixels, with a pixel's centre at
integer coordinates (hloc's, COLMAP's and kornia's convention; docs/outputs.md), ``scores`` (N,),
``descriptors`` (N, D); ``outputs`` holds the model's own outputs by their ONNX names, as
onnxruntime returns them. The same checks as the command line apply (plans validated, inputs
bounded and finite, nothing written over an input), and errors are :class:`spc.errors.SpcError`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
from msgspec import Struct

from spc.errors import SpcError
from spc.files import check_outputs
from spc.options import CompileOptions
from spc.plan.io import Plan, read_plan
from spc.plan.program import ImageInput
from spc.runtime.extraction import Extraction, has_keypoints
from spc.ttnn.precision import PrecisionPlan
from spc.ttnn.targets import DEFAULT_TARGET


class Features(Struct, frozen=True):
    """One image's result."""

    keypoints: np.ndarray  # (N, 2) float32, (x, y) in the original image's pixels
    scores: np.ndarray  # (N,)
    descriptors: np.ndarray  # (N, D)
    image_size: tuple[int, int]  # the original image's (width, height)
    outputs: dict[str, np.ndarray]  # the model's outputs by ONNX name


class Matches(Struct, frozen=True):
    """One pair's matches: ``matches`` (M, 2) int64, each row a keypoint of ``features0`` and its
    match in ``features1``; ``scores`` (M,); ``matches0`` / ``matching_scores0`` as hloc holds them
    (for each keypoint of image 0, its match or -1). The features are the ones the matcher saw:
    each image's K best by score, K the matcher's (runtime/matching.py)."""

    matches: np.ndarray
    scores: np.ndarray
    matches0: np.ndarray
    matching_scores0: np.ndarray
    features0: Features
    features1: Features


class Model:
    """A loaded plan and the backend it runs on (prepared on the first run, kept until close)."""

    def __init__(self, plan: Plan, backend: str = "emu", path: Path | None = None) -> None:
        self.plan = plan
        self.backend = backend
        self.path = path
        self._runner: Any = None

    @property
    def input_shape(self) -> list[int]:
        return [int(d) for d in self.plan.program.inputs[0].shape]

    @property
    def target(self) -> str:
        return str(self.plan.manifest.get("target", DEFAULT_TARGET))

    def run(self, image: Any, *, resize: str = "stretch", allow_nonfinite: bool = False,
            extraction: Extraction | None = None) -> Features:
        """``image``: a file (image or .npy), a PIL image, a grey (H, W) or RGB (H, W, 3) array
        (uint8, or float in [0, 1]), or an array of the plan's exact input shape (used as is).
        ``resize``: ``stretch`` to the plan's size, or ``fit`` (aspect ratio kept, zero padding).
        A model that returns SuperPoint's raw heads gets the standard extraction (``extraction``:
        its parameters, spc.Extraction); a fixed-K extractor's outputs (DISK's) by the roles their
        shapes gave them (lowering/roles.py). Any other raises: :meth:`outputs` gives its outputs."""
        # `spc run`'s modules and the runtime (~50 ms: rich, PIL): spc.compile and spc.load run nothing
        from spc.tools.run import in_original, keypoints_of

        if not has_keypoints(self.plan.program.roles):
            raise SpcError(f"{self.path or 'the plan'}: the model's outputs hold no keypoints, neither as keypoints "
                           "nor as SuperPoint's raw heads (outputs: "
                           f"{', '.join(t.name for t in self.plan.program.outputs)}); Model.outputs(image) gives them")
        shape = self.input_shape
        result, geometry = self._result(image, resize, allow_nonfinite)
        h, w = self.plan.program.image.frame_size(shape)
        found = keypoints_of(result, self.plan.program.roles, h, w, extraction)
        size = geometry.original if geometry is not None else (w, h)
        assert found is not None
        xy, scores, desc = in_original(found, geometry)
        return Features(xy, scores, desc, size, result.outputs)

    def outputs(self, image: Any, *, resize: str = "stretch", allow_nonfinite: bool = False) -> dict[str, np.ndarray]:
        """The model's own outputs on ``image`` (as :meth:`run` takes it), by their ONNX names."""
        return self._result(image, resize, allow_nonfinite)[0].outputs

    def tensors(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model's outputs for inputs given by name (a matcher's), as onnxruntime returns them."""
        from spc.runtime.runner import Runner  # as in run

        if self._runner is None:
            self._runner = Runner(self.plan, self.backend)
        return self._runner.run(feeds).outputs

    def _result(self, image: Any, resize: str, allow_nonfinite: bool) -> tuple[Any, Any]:
        from spc.runtime.runner import Runner  # as in run

        x, geometry = _frame(image, self.input_shape, self.plan.program.image, resize, allow_nonfinite)
        if self._runner is None:
            self._runner = Runner(self.plan, self.backend)
        return self._runner.run(x), geometry

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    def __enter__(self) -> Model:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _frame(image: Any, shape: list[int], convention: ImageInput, resize: str,
           allow_nonfinite: bool) -> tuple[np.ndarray, Any]:
    """The plan input for ``image``, read as the plan's ``convention`` says, and how it maps back
    to it (None: used as is): a file goes through `spc run`'s own reading (its header checked
    first; a video gives its first frame)."""
    from spc.runtime.frames import frames, image_frame, probe  # as in Model.run
    from spc.runtime.inputs import check_values

    if isinstance(image, (str, Path)):
        frame = next(frames([probe(Path(image), shape, allow_nonfinite, image=convention)], shape, resize,
                            allow_nonfinite=allow_nonfinite, image=convention))
        return frame.x, frame.geometry
    colour = convention.colour == "rgb"
    a = np.asarray(image.convert("RGB" if colour else "L") if hasattr(image, "convert") else image)
    if list(a.shape) == shape:
        check_values(Path("<array>"), a, allow_nonfinite)
        return np.ascontiguousarray(a, dtype=np.float32), None
    if a.ndim == 3 and a.shape[2] in (3, 4):  # RGB(A): image_frame reads it in colour or grey, as the plan says
        a = a[..., :3].astype(np.float32) * (np.float32(1 / 255) if a.dtype == np.uint8 else np.float32(1))
    elif a.ndim == 2:
        a = a.astype(np.float32) / 255.0 if a.dtype == np.uint8 else a.astype(np.float32)
    else:
        raise SpcError(f"an array of shape {list(a.shape)} is neither an image (H, W) / (H, W, 3) nor the "
                       f"plan's input {shape}")
    check_values(Path("<array>"), a, allow_nonfinite)
    return image_frame(np.ascontiguousarray(a, dtype=np.float32), shape, resize, "<array>", convention)


def load(path: str | Path, *, target: str | None = None, backend: str = "emu") -> Model:
    """A plan file, validated as `spc run` validates it (``target``: the chip it must be for)."""
    return Model(read_plan(Path(path), target or DEFAULT_TARGET), backend, Path(path))


def compile(onnx: str | Path, output: str | Path | None = None, *, precision: str = "accurate",
            target: str = DEFAULT_TARGET, input_shape: list[int] | None = None, dense: bool = False,
            kernels: bool = False, overwrite: bool = False, backend: str = "emu", batch: int = 1) -> Model:
    """Compile ``onnx`` as `spc compile` does; the plan is written to ``output`` when given (never
    over the ONNX, an existing file only with ``overwrite``), else kept in memory only. ``batch``:
    `--batch` (a batch plan's :meth:`Model.run` takes an array of its whole input shape)."""
    from spc.compiler import compile_onnx  # the compiler (~80 ms more): spc.load and Model.run need none of it

    src = Path(onnx)
    with tempfile.TemporaryDirectory(prefix="spc-") as tmp:
        out = Path(output) if output is not None else Path(tmp) / "plan.ttplan"
        if output is not None:
            check_outputs([out], [src], overwrite)
        compile_onnx(src, out, CompileOptions(target=target, precision=PrecisionPlan(precision), dense=dense,
                                              kernels=kernels, input_shape=input_shape, batch=batch))
        return Model(read_plan(out, target), backend, out if output is not None else None)


def match(extractor: Model | str | Path, matcher: Model | str | Path, image0: Any, image1: Any, *,
          resize: str = "stretch", coords: str = "pixels") -> Matches:
    """Extract both images with ``extractor`` and match them with ``matcher`` (plans or loaded
    models; `spc match`'s pipeline for one pair). ``coords``: the matcher's keypoints in
    ``pixels`` or LightGlue's ``normalized`` coordinates."""
    from spc.runtime.matching import COORDS, hloc_matches, kept_keypoints, matcher_roles, pair_feeds

    if coords not in COORDS:
        raise SpcError(f"coords={coords!r}: expected one of {', '.join(COORDS)}")
    x = extractor if isinstance(extractor, Model) else load(extractor)
    m = matcher if isinstance(matcher, Model) else load(matcher)
    try:
        roles = matcher_roles(m.plan.program)
        if isinstance(roles, str):
            raise SpcError(f"{m.path or 'the matcher'}: not a matcher's plan: {roles}")
        keep = min(side.count for side in roles.sides)
        kept = []
        for image in (image0, image1):
            f = x.run(image, resize=resize)
            i = kept_keypoints(f.scores, keep)
            kept.append(Features(f.keypoints[i], f.scores[i], f.descriptors[i], f.image_size, f.outputs))
        a, b = kept
        feeds = pair_feeds(roles, (a.keypoints, a.scores, a.descriptors, a.image_size),
                           (b.keypoints, b.scores, b.descriptors, b.image_size), coords)
        m0, s0 = hloc_matches(m.tensors(feeds), roles, len(a.keypoints), len(b.keypoints))
    finally:
        for model, given in ((x, extractor), (m, matcher)):  # a model loaded here is closed here
            if model is not given:
                model.close()
    idx = np.flatnonzero(m0 >= 0)
    return Matches(np.stack([idx, m0[idx].astype(np.int64)], -1), s0[idx].astype(np.float32), m0, s0, a, b)
