"""Tuning: searches that choose compile options by measuring (precision_search.py)."""
