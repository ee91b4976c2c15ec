"""No span lost, none duplicated: gunicorn killed with SIGKILL mid-ingest while clients send every batch twice.

The server is the deployed one (gunicorn, several workers, on the test database and the test Redis); clients
retry on connection errors and 5xx (429/503 after Retry-After), as OTel exporters do. Half of the batches are
sent twice back to back (the two copies race each other on two connections), half a second time after all the
others (a retry of a batch long stored).
"""

import http.client
import os
import queue
import random
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.db.models import Count
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan

from tests.conftest import free_port, postgres_only
from tests.support.worker import ProcessGroup, subprocess_env_for_test_db
from traces.models import Span, Trace

BATCHES = 40
SPANS_PER_BATCH = 100
SPANS_PER_TRACE = 25
CLIENTS = 4
DEADLINE_SECONDS = 120  # a bound on liveness under a loaded CI machine, not a speed target
LOG_DIR = Path(settings.BASE_DIR) / "var" / "test-logs"


def _kv(key: str, value) -> KeyValue:
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def _batches(seed: int = 7) -> tuple[list[bytes], set[tuple[str, str]]]:
    """BATCHES protobuf bodies of SPANS_PER_BATCH spans (agent → LLM/tool children), and every (trace, span) id."""
    rng = random.Random(seed)
    start = 1_760_000_000 * 10**9
    bodies, sent = [], set()
    for _ in range(BATCHES):
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.append(_kv("service.name", "loss-test"))
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.name = "loss-test"
        for _ in range(SPANS_PER_BATCH // SPANS_PER_TRACE):
            trace_id = rng.getrandbits(128).to_bytes(16, "big")
            root_id = rng.getrandbits(64).to_bytes(8, "big")
            agent_id = rng.getrandbits(64).to_bytes(8, "big")
            for i in range(SPANS_PER_TRACE):
                if i == 0:
                    span_id, parent, name, attrs = root_id, b"", "handle_request", {"clear.task.id": "t-1"}
                elif i == 1:
                    span_id, parent, name = agent_id, root_id, "invoke_agent planner"
                    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}
                elif i % 2:
                    span_id, parent, name = rng.getrandbits(64).to_bytes(8, "big"), agent_id, "chat gpt-4o"
                    attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                             "gen_ai.usage.input_tokens": 100 + i, "gen_ai.usage.output_tokens": 10 + i,
                             "gen_ai.input.messages": '[{"role": "user", "content": "where is my order?"}]'}
                else:
                    span_id, parent, name = rng.getrandbits(64).to_bytes(8, "big"), agent_id, "execute_tool lookup"
                    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
                             "gen_ai.tool.call.arguments": '{"order": 42}'}
                span = OtlpSpan(trace_id=trace_id, span_id=span_id, parent_span_id=parent, name=name,
                                start_time_unix_nano=start + i * 10**6, end_time_unix_nano=start + (i + 1) * 10**6)
                span.attributes.extend(_kv(k, v) for k, v in attrs.items())
                scope_spans.spans.append(span)
                sent.add((trace_id.hex(), span_id.hex()))
        bodies.append(request.SerializeToString())
    return bodies, sent


class Gunicorn(ProcessGroup):
    def __init__(self, port: int):
        self.port = port
        self.process: subprocess.Popen | None = None
        self.starts = 0

    def _env(self) -> dict[str, str]:
        return subprocess_env_for_test_db(REDIS_URL=settings.CELERY_BROKER_URL, LOG_LEVEL="WARNING")

    @property
    def log_path(self) -> Path:
        return LOG_DIR / f"gunicorn-loss-{os.getpid()}-{self.starts}.log"

    def start(self, timeout: float = 30) -> None:
        self.starts += 1
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "clear.wsgi:application", "--bind", f"127.0.0.1:{self.port}",
             "--workers", "3", "--threads", "2", "--timeout", "60"],
            cwd=settings.BASE_DIR, env=self._env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited at start:\n{self.log_path.read_text()[-4000:]}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/v1/traces")
                conn.getresponse().read()
                conn.close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"gunicorn not ready after {timeout}s:\n{self.log_path.read_text()[-4000:]}")


def _send_until_stored(port: int, secret: str, body: bytes, deadline: float, stats: dict, lock) -> None:
    conn = None
    while time.monotonic() < deadline:
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("POST", "/v1/traces", body=body, headers={
                "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {secret}",
            })
            response = conn.getresponse()
            content = response.read()
        except (OSError, http.client.HTTPException):
            if conn is not None:
                conn.close()
            conn = None
            with lock:
                stats["connection_errors"] += 1
            time.sleep(0.1)
            continue
        if response.status == 200:
            conn.close()
            return
        if response.status in (429, 503) or response.status >= 500:
            with lock:
                stats[f"http_{response.status}"] = stats.get(f"http_{response.status}", 0) + 1
            retry_after = response.getheader("Retry-After")
            time.sleep(float(retry_after) if retry_after and response.status in (429, 503) else 0.2)
            continue
        raise AssertionError(f"HTTP {response.status}: {content[:500]!r}")
    raise AssertionError("a batch was not accepted before the deadline")


