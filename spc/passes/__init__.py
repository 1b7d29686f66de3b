"""Compiler passes: one pass per module; pipeline.py lists them in order."""
