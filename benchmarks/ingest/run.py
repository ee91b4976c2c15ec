"""End-to-end OTLP ingestion benchmark against the server as deployed, with a binary-COPY baseline.

    .venv/bin/python -m benchmarks.ingest                      # 200k spans, 4 clients, batches of 500
    .venv/bin/python -m benchmarks.ingest --spans 10000        # smoke run
    .venv/bin/python benchmarks/ingest/run.py --help

1. (Re)creates the database `--db` (default clear_bench) on the Postgres of `--pg`, migrates it with
   `manage.py migrate`, creates a project and key with `manage.py create_project --json`.
2. Starts gunicorn (`clear.wsgi:application`, `--workers`/`--threads`) in its own process group with
   DATABASE_URL, REDIS_URL (a dedicated Redis db, flushed before and after), SECRET_KEY. No Celery worker runs
   unless `--celery-worker` is given: the outbox still dispatches finalisation tasks to Redis after each commit.
3. Prebuilds every OTLP protobuf body in memory, warms every gunicorn worker up, then `--clients` threads POST
   the batches over keep-alive connections (retrying 429/503 after Retry-After). The clock stops when
   `SELECT count(*) FROM traces_span` shows the last span.
4. Baseline: the same rows, read back from traces_span into memory, binary-COPied (psycopg 3, `set_types`) into
   an empty `bench_copy (LIKE traces_span INCLUDING ALL)` (same columns, indexes and unique constraint, no FKs).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
from psycopg import sql

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.ingest.spans import batches  # noqa: E402


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spans", type=int, default=200_000, help="spans in all (default 200000)")
    p.add_argument("--batch", type=int, default=500, help="spans per request (default 500)")
    p.add_argument("--clients", type=int, default=4, help="concurrent client threads (default 4)")
    p.add_argument("--workers", type=int, default=4, help="gunicorn --workers (default 4)")
    p.add_argument("--threads", type=int, default=2, help="gunicorn --threads (default 2)")
    p.add_argument("--pg", default=os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432"),
                   help="Postgres server URL without database (default postgres://postgres@127.0.0.1:5432)")
    p.add_argument("--db", default="clear_bench", help="benchmark database, dropped and recreated (default clear_bench)")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/12", help="REDIS_URL for the server (flushed)")
    p.add_argument("--app", default="clear.wsgi:application",
                   help="WSGI app for gunicorn (benchmarks.ingest.profiled_wsgi:application profiles it)")
    p.add_argument("--port", type=int, default=0, help="gunicorn port (default: a free one)")
    p.add_argument("--celery-worker", action="store_true", help="also run a Celery worker (finalisation) during the run")
    p.add_argument("--keep-db", action="store_true", help="do not drop the database at the end")
    p.add_argument("--skip-baseline", action="store_true", help="skip the COPY baseline")
    p.add_argument("--copy-runs", type=int, default=3, help="baseline COPY runs; the fastest counts (default 3)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--shared-stream", action="store_true",
                   help="all clients take batches from one stream, so batches sharing a trace are in flight together "
                        "(default: each client is one SDK exporter sending its own traces in order)")
    p.add_argument("--json", dest="json_out", help="also write the results as JSON to this file")
    return p.parse_args(argv)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------------
# database and server


def _recreate_db(pg: str, db: str) -> None:
    with psycopg.connect(f"{pg}/postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))


def _drop_db(pg: str, db: str) -> None:
    with psycopg.connect(f"{pg}/postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))


def _flush_redis(url: str) -> None:
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).flushdb()
    except redis.ConnectionError as exc:  # e.g. a dead broker on purpose, to measure without the dispatch
        _log(f"redis {url} unreachable ({exc}); the outbox keeps its rows pending")


def _env(args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="clear.settings.base",
        DATABASE_URL=f"{args.pg}/{args.db}",
        REDIS_URL=args.redis,
        SECRET_KEY=env.get("SECRET_KEY") or "bench-" + secrets.token_hex(24),
        DEBUG="0",
        LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
    )
    return env


def _manage(env: dict[str, str], *argv: str) -> str:
    done = subprocess.run([sys.executable, "manage.py", *argv], cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"manage.py {' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


class Server:
    def __init__(self, *, env: dict[str, str], port: int, workers: int, threads: int, log_path: Path,
                 app: str = "clear.wsgi:application"):
        self.env, self.port, self.workers, self.threads, self.log_path = env, port, workers, threads, log_path
        self.app = app
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", self.app, "--bind", f"127.0.0.1:{self.port}",
             "--workers", str(self.workers), "--threads", str(self.threads), "--timeout", "120",
             "--keep-alive", "30"],
            cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"gunicorn exited at start:\n{self.log_path.read_text()[-4000:]}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/v1/traces")
                conn.getresponse().read()
                conn.close()
                return
            except OSError:
                time.sleep(0.2)
        raise SystemExit(f"gunicorn not ready after {timeout}s:\n{self.log_path.read_text()[-4000:]}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


# ---------------------------------------------------------------------------------------------------------------
# clients


def _post(conn: http.client.HTTPConnection, body: bytes, key: str) -> tuple[int, bytes, str | None]:
    conn.request("POST", "/v1/traces", body=body, headers={
        "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {key}",
    })
    response = conn.getresponse()
    return response.status, response.read(), response.getheader("Retry-After")


def _send_all(*, port: int, key: str, streams: list[list[bytes]]) -> tuple[list[float], int]:
    """POST every body once, one thread per stream (a stream's batches in order, like one SDK's exporter);
    returns (per-batch latencies in s, retries)."""
    latencies: list[float] = []
    retries = [0]
    errors: list[str] = []
    lock = threading.Lock()

    def client(bodies: list[bytes] | queue.SimpleQueue) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        items = iter(bodies) if isinstance(bodies, list) else iter(lambda: _next_or_none(bodies), None)
        for i, body in enumerate(items):
            for attempt in range(50):
                start = time.perf_counter()
                try:
                    status, content, retry_after = _post(conn, body, key)
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                    with lock:
                        retries[0] += 1
                    time.sleep(0.2)
                    continue
                elapsed = time.perf_counter() - start
                if status == 200:
                    with lock:
                        latencies.append(elapsed)
                    break
                if status in (429, 503) or status >= 500:
                    with lock:
                        retries[0] += 1
                    time.sleep(float(retry_after or 1))
                    continue
                with lock:
                    errors.append(f"batch {i}: HTTP {status}: {content[:300]!r}")
                break
            else:
                with lock:
                    errors.append(f"batch {i}: gave up after 50 attempts")
        conn.close()

    threads = [threading.Thread(target=client, args=(stream,)) for stream in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit("requests failed:\n" + "\n".join(errors[:20]))
    return latencies, retries[0]


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _proc_stats() -> list[tuple[int, str, int, float]]:
    """(pid, comm, ppid, cpu seconds) of every process."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1:raw.rindex(")")]
        rest = raw[raw.rindex(")") + 2:].split()
        out.append((int(entry), comm, int(rest[1]), (int(rest[11]) + int(rest[12])) / _CLK_TCK))
    return out


