"""Insights on real agents' traces (issue 28): the acceptance scorer (see README.md)."""
