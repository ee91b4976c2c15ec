"""Insights (DESIGN.md §6, issue #6): the judges' failing feedback → atomic statements → embeddings (cached in the
database) → clusters per node and system-wide (diagnosis/clustering) → insights that keep their identity across runs.

The Django side of the clustering library: what is read from and written to the database, and how identity, review
decisions (confirm, reject, merge, split, status, feedback marked wrong) survive later runs. Entry points are the
services in diagnosis/services/insights*.py and the selectors in diagnosis/selectors.py. Method: METHOD.md here.
"""
