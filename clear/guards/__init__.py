"""The guards' shared state without Redis: the throttles' counters and the dashboard cache, in one table that every
web process sees (clear/guards/cache.py)."""
