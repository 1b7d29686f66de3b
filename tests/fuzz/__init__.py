"""The fuzz suite: hostile plans, ONNX models, inputs and output paths, generated from (category,
seed), and the outcome of running spc on each.

* ``harness``: the fixtures (a small export and its plans), what a case is, how its outcome is
  classified (ok, one-line error, internal error, crash, hang, data loss), and a worker process
  that runs cases in isolation (a crash or a hang is counted, not fatal);
* ``plans``, ``models``, ``inputs``, ``paths``: the case generators, one module per area, and
  ``mutate``: the byte and JSON-tree mutations they share;
* ``worker``: ``python -m tests.fuzz.worker FIXTURES`` runs cases named on its stdin.

tests/test_fuzz.py runs a minute of it under hypothesis; scripts/fuzz.py (``make fuzz``) the long
run whose figures are in docs/fuzz.md. Any case is reproduced by
``python scripts/fuzz.py --category CATEGORY --seed SEED --show``.
"""
