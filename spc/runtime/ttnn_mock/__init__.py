"""Real ttnn 0.81.1 host code against a mock Blackhole p150 (no hardware): harness.py prepares it."""
