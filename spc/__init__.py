"""spc: a graph compiler from SuperPoint ONNX to Tenstorrent ttnn programs.

The Python API (spc/api.py), imported on first use so that `import spc` stays light:
``spc.compile(onnx) -> Model``, ``spc.load(plan) -> Model``, ``Model.run(image) -> Features``
(``spc.Extraction``: the standard extraction's parameters for a raw-heads model),
``spc.match(extractor, matcher, image0, image1) -> Matches``.
"""

from typing import Any

from spc.version import __version__

__all__ = ["__version__"]

_API = ("compile", "load", "match", "Model", "Features", "Matches", "Extraction")


def __getattr__(name: str) -> Any:
    if name in _API:
        from spc import api  # numpy, the plan reader, the runtime (~200 ms): not for every `import spc.X`

        return getattr(api, name)
    raise AttributeError(f"module 'spc' has no attribute {name!r}")