def _pg_pids(conn: psycopg.Connection) -> set[int]:
    """Backends of the benchmark database and Postgres' background processes (WAL writer, checkpointer, ...)."""
    pids = {pid for (pid,) in conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() OR backend_type <> 'client backend'"
    ).fetchall()}
    conn.commit()
    return pids


def _cpu(server_pid: int | None, pg_pids: set[int]) -> dict[str, float]:
    """CPU seconds used so far by the gunicorn processes, by the given postgres processes, and by this process."""
    stats = _proc_stats()
    workers = sum(cpu for pid, _, ppid, cpu in stats if server_pid is not None and server_pid in (pid, ppid))
    postgres = sum(cpu for pid, _, _, cpu in stats if pid in pg_pids)
    client = sum(os.times()[:2])
    return {"server": workers, "postgres": postgres, "client": client}


def _next_or_none(q: queue.SimpleQueue):
    try:
        return q.get_nowait()
    except queue.Empty:
        return None


def _shared(bodies: list[bytes], clients: int) -> list[queue.SimpleQueue]:
    """All clients take the next batch of one stream: consecutive batches (which share the traces that straddle
    them) are in flight at the same time."""
    q: queue.SimpleQueue = queue.SimpleQueue()
    for body in bodies:
        q.put(body)
    return [q] * clients


def _span_count(conn: psycopg.Connection, table: str = "traces_span") -> int:
    return conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()[0]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


# ---------------------------------------------------------------------------------------------------------------
# baseline


