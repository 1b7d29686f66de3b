"""Device memory: how ttnn sizes its buffers (l1.py), what a configuration costs (cost.py), and the
configurations a block can take (config.py). Used by the choose-memory-config pass and `spc inspect`."""
