"""Latency of the web UI's main pages and the /api/v1 list endpoints on a big project, served as deployed.

    .venv/bin/python -m benchmarks.ui                                  # 1M spans, 50k traces, 200 insights
    .venv/bin/python -m benchmarks.ui --spans 40000 --traces 2000 --judged 500 --rounds 3     # smoke (< 1 min)
    .venv/bin/python -m benchmarks.ui --keep-db, then --reuse-db      # seed once, measure again after a change
    .venv/bin/python -m benchmarks.ui --reuse-db --queries             # the slowest SQL of each page, EXPLAINed

1. (Re)creates the database `--db` (default clear_bench_ui), migrates it, makes a user, a project and an API key
   through the services, and seeds it in bulk SQL (`seed.py`).
2. Starts gunicorn as deployed (`clear.wsgi:application --workers 4 --threads 4`, DEBUG off, persistent database
   connections), logs in through the login form (CSRF token, session cookie).
3. `--clients` threads (default 8), each on its own keep-alive connection, request every URL of the list in their
   own shuffled order, `--rounds` times, after a warm-up round. Every answer must be a 200.
4. Prints p50 / p95 / max per URL and overall; the database is dropped at the end unless --keep-db.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import statistics
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlencode

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.ingest.run import Server, _drop_db, _env, _free_port, _log, _manage, _recreate_db  # noqa: E402

EMAIL, PASSWORD, PROJECT = "bench@example.com", "bench-password-not-secret", "UI benchmark"
TARGET_P95_MS = 300


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spans", type=int, default=1_000_000, help="spans in all (default 1000000)")
    p.add_argument("--traces", type=int, default=50_000, help="traces (default 50000)")
    p.add_argument("--insights", type=int, default=200, help="insights, half at node level (default 200)")
    p.add_argument("--judged", type=int, default=10_000, help="traces judged by each of the two newest runs "
                                                               "(default 10000)")
    p.add_argument("--runs", type=int, default=30, help="diagnosis runs (default 30)")
    p.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    p.add_argument("--rounds", type=int, default=8, help="times each client requests each URL (default 8)")
    p.add_argument("--workers", type=int, default=4, help="gunicorn --workers (default 4, as deployed)")
    p.add_argument("--threads", type=int, default=4, help="gunicorn --threads (default 4, as deployed)")
    p.add_argument("--pg", default=os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432"),
                   help="Postgres server URL without database")
    p.add_argument("--db", default="clear_bench_ui", help="benchmark database (default clear_bench_ui)")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/2", help="REDIS_URL for the server")
    p.add_argument("--keep-db", action="store_true", help="do not drop the database at the end")
    p.add_argument("--reuse-db", action="store_true", help="measure the database a --keep-db run left (no seeding)")
    p.add_argument("--queries", action="store_true",
                   help="instead of the load test: render each page in-process and EXPLAIN ANALYZE its slowest SQL")
    p.add_argument("--only", help="comma-separated URL names to measure (default: all)")
    p.add_argument("--json", dest="json_out", help="also write the results as JSON to this file")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------------------------------------------
# set-up


def _setup_django(env: dict[str, str]) -> None:
    os.environ.update(env)
    import django

    django.setup()


def _project_and_key(args: argparse.Namespace):
    from clear.projects.models import ApiKey, Project
    from clear.projects.services import api_key_create, project_create, user_get_or_create

    user, _ = user_get_or_create(email=EMAIL, password=PASSWORD)
    project = Project.objects.filter(name=PROJECT).first()
    if project is None:
        project = project_create(name=PROJECT, owner=user)
    ApiKey.objects.filter(project=project, name="ui benchmark").delete()  # a fresh secret each run
    return project, api_key_create(project=project, name="ui benchmark", created_by=user).secret


def _urls(project, *, sample: int = 20) -> dict[str, list[str]]:
    """{name: [paths]}: a page that shows one object rotates over `sample` of them."""
    from diagnosis.models import DiagnosisRun, Insight, RunTrace

    base = f"/p/{project.slug}"
    run = DiagnosisRun.objects.filter(project=project, insights_status="done").order_by("-created_at").first()
    insights = list(Insight.objects.filter(project=project).order_by("?").values_list("pk", flat=True)[:sample])
    traces = list(RunTrace.objects.filter(run=run).order_by("?").values_list("trace__trace_id", flat=True)[:sample])
    return {
        "overview": [f"{base}/"],
        "insights list": [f"{base}/insights/"],
        "insights filtered": [f"{base}/insights/?" + urlencode({"level": "node", "severity": "high"})],
        "insight": [f"{base}/insights/{pk}/" for pk in insights],
        "nodes": [f"{base}/nodes/"],
        "workflow": [f"{base}/workflow/"],
        "traces list": [f"{base}/traces/"],
        "traces filtered": [f"{base}/traces/?" + urlencode({"outcome": "failure", "release": "r3"})],
        "trace": [f"{base}/traces/{t}/" for t in traces],
        "runs": [f"{base}/runs/"],
        "tickets": [f"{base}/tickets/"],
        "api traces": ["/api/v1/traces/"],
        "api insights": ["/api/v1/insights/"],
        "api tickets": ["/api/v1/tickets/?status=all"],
    }


# ---------------------------------------------------------------------------------------------------------------
# HTTP


def _login(port: int) -> str:
    """The session cookie of a login through the form, as a browser does it."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/login/")
    response = conn.getresponse()
    html = response.read().decode()
    csrf_cookie = re.search(r"csrftoken=([^;]+)", response.getheader("Set-Cookie") or "")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    if response.status != 200 or not csrf_cookie or not token:
        raise SystemExit(f"GET /login/ gave HTTP {response.status} without a CSRF cookie and token: "
                         f"{response.getheaders()} {html[:300]!r}")
    csrf_cookie, token = csrf_cookie.group(1), token.group(1)
    conn.request("POST", "/login/", body=urlencode({"username": EMAIL, "password": PASSWORD,
                                                    "csrfmiddlewaretoken": token}),
                 headers={"Content-Type": "application/x-www-form-urlencoded", "Cookie": f"csrftoken={csrf_cookie}"})
    response = conn.getresponse()
    response.read()
    match = re.search(r"sessionid=([^;]+)", response.getheader("Set-Cookie") or "")
    if response.status != 302 or not match:
        raise SystemExit(f"login failed: HTTP {response.status}")
    conn.close()
    return match.group(1)