def _copy_baseline(conn: psycopg.Connection, runs: int) -> tuple[int, list[float], list[float]]:
    """Binary COPY of traces_span's rows (prebuilt in memory) into an empty table of the same shape, `runs`
    times (the table recreated each time); returns (rows, seconds of each run)."""
    columns = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, NULL) FROM pg_attribute a "
        "WHERE a.attrelid = 'traces_span'::regclass AND a.attnum > 0 AND NOT a.attisdropped "
        "AND a.attname <> 'id' ORDER BY a.attnum"
    ).fetchall()
    names = [c for c, _ in columns]
    types = [t for _, t in columns]
    rows = conn.execute(
        sql.SQL("SELECT {} FROM traces_span ORDER BY id").format(sql.SQL(", ").join(map(sql.Identifier, names)))
    ).fetchall()
    conn.commit()
    statement = sql.SQL("COPY bench_copy ({}) FROM STDIN (FORMAT BINARY)").format(
        sql.SQL(", ").join(map(sql.Identifier, names))
    )
    timings, cpus = [], []
    pg_pids = _pg_pids(conn)
    for _ in range(runs):
        conn.execute("DROP TABLE IF EXISTS bench_copy")
        conn.execute("CREATE TABLE bench_copy (LIKE traces_span INCLUDING ALL)")
        conn.commit()
        conn.execute("CHECKPOINT")  # start each run with no dirty buffers of the previous one
        conn.commit()
        cpu_before = _cpu(None, pg_pids)
        start = time.perf_counter()
        with conn.cursor() as cur:
            with cur.copy(statement) as copy:
                copy.set_types(types)
                for row in rows:
                    copy.write_row(row)
        conn.commit()
        timings.append(time.perf_counter() - start)
        cpus.append(sum(_cpu(None, pg_pids).values()) - sum(cpu_before.values()))
        copied = _span_count(conn, "bench_copy")
        conn.commit()
    conn.execute("DROP TABLE IF EXISTS bench_copy")
    conn.commit()
    return copied, timings, cpus


