"""Device memory: how ttnn sizes its buffers (l1.py), one core's L1 as calls allocate and free
(ledger.py, residency.py), what a configuration costs (cost.py), and the planner that chooses
each conv and pool block's configuration on the lowered program (planner.py). `spc compile`
runs the planner; `spc inspect` and the fit check read the same walk."""