def _load(*, port: int, session: str, key: str, jobs_per_client: list[list[tuple[str, str]]]):
    """Run each client's jobs [(name, path)] on its own connection; returns {name: [seconds]} and errors."""
    times: dict[str, list[float]] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def client(jobs: list[tuple[str, str]]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        for name, path in jobs:
            headers = ({"Authorization": f"Bearer {key}"} if path.startswith("/api/")
                       else {"Cookie": f"sessionid={session}"})
            start = time.perf_counter()
            try:
                conn.request("GET", path, headers=headers)
                response = conn.getresponse()
                body = response.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                with lock:
                    errors.append(f"{path}: {exc!r}")
                continue
            elapsed = time.perf_counter() - start
            with lock:
                if response.status != 200:
                    errors.append(f"{path}: HTTP {response.status} {body[:200]!r}")
                else:
                    times.setdefault(name, []).append(elapsed)
        conn.close()

    threads = [threading.Thread(target=client, args=(jobs,)) for jobs in jobs_per_client]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return times, errors


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def measure(args: argparse.Namespace, *, port: int, session: str, key: str, urls: dict[str, list[str]]) -> dict:
    rng = random.Random(7)
    # Warm-up: every URL on every gunicorn thread a few times (imports, template compilation, connections).
    warm = [[(n, p) for n, paths in urls.items() for p in paths[:3]] for _ in range(args.clients)]
    _, errors = _load(port=port, session=session, key=key, jobs_per_client=warm)
    if errors:
        raise SystemExit("warm-up failed:\n" + "\n".join(errors[:20]))
    jobs_per_client = []
    for c in range(args.clients):
        jobs = []
        for r in range(args.rounds):
            round_jobs = [(n, paths[(c * args.rounds + r) % len(paths)]) for n, paths in urls.items()]
            rng.shuffle(round_jobs)
            jobs += round_jobs
        jobs_per_client.append(jobs)
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    times, errors = _load(port=port, session=session, key=key, jobs_per_client=jobs_per_client)
    wall = time.perf_counter() - start
    if errors:
        raise SystemExit("requests failed:\n" + "\n".join(errors[:20]))
    every = [t for ts in times.values() for t in ts]
    rows = {name: {"n": len(ts), "p50_ms": 1000 * statistics.median(ts), "p95_ms": 1000 * _percentile(ts, 0.95),
                   "max_ms": 1000 * max(ts)} for name, ts in times.items()}
    return {"pages": rows, "requests": len(every), "wall_s": wall, "rps": len(every) / wall,
            "p50_ms": 1000 * statistics.median(every), "p95_ms": 1000 * _percentile(every, 0.95),
            "load_before": load_before}


def _drop_dashboard_cache(redis_url: str) -> None:
    import redis

    from frontend.dashboard_cache import KEY_PREFIX

    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(match=f"*{KEY_PREFIX}*", count=1000):  # Django prefixes its own ":1:"
        client.delete(key)
    client.close()


def measure_cold(args: argparse.Namespace, *, port: int, session: str, key: str, urls: dict[str, list[str]]) -> dict:
    """Each URL from one client with the dashboard cache emptied just before: what the first view after new
    data costs (the overview, workflow and nodes aggregates computed, not read)."""
    cold = {}
    for name, paths in urls.items():
        samples = []
        for _ in range(3):  # the median of three: one request alone is at the mercy of a GC pause or autovacuum
            _drop_dashboard_cache(args.redis)
            times, errors = _load(port=port, session=session, key=key, jobs_per_client=[[(name, paths[0])]])
            if errors:
                raise SystemExit("cold requests failed:\n" + "\n".join(errors[:20]))
            samples.append(1000 * times[name][0])
        cold[name] = statistics.median(samples)
    return cold


def _report(result: dict, args: argparse.Namespace, counts: dict) -> None:
    print(f"\nUI benchmark: {counts['spans']:,} spans, {counts['traces']:,} traces, {counts['insights']:,} insights; "
          f"{args.clients} clients x {args.rounds} rounds; gunicorn {args.workers}x{args.threads}; "
          f"load before {result['load_before']:.2f}")
    print(f"{'URL':<20} {'n':>5} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'cold ms':>8}")
    cold = result.get("cold_ms", {})
    for name, row in result["pages"].items():
        flag = "" if row["p95_ms"] < TARGET_P95_MS else "  > target"
        first = f"{cold[name]:>8.0f}" if name in cold else f"{'':>8}"
        print(f"{name:<20} {row['n']:>5} {row['p50_ms']:>8.0f} {row['p95_ms']:>8.0f} {row['max_ms']:>8.0f} "
              f"{first}{flag}")
    print(f"{'all':<20} {result['requests']:>5} {result['p50_ms']:>8.0f} {result['p95_ms']:>8.0f}   "
          f"({result['rps']:.1f} requests/s over {result['wall_s']:.1f} s)")
    worst = max(row["p95_ms"] for row in result["pages"].values())
    print(f"worst p95 {worst:.0f} ms: target p95 < {TARGET_P95_MS} ms "
          f"{'met' if worst < TARGET_P95_MS else 'NOT met'} (ratio {worst / TARGET_P95_MS:.2f})")
    if cold:
        print("cold ms: one client, the dashboard cache emptied before each request (a first view after new data), "
              "median of 3")


# ---------------------------------------------------------------------------------------------------------------
# --queries: the SQL behind each page


def explain_pages(project, urls: dict[str, list[str]], *, key: str, top: int = 3) -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(get_user_model().objects.get(email=EMAIL))
    api = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Bearer {key}")
    for name, paths in urls.items():
        browser = api if paths[0].startswith("/api/") else client
        browser.get(paths[0])
        with CaptureQueriesContext(connection) as captured:
            start = time.perf_counter()
            response = browser.get(paths[0])
            elapsed = time.perf_counter() - start
        queries = sorted(captured.captured_queries, key=lambda q: -float(q["time"]))
        total = sum(float(q["time"]) for q in queries)
        print(f"\n== {name} {paths[0]}: HTTP {response.status_code}, {elapsed * 1000:.0f} ms, "
              f"{len(queries)} queries, {total * 1000:.0f} ms in SQL")
        for q in queries[:top]:
            print(f"-- {float(q['time']) * 1000:.0f} ms: {q['sql'][:400]}")
            if float(q["time"]) > 0.02 and q["sql"].lstrip().upper().startswith("SELECT"):
                with connection.cursor() as cursor:
                    cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + q["sql"])
                    print("\n".join("   " + row[0] for row in cursor.fetchall()[:25]))