# ---------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict:
    args = _args(argv)
    port = args.port or _free_port()
    env = _env(args)
    log_dir = REPO / "var" / "bench"
    _log(f"database {args.db}: recreate and migrate")
    _recreate_db(args.pg, args.db)
    _flush_redis(args.redis)
    server = Server(env=env, port=port, workers=args.workers, threads=args.threads, log_path=log_dir / "gunicorn.log",
                    app=args.app)
    worker: subprocess.Popen | None = None
    try:
        _manage(env, "migrate", "--noinput", "-v", "0")
        key = json.loads(_manage(env, "create_project", "bench", "--json").strip().splitlines()[-1])["secret_key"]

        _log(f"building {args.spans} spans in batches of {args.batch}")
        if args.shared_stream:
            built = [list(batches(total=args.spans, batch_size=args.batch, seed=args.seed))]
        else:
            share = -(-args.spans // args.clients)
            built = [list(batches(total=min(share, args.spans - c * share), batch_size=args.batch,
                                  seed=args.seed * 1000 + c)) for c in range(args.clients)]
        expected = len({k for stream in built for _, keys in stream for k in keys})
        streams = [[body for body, _ in stream] for stream in built]
        body_count = sum(map(len, streams))
        body_mb = sum(len(body) for stream in streams for body in stream) / 1e6
        warmup = [[body] for body, _ in batches(total=20 * args.workers * args.threads, batch_size=20,
                                                seed=args.seed + 7)]
        del built

        _log(f"gunicorn --workers {args.workers} --threads {args.threads} on port {port}")
        server.start()
        if args.celery_worker:
            worker = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "clear", "worker", "--loglevel", "WARNING", "--concurrency",
                 "1", "--without-mingle", "--without-gossip"],
                cwd=REPO, env=env, stdout=(log_dir / "worker.log").open("w"), stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        # Every worker imports the app lazily on its first requests; keep that out of the measurement.
        _send_all(port=port, key=key, streams=warmup)
        with psycopg.connect(f"{args.pg}/{args.db}") as conn:
            base = _span_count(conn)
            conn.commit()
            _log(f"sending {body_count} batches ({body_mb:.1f} MB) from {args.clients} clients")
            load_before = os.getloadavg()[0]
            pg_pids = _pg_pids(conn)
            cpu_before = _cpu(server.process.pid, pg_pids)
            start = time.perf_counter()
            latencies, retries = _send_all(
                port=port, key=key, streams=_shared(streams[0], args.clients) if args.shared_stream else streams
            )
            sent_at = time.perf_counter()
            while True:
                stored = _span_count(conn) - base
                conn.commit()
                if stored >= expected:
                    break
                if time.perf_counter() - sent_at > 120:
                    raise SystemExit(f"only {stored} of {expected} spans stored 120 s after the last response")
                time.sleep(0.01)
            elapsed = time.perf_counter() - start
            # Backends opened during the run (a gunicorn thread's first connection, autovacuum) count in full.
            pg_pids |= _pg_pids(conn)
            cpu = {k: v - cpu_before[k] for k, v in _cpu(server.process.pid, pg_pids).items()}
        server.stop()
        if worker is not None:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=30)
            worker = None

        result = {
            "spans": expected,
            "batch": args.batch,
            "clients": args.clients,
            "gunicorn": f"--workers {args.workers} --threads {args.threads}",
            "celery_worker": args.celery_worker,
            "shared_stream": args.shared_stream,
            "seconds": round(elapsed, 3),
            "spans_per_s": round(expected / elapsed),
            "batch_p50_ms": round(_percentile(latencies, 0.50) * 1000, 1),
            "batch_p99_ms": round(_percentile(latencies, 0.99) * 1000, 1),
            "retries": retries,
            "cpu_seconds": {k: round(v, 2) for k, v in cpu.items()},
            # Other work on the machine skews everything: the 1-minute load average before the run, and the CPU
            # seconds available to the run that the server, postgres and the clients did not use.
            "load_before": round(load_before, 2),
            "cpu_other_or_idle_s": round((os.cpu_count() or 1) * elapsed - sum(cpu.values()), 2),
        }
        if not args.skip_baseline:
            _log("baseline: binary COPY of the same rows")
            with psycopg.connect(f"{args.pg}/{args.db}") as conn:
                # Only the measured spans, not the warm-up ones.
                conn.execute("DELETE FROM traces_span WHERE id <= (SELECT max(id) FROM traces_span) - %s",
                             [expected])
                conn.commit()
                copied, copy_timings, copy_cpus = _copy_baseline(conn, args.copy_runs)
            best = copy_timings.index(min(copy_timings))
            copy_elapsed = copy_timings[best]  # the best run: the conservative baseline
            e2e_cpu = sum(result["cpu_seconds"].values())
            result.update(
                copy_rows=copied,
                copy_seconds=round(copy_elapsed, 3),
                copy_runs_seconds=[round(t, 3) for t in copy_timings],
                copy_rows_per_s=round(copied / copy_elapsed),
                ratio=round((expected / elapsed) / (copied / copy_elapsed), 3),
                # Robust to other load on the machine: CPU time per span (server + postgres + clients) against
                # CPU time per row of the COPY (this process + postgres).
                cpu_us_per_span=round(1e6 * e2e_cpu / expected, 1),
                copy_cpu_us_per_row=round(1e6 * copy_cpus[best] / copied, 1),
            )
    finally:
        server.stop()
        if worker is not None and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
        _flush_redis(args.redis)
        if not args.keep_db:
            _drop_db(args.pg, args.db)

    print(f"spans             {result['spans']} in batches of {result['batch']} from {result['clients']} clients, "
          f"gunicorn {result['gunicorn']}, celery worker: {'yes' if result['celery_worker'] else 'no'}")
    print(f"end-to-end        {result['spans_per_s']:>8} spans/s  ({result['seconds']} s, {retries} retries)")
    print("cpu seconds       " + ", ".join(f"{k} {v}" for k, v in result["cpu_seconds"].items())
          + f"  (per 1000 spans: server {1000 * cpu['server'] / result['spans']:.2f} s, "
          f"postgres {1000 * cpu['postgres'] / result['spans']:.2f} s); load before {result['load_before']}, "
          f"{result['cpu_other_or_idle_s']} CPU s idle or used by other processes")
    print(f"batch latency     p50 {result['batch_p50_ms']} ms   p99 {result['batch_p99_ms']} ms")
    if "copy_rows_per_s" in result:
        print(f"baseline COPY     {result['copy_rows_per_s']:>8} rows/s   (best of {result['copy_runs_seconds']} s)")
        print(f"ratio             {result['ratio']:.1%} of the COPY rate")
        print(f"CPU per span      end-to-end {result['cpu_us_per_span']} us (all processes), "
              f"COPY {result['copy_cpu_us_per_row']} us")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