@pytest.mark.django_db(transaction=True)
def test_no_span_is_lost_or_duplicated_when_the_server_is_killed_mid_ingest(issued_key, project):
    bodies, sent = _batches()
    half = BATCHES // 2
    # The first half twice back to back (the copies race), the second half once, then again (late retries).
    sends = [i for i in range(half) for _ in (0, 1)] + list(range(half, BATCHES)) + list(range(half, BATCHES))
    work: queue.SimpleQueue = queue.SimpleQueue()
    for i in sends:
        work.put(i)
    done = threading.Semaphore(0)
    stats = {"connection_errors": 0}
    lock = threading.Lock()
    errors: list[BaseException] = []
    deadline = time.monotonic() + DEADLINE_SECONDS
    server = Gunicorn(free_port())

    def client() -> None:
        while True:
            try:
                i = work.get_nowait()
            except queue.Empty:
                return
            try:
                _send_until_stored(server.port, issued_key.secret, bodies[i], deadline, stats, lock)
            except BaseException as exc:  # noqa: BLE001 - reported by the test thread
                errors.append(exc)
                return
            done.release()

    server.start()
    try:
        threads = [threading.Thread(target=client, daemon=True) for _ in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for _ in range(len(sends) // 2):  # midway: half of the sends accepted, others in flight
            assert done.acquire(timeout=max(0.1, deadline - time.monotonic())), f"stalled: {errors} {stats}"
        server.kill()
        killed_at = time.monotonic()
        server.start()
        restarted_in = time.monotonic() - killed_at
        for thread in threads:
            thread.join(timeout=max(0.1, deadline - time.monotonic() + 5))
        assert not errors, errors
        assert not any(thread.is_alive() for thread in threads), f"clients still running: {stats}"
    finally:
        server.stop()

    assert stats["connection_errors"] > 0, "the kill interrupted no request; the test proved nothing"
    spans = Span.objects.filter(project=project)
    stored = set(spans.values_list("trace__trace_id", "span_id"))
    duplicates = list(spans.values("trace_id", "span_id").annotate(n=Count("id")).filter(n__gt=1)[:5])
    assert not duplicates, duplicates
    assert sent - stored == set(), f"{len(sent - stored)} spans lost (restart took {restarted_in:.1f} s, {stats})"
    assert stored - sent == set()
    assert spans.count() == len(sent) == BATCHES * SPANS_PER_BATCH
    assert Trace.objects.filter(project=project).count() == BATCHES * SPANS_PER_BATCH // SPANS_PER_TRACE


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_span_committed_by_a_concurrent_request_during_the_copy_is_skipped_not_duplicated(project, monkeypatch):
    """The write path filters out spans it sees stored, but a concurrent transaction can commit one of them
    between that check and the COPY: the COPY then waits on the unique index, fails, and the rows go through
    INSERT ... ON CONFLICT DO NOTHING instead. Same result as bulk_create(ignore_conflicts=True)."""
    from django.db import close_old_connections, transaction

    from traces.services.bulk import spans_insert

    from django.db.models.query import QuerySet

    bulk_creates: list[int] = []
    original_bulk_create = QuerySet.bulk_create

    def bulk_create(self, objs, *args, **kwargs):
        bulk_creates.append(len(objs))
        return original_bulk_create(self, objs, *args, **kwargs)

    monkeypatch.setattr(QuerySet, "bulk_create", bulk_create)
    trace = Trace.objects.create(project=project, trace_id="ab" * 16)

    def span(n: int, name: str) -> Span:
        return Span(project=project, trace=trace, trace_day=trace.first_received_day, span_id=f"{n:016x}", name=name,
                    start_time=datetime.now(timezone.utc),
                    input={"messages": [{"role": "user", "content": "hi"}]}, attributes={"n": n})

    first_copied, first_may_commit, second_done = threading.Event(), threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first() -> None:
        try:
            with transaction.atomic():
                spans_insert([span(2, "first")])
                first_copied.set()
                assert first_may_commit.wait(10)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    def second() -> None:
        try:
            assert first_copied.wait(10)
            with transaction.atomic():
                created = spans_insert([span(1, "second"), span(2, "second"), span(3, "second")])
                assert len(created) == 3
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            second_done.set()
            connection.close()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    assert first_copied.wait(10)
    assert not second_done.wait(0.5), "the second COPY should wait for the first transaction"
    first_may_commit.set()
    for thread in threads:
        thread.join(20)
    assert not errors, errors
    assert bulk_creates == [3], "the COPY conflict should have sent the rows through bulk_create"
    stored = dict(Span.objects.filter(trace=trace).values_list("span_id", "name"))
    assert stored == {f"{1:016x}": "second", f"{2:016x}": "first", f"{3:016x}": "second"}
    assert Span.objects.get(trace=trace, span_id=f"{1:016x}").input == {"messages": [{"role": "user", "content": "hi"}]}
