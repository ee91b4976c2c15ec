"""Insights on real agents' traces: `python -m benchmarks.insights_real --dataset tau-airline` (see run.py)."""
from benchmarks.insights_real.run import main

main()
