"""`clear.wsgi:application` under cProfile, for `run.py --app benchmarks.ingest.profiled_wsgi:application`.

Each gunicorn worker profiles the requests it serves and writes var/bench/profile-<pid>.pstats at exit; read them
with `python -m pstats` or `python -m benchmarks.ingest.profiled_wsgi var/bench/profile-*.pstats`.
"""

import atexit
import cProfile
import os
import pstats
import sys
import threading
from pathlib import Path

_OUT = Path(__file__).resolve().parents[2] / "var" / "bench"
_profiler = cProfile.Profile()
_lock = threading.Lock()  # cProfile profiles one thread: serialise requests (use --threads 1)


def application(environ, start_response):
    from clear.wsgi import application as _application

    with _lock:
        _profiler.enable()
        try:
            return _application(environ, start_response)
        finally:
            _profiler.disable()


@atexit.register
def _dump() -> None:
    _OUT.mkdir(parents=True, exist_ok=True)
    _profiler.dump_stats(_OUT / f"profile-{os.getpid()}.pstats")


if __name__ == "__main__":
    stats = pstats.Stats(*sys.argv[1:])
    stats.sort_stats("cumulative").print_stats(60)
    stats.sort_stats("tottime").print_stats(30)
