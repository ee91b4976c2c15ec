"""Clustering benchmark (see README.md)."""
