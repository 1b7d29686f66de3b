"""A model read from its file, checked, and annotated with onnx's inferred types: what the
importer (onnx_import.py) turns into the IR.

:func:`begin` reads and parses the file, then forks a child (shape_inference.py) that runs onnx's
checker and shape inference on its own copy of the model. spc's checks (validate.py) run before
onnx's code sees the model, in one of two places:

* here, in :meth:`Reading.inferred`, while the child infers (the default: a caller that waits
  for the model has this core free for them);
* ``ahead=True``: in the child, before its inference, for a caller with work of its own meanwhile.
  ``spc compile`` begins its read so before it imports numpy and the compiler (~95 ms on one
  core; the checks and the inference ~45 ms on the other). The child marks that its checks
  passed; where they did not (a refusal, or the child ended before they did), they run here in
  their order, then onnx's checker and inference in a child of their own: the outcome, and its
  wording, are those of the checks run here.

Nothing here imports numpy; a refusal found by :func:`begin` is raised by :meth:`Reading.inferred`,
so that a caller's own checks of its options come first, as if the read began there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spc.errors import SpcError
from spc.frontend import onnx_schemas, shape_inference, validate
from spc.frontend.validate import show

MIN_OPSET, MAX_OPSET = onnx_schemas.OPSETS[0], onnx_schemas.OPSETS[-1]


def model_opset(model: Any, path: Path) -> int:
    """The model's default-domain (ai.onnx) opset, one spc imports."""
    versions = {o.domain: o.version for o in model.opset_import}
    opset = versions.get("", versions.get("ai.onnx"))
    if opset is None:
        raise SpcError(f"{path}: the model imports no default-domain (ai.onnx) opset; re-export it with opset 18")
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise SpcError(f"{path}: opset {opset} is not supported (supported: {MIN_OPSET}..{MAX_OPSET}); "
                       "re-export with opset 18")
    return opset


def fix_input_shape(model: Any, shape: list[int], path: Path) -> None:
    """Give the model's one input the static ``shape`` (``--input-shape``), where its own dims are
    symbols (an export with dynamic axes) or already equal."""
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    if len(inputs) != 1:
        raise SpcError(f"{path}: --input-shape fixes one input; the model has {len(inputs)}")
    dims = inputs[0].type.tensor_type.shape.dim
    if len(dims) != len(shape) or any(d < 1 for d in shape):
        raise SpcError(f"{path}: --input-shape {shape} does not fit input {show(inputs[0].name)} of rank {len(dims)}")
    for d, want in zip(dims, shape):
        if d.HasField("dim_value") and d.dim_value != want:
            raise SpcError(f"{path}: --input-shape {shape}: input {show(inputs[0].name)} has a fixed size "
                           f"{d.dim_value} where {want} was asked")
        d.Clear()
        d.dim_value = want


def _checks(model: Any, path: Path, opset: int, input_shape: list[int] | None,
            supported: Callable[[Any], None] | None = None) -> None:
    """spc's checks, in their order (the first refusal is the one reported); ``supported`` (the
    importer's: spc has each op) after the strings', which it relies on. A fixed input shape is
    written into ``model`` and checked against the caps."""
    validate.check_strings(model, path)
    if supported is not None:
        supported(model)
    validate.check_model(model, path, opset)
    if input_shape is not None:
        fix_input_shape(model, input_shape, path)
        for vi in model.graph.input:  # the fixed sizes may multiply past the caps
            validate.check_value_type(vi, "input", path)


