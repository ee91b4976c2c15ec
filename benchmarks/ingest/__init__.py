"""OTLP ingestion benchmark: see README.md and run.py."""
