"""Profile the request path in one process: decode, node resolution and the DB writes of `spans_ingest`.

    .venv/bin/python -m benchmarks.ingest.profile --spans 20000            # phase timings
    .venv/bin/python -m benchmarks.ingest.profile --spans 20000 --cprofile # plus the top cProfile entries

Uses its own database (default clear_bench_profile, recreated and dropped) and no HTTP server.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--spans", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432")
    p.add_argument("--db", default="clear_bench_profile")
    p.add_argument("--cprofile", action="store_true")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--redis", help="REDIS_URL: include the outbox's after-commit dispatch to Celery (flushed)")
    args = p.parse_args(argv)

    from benchmarks.ingest.run import _drop_db, _recreate_db
    from benchmarks.ingest.spans import batches

    _recreate_db(args.pg, args.db)
    os.environ.update(DJANGO_SETTINGS_MODULE="clear.settings.base", DATABASE_URL=f"{args.pg}/{args.db}",
                      SECRET_KEY="profile", LOG_LEVEL="WARNING")
    if args.redis:
        os.environ["REDIS_URL"] = args.redis
        from benchmarks.ingest.run import _flush_redis

        _flush_redis(args.redis)
    else:
        os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from clear.projects.services import project_create
    from traces.normalize import decode_export_request
    from traces.services import ingest

    try:
        call_command("migrate", verbosity=0)
        project = project_create(name="profile")
        bodies = [body for body, _ in batches(total=args.spans, batch_size=args.batch)]
        timings: dict[str, float] = {}
        cpu_timings: dict[str, float] = {}

        def timed(name, fn):
            def wrapper(*a, **kw):
                t, c = time.perf_counter(), time.process_time()
                try:
                    return fn(*a, **kw)
                finally:
                    timings[name] = timings.get(name, 0.0) + time.perf_counter() - t
                    cpu_timings[name] = cpu_timings.get(name, 0.0) + time.process_time() - c
            return wrapper

        import clear.outbox.services as outbox

        if args.redis:
            outbox.outbox_dispatch = timed("outbox dispatch (after commit)", outbox.outbox_dispatch)
        else:
            # Without a broker the on-commit dispatch would hang on retries: keep it out of the profile.
            outbox.outbox_dispatch = lambda **kw: 0

        ingest.traces_upsert = timed("trace rows", ingest.traces_upsert)
        ingest._stored_lookup = timed("stored spans lookup", ingest._stored_lookup)
        ingest._resolve_nodes = timed("node resolution", ingest._resolve_nodes)
        ingest._span_row = timed("span rows", ingest._span_row)
        ingest.traces_context_save = timed("root contexts", ingest.traces_context_save)
        for name in ("spans_insert",):
            if hasattr(ingest, name):
                setattr(ingest, name, timed("span insert", getattr(ingest, name)))
        ingest.Span.objects.bulk_create = timed("span insert", ingest.Span.objects.bulk_create)
        ingest.outbox_publish_keys = timed("outbox", ingest.outbox_publish_keys)

        profiler = cProfile.Profile() if args.cprofile else None
        decode_s = ingest_s = decode_cpu = 0.0
        cpu_start = time.process_time()
        if profiler:
            profiler.enable()
        for body in bodies:
            t, c = time.perf_counter(), time.process_time()
            batch = decode_export_request(body=body, content_type="application/x-protobuf")
            t2, c2 = time.perf_counter(), time.process_time()
            ingest.spans_ingest(project=project, spans=batch.spans)
            t3 = time.perf_counter()
            decode_s += t2 - t
            decode_cpu += c2 - c
            ingest_s += t3 - t2
        if profiler:
            profiler.disable()
        if args.redis:
            _flush_redis(args.redis)
        cpu = time.process_time() - cpu_start
        n = args.spans
        print(f"{n} spans: decode {decode_s:.2f} s ({n / decode_s:.0f}/s), spans_ingest {ingest_s:.2f} s "
              f"({n / ingest_s:.0f}/s), both {n / (decode_s + ingest_s):.0f}/s; "
              f"python CPU {1e6 * cpu / n:.0f} us/span (decode {1e6 * decode_cpu / n:.0f})")
        for name, seconds in sorted(timings.items(), key=lambda kv: -kv[1]):
            print(f"  {name:<30} {seconds:7.2f} s  {seconds / ingest_s:6.1%} of spans_ingest, "
                  f"CPU {1e6 * cpu_timings[name] / n:5.1f} us/span")
        if profiler:
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.top)
            pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)
    finally:
        connection.close()
        _drop_db(args.pg, args.db)


if __name__ == "__main__":
    main()
