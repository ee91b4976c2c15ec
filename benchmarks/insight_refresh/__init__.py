"""Continuous insight refresh benchmark (see README.md)."""
