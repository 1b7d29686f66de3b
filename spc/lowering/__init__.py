"""Lowering: partitioned IR -> ttnn program (its types: plan/program.py; the .ttplan file: plan/io.py).

lower.py walks the stages, emitter.py appends the ttnn calls and tracks each device tensor's layout,
format and home; fused.py, readback.py and the lower_*.py families (elementwise, reduce, norm,
movement, matmul; operands.py their shared helpers) lower the ops (registry.py: which op lowers
how), roles.py says what each graph output is."""
