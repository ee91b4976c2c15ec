"""Contrastive judge benchmark: `python -m benchmarks.contrastive` (see run.py)."""
