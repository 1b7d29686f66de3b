"""spc's version: what a plan, an export's metadata and a report say wrote them (pyproject.toml's)."""

__version__ = "0.1.0"
