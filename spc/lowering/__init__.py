"""Lowering: partitioned IR -> ttnn program (program.py) -> .ttplan file (plan.py)."""
