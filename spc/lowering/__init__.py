"""Lowering: partitioned IR -> ttnn program (its types: plan/program.py; the .ttplan file: plan/io.py).

lower.py walks the stages, emitter.py appends the ttnn calls and tracks each device tensor's layout,
format and home; fused.py, generic.py and readback.py lower the ops (registry.py: which op lowers
how), roles.py says what each graph output is."""
