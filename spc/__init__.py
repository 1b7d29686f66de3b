"""spc: a graph compiler from SuperPoint ONNX to Tenstorrent ttnn programs."""

__version__ = "0.1.0"