class Reading:
    """A model being read: the parsed model and the child inferring its shapes (None: none
    started, or no child for a trusted model, ``isolate=False``), or the refusal that ended the
    read. :meth:`inferred` finishes it once; :meth:`cancel` ends it unfinished."""

    def __init__(self, path: Path, input_shape: list[int] | None, model: Any = None, opset: int = 0,
                 data: bytes = b"", isolate: bool = True, ahead: bool = False, error: SpcError | None = None) -> None:
        self.path, self.input_shape, self.model, self.opset, self.data = path, input_shape, model, opset, data
        self.isolate, self.ahead, self.error = isolate, ahead, error
        self.digest = ""
        self.child: shape_inference.Inference | None = None
        if error is not None or not isolate:
            return
        if ahead:  # the child checks before it infers: nothing is left to do here meanwhile

            def view() -> bytes:  # the child's copy, with a fixed input's shape; the checks read the data
                if input_shape is not None:
                    fix_input_shape(model, input_shape, path)
                return shape_inference.shape_view(model, restore=True)

            def check() -> None:  # (check_model bounds the inputs, a fixed one's shape with them)
                _checks(model, path, opset, None)
                validate.onnx_check_nodes(model, path)

            self.child = shape_inference.Inference.start(view, check, load_here=False, marks=True)
            self.ahead = self.child is not None
        elif input_shape is None:  # (a fixed input shape changes the model first: the child waits)
            self.child = shape_inference.Inference.start(lambda: shape_inference.shape_view(model, restore=False),
                                                         self._onnx_check)

    def _onnx_check(self) -> None:
        # onnx's checker runs in the child, before its inference (it reads onnx's schema registry,
        # which the child builds for the inference and this process need not: ~10 ms)
        validate.onnx_check_nodes(self.model, self.path)

    @classmethod
    def of_model(cls, model: Any, path: Path, input_shape: list[int] | None = None,
                 isolate: bool = False) -> Reading:
        """An in-memory model (``path`` names it in messages); ``isolate``: onnx's inference in a
        child, as for a file."""
        return cls(path, input_shape, model, model_opset(model, path), isolate=isolate)

    def inferred(self, supported: Callable[[Any], None]) -> Any:
        """The model after every check, annotated in place with onnx's inferred types (value_info,
        the outputs' types). ``supported``: the importer's check that spc has each op."""
        if self.error is not None:
            raise self.error
        child, self.child = self.child, None
        model, path = self.model, self.path
        if child is not None and self.ahead:
            done = child.result()
            if child.checked:  # its checks passed, then onnx's inference ran (and may have failed)
                supported(model)
                if self.input_shape is not None:  # as the child did to its copy
                    fix_input_shape(model, self.input_shape, path)
                return shape_inference.infer_shapes(model, path, True, done, self._onnx_check)
            # refused, or ended before its checks did: they run here, in their order, and onnx's
            # checker and inference in a child of their own, as when no child ran them ahead
            _checks(model, path, self.opset, self.input_shape, supported)
            return shape_inference.infer_shapes(model, path, True, None, self._onnx_check)
        try:
            _checks(model, path, self.opset, self.input_shape, supported)
            if child is None:
                self._onnx_check()
        except BaseException:
            if child is not None:
                child.cancel()
            raise
        done = child.result() if child is not None else None
        return shape_inference.infer_shapes(model, path, self.isolate, done,
                                            self._onnx_check if child is not None else None)

    def sha256(self) -> str:
        """The digest of the file's bytes, which are let go then (a compile keeps its reading)."""
        if not self.digest:
            self.digest, self.data = hashlib.sha256(self.data).hexdigest(), b""
        return self.digest

    def cancel(self) -> None:
        """The child ended, if it runs (a read begun and not needed: an option refused after it)."""
        child, self.child = self.child, None
        if child is not None:
            child.cancel()


def begin(path: Path, input_shape: list[int] | None = None, *, ahead: bool = False) -> Reading:
    """``path`` read and parsed, and onnx's inference begun in a forked child (``ahead``: with
    spc's checks, see the module's docstring). A refusal is kept for :meth:`Reading.inferred`."""
    try:
        data = validate.read_file(path)
        model = validate.parse_model(data, path)
        opset = model_opset(model, path)
    except SpcError as exc:
        return Reading(path, input_shape, error=exc)
    return Reading(path, input_shape, model, opset, data, ahead=ahead)