# ---------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict | None:
    args = _args(argv)
    if not args.reuse_db:
        _recreate_db(args.pg, args.db)
    env = _env(args)
    env.setdefault("DATABASE_CONN_MAX_AGE", "600")
    env["STATIC_ROOT"] = str(REPO / "var" / "bench" / "ui-static")  # as deployed: hashed, compressed files
    _manage(env, "migrate", "--no-input")
    _manage(env, "collectstatic", "--no-input")
    _setup_django(env)
    from traces.models import Span, Trace

    from benchmarks.ui.seed import seed

    project, key = _project_and_key(args)
    started = time.perf_counter()
    if not args.reuse_db:
        seed(project=project, traces=args.traces, spans=args.spans, insights=args.insights, judged=args.judged,
             runs=args.runs, log=_log)
        _log(f"seeded in {time.perf_counter() - started:.1f} s")
    from diagnosis.models import Insight

    counts = {"spans": Span.objects.filter(project=project).count(),
              "traces": Trace.objects.filter(project=project).count(),
              "insights": Insight.objects.filter(project=project).count()}
    urls = _urls(project)
    if args.only:
        wanted = {n.strip() for n in args.only.split(",")}
        urls = {n: p for n, p in urls.items() if n in wanted}
    server = None
    try:
        if args.queries:
            explain_pages(project, urls, key=key)
            return None
        server = Server(env=env, port=_free_port(), workers=args.workers, threads=args.threads,
                        log_path=REPO / "var" / "bench" / "ui-gunicorn.log")
        server.start()
        session = _login(server.port)
        _drop_dashboard_cache(args.redis)  # a run before on the same database would leave it warm
        result = measure(args, port=server.port, session=session, key=key, urls=urls)
        result["cold_ms"] = measure_cold(args, port=server.port, session=session, key=key, urls=urls)
        result["counts"] = counts
        _report(result, args, counts)
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(result, indent=2))
        return result
    finally:
        if server:
            server.stop()
        from django.db import connections

        connections.close_all()
        if not args.keep_db:
            _drop_db(args.pg, args.db)


if __name__ == "__main__":
    main()
