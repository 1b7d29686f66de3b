"""onnx's message classes and C++ extension, without onnx's Python package.

``import onnx`` costs ~70 ms beyond numpy, a fifth of the ``spc compile`` command: its
``__init__`` reads its own version through importlib.metadata and imports helper, compose,
serialization (protobuf's json_format), ml_dtypes and more. The importer needs two of its parts:
the generated messages (``onnx_ml_pb2``: ModelProto, TensorProto, AttributeProto) and the C++
extension (the checker, shape inference, op schemas). This module loads each from its file, under
its own name, when first asked for (a compile parses its model before numpy is imported, and only
the child that checks it and infers its shapes loads the extension), and decodes tensors and
attribute values itself for the element types spc takes (what ``numpy_helper.to_array`` and
``helper.get_attribute_value`` do; a test holds them equal to onnx's on the conformance cases and
the corpus).

Where onnx is already imported, its modules are the ones used. The extension cannot be
initialised twice in a process (nanobind aborts), so it is registered under its own name and a
later ``import onnx`` finds it; :class:`_BindOnImport` then binds the parts loaded here to the
package, as the import system binds the submodules it loads itself.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# the parts loaded here, by their names inside onnx's package, each when first asked for: the
# messages parse a model before numpy or the extension is loaded (a compile reads its model
# first), and the extension is loaded where shape inference runs (a forked child)
_LOADED: dict[str, ModuleType] = {}  # what this module loaded, for _BindOnImport


@functools.cache
def _part(part: str) -> ModuleType:
    name = f"onnx.{part}"
    if "onnx" in sys.modules:  # onnx's own package is loaded: its modules, not a second copy
        return importlib.import_module(name)
    spec = importlib.util.find_spec("onnx")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("spc needs the onnx package (pip install onnx); it is not installed")
    if name not in sys.modules:
        child = importlib.machinery.PathFinder.find_spec(name, list(spec.submodule_search_locations))
        if child is None or child.loader is None:
            raise ModuleNotFoundError(f"onnx's {part} is missing from {spec.origin}; reinstall onnx")
        module = importlib.util.module_from_spec(child)
        sys.modules[name] = module
        try:
            child.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    if not _LOADED:
        sys.meta_path.insert(0, _BindOnImport(_LOADED))
    _LOADED[part] = sys.modules[name]
    return _LOADED[part]


class _BindOnImport:
    """When onnx's package is imported after its parts were loaded here, set them as its
    attributes before its ``__init__`` runs: the import system binds a submodule to its package
    only when it loads the submodule itself, and ``onnx.onnx_cpp2py_export`` is read as one. It
    leaves ``sys.meta_path`` once the package has loaded (a probe that only finds it, or an import
    that fails, leaves it in place)."""

    def __init__(self, parts: dict[str, ModuleType]) -> None:
        self.parts, self.finding = parts, False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "onnx" or self.finding:
            return None
        self.finding = True  # the other finders' answer, without asking this one again
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.finding = False
        if spec is None or spec.loader is None:
            return spec
        run, parts = spec.loader.exec_module, self.parts

        def exec_module(module: ModuleType) -> None:
            for part, loaded in parts.items():
                setattr(module, part, loaded)
            run(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]  # this spec's loader only
        return spec


def messages() -> Any:
    """onnx's generated message module: ModelProto, TensorProto, AttributeProto, IR_VERSION."""
    return _part("onnx_ml_pb2")


def cpp() -> Any:
    """onnx's C++ extension: ``checker``, ``shape_inference``, ``defs``."""
    return _part("onnx_cpp2py_export")


def onnx_version() -> str:
    """The installed onnx's version, for messages (read from its metadata: ~15 ms, errors only)."""
    from importlib.metadata import PackageNotFoundError, version  # ~10 ms of a compile: error messages only

    try:
        return version("onnx")
    except PackageNotFoundError:  # installed without its metadata
        return "(version unknown)"


# numpy types by ONNX element type, for the types spc takes (spc.ir.types._ONNX without BFLOAT16)
_NUMPY = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
          10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}
# where the typed (not raw) values live, and as what numpy type they are read from there
_STORED = {1: ("float_data", "float32"), 2: ("int32_data", "int32"), 3: ("int32_data", "int32"),
           6: ("int32_data", "int32"), 7: ("int64_data", "int64"), 11: ("double_data", "float64"),
           12: ("uint64_data", "uint64"), 13: ("uint64_data", "uint64")}
# 16- and 8-bit types whose int32_data hold bit patterns, reinterpreted rather than converted
_BITS16 = (4, 5, 10)


def to_array(t: Any) -> np.ndarray:
    """A TensorProto's values, as ``onnx.numpy_helper.to_array`` gives them: raw_data read in place
    (little-endian), typed fields converted. ``validate.check_tensor`` has checked that the data
    fits the dims; external data has been read into raw_data (``validate.parse_model``)."""
    import numpy as np  # here: reading and checking a model needs no numpy (frontend/reading.py)

    code = int(t.data_type)
    if code not in _NUMPY:
        raise TypeError(f"tensor {t.name!r}: element type {code} is not one spc decodes")
    dtype, dims = np.dtype(_NUMPY[code]).newbyteorder("<"), tuple(t.dims)
    if t.HasField("raw_data"):
        return np.frombuffer(t.raw_data, dtype=dtype).astype(dtype.newbyteorder("="), copy=False).reshape(dims)
    if code in _BITS16:
        return np.array(t.int32_data, dtype=np.int32).view(np.uint32).astype(np.uint16).reshape(dims).view(
            _NUMPY[code])
    if code == 9:
        return np.array(t.int32_data, dtype=np.int32).view(np.uint32).astype(np.uint8).view(np.bool_).reshape(dims)
    field, stored = _STORED[code]
    return np.asarray(getattr(t, field), dtype=stored).astype(_NUMPY[code]).reshape(dims)


# AttributeProto.AttributeType: the value's field, and whether it is repeated
_ATTR_FIELDS = {1: ("f", False), 2: ("i", False), 3: ("s", False), 4: ("t", False), 5: ("g", False),
                6: ("floats", True), 7: ("ints", True), 8: ("strings", True), 9: ("tensors", True),
                10: ("graphs", True), 11: ("sparse_tensor", False), 12: ("sparse_tensors", True),
                13: ("tp", False), 14: ("type_protos", True)}


def attribute_value(attr: Any) -> Any:
    """An AttributeProto's value as ``onnx.helper.get_attribute_value`` gives it: a scalar, bytes,
    a message, or a list of them."""
    if attr.ref_attr_name:
        raise ValueError(f"attribute {attr.name!r} refers to a function's attribute {attr.ref_attr_name!r}")
    try:
        field, repeated = _ATTR_FIELDS[int(attr.type)]
    except KeyError:
        raise ValueError(f"attribute {attr.name!r} has no type") from None
    value = getattr(attr, field)
    return list(value) if repeated else value
