"""Failure attribution under nested cross-validation: `python -m benchmarks.attribution` (see run.py)."""
from benchmarks.attribution.run import main

main()
