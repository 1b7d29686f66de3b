"""How values are written into spc's one-line messages: another tool's text as one line, a size
in bytes."""

from __future__ import annotations


def one_line(text: BaseException | str, cap: int = 300) -> str:
    """An exception or another tool's text as one line (onnx's and image decoders' messages run
    over several, with blank ones), at most ``cap`` characters."""
    joined = " ".join(part.strip() for part in str(text).splitlines() if part.strip())
    return joined[:cap] + ("..." if len(joined) > cap else "")


def byte_size(n: int) -> str:
    """``n`` bytes in the largest unit that keeps it at least 1 (bytes, KiB, MiB, ...)."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError
