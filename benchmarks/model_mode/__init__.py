"""Model-mode benchmark against a real model server: see README.md and run.py."""
