"""The support-desk example: reproducible traces, planted faults that touch known tasks, OTLP export."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from examples.support_desk import BUG_NAMES, TASKS, BugSwitches, run_suite, run_task
from examples.support_desk.suite import TaskResult

REPO_ROOT = Path(__file__).resolve().parents[2]
ALL_TASK_IDS = [task.task_id for task in TASKS]

# Must match examples/support_desk/BUGS.md.
TOUCHED_BY = {
    "mediator_race": {"two-orders-status", "track-two-packages", "two-how-to-questions", "orders-and-next-bill"},
    "retry_loop": {"compare-two-invoices", "two-charges-this-month", "invoices-and-next-charge"},
    "misroute": {"refund-damaged-item", "refund-status", "refund-cancelled-order", "refund-late-delivery"},
}
AGENT_NAMES = {
    "support_desk", "planner", "orders_worker", "shipping_worker", "billing_worker",
    "account_worker", "kb_worker", "mediator", "writer",
}
GIVEAWAY = re.compile(r"mediator_race|retry_loop|misrout|\bbugs?\b|\bbuggy\b|\brace\b|\bplanted\b|\binjected\b", re.I)


def run(
    bugs: str = "all", seed: int = 0, release: str = "r1", task_ids: Any = None
) -> tuple[list[TaskResult], list[ReadableSpan]]:
    exporter = InMemorySpanExporter()
    results = run_suite(release=release, bugs=bugs, seed=seed, exporter=exporter, task_ids=task_ids)
    return results, list(exporter.get_finished_spans())


def name_path(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> str:
    names = [span.name]
    while span.parent is not None:
        span = by_id[span.parent.span_id]
        names.append(span.name)
    return " / ".join(reversed(names))


def flatten(attributes: Any) -> tuple[str, ...]:
    return tuple(sorted(f"{key}={value}" for key, value in attributes.items()))


def signature(spans: list[ReadableSpan]) -> list[tuple]:
    """Everything about the spans except their ids, in a canonical order."""
    by_id = {span.context.span_id: span for span in spans}
    rows = []
    for span in spans:
        root = span
        while root.parent is not None:
            root = by_id[root.parent.span_id]
        resource = {k: v for k, v in span.resource.attributes.items() if k != "service.instance.id"}
        rows.append((
            root.attributes["clear.task.id"],
            name_path(span, by_id),
            span.start_time,
            span.end_time,
            span.kind.name,
            span.status.status_code.name,
            span.status.description,
            flatten(span.attributes),
            tuple((event.name, event.timestamp, flatten(event.attributes)) for event in span.events),
            tuple(sorted(resource.items())),
        ))
    return sorted(rows)


def failing(results: list[TaskResult]) -> set[str]:
    return {result.task_id for result in results if result.outcome != "success"}


def roots(spans: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {span.attributes["clear.task.id"]: span for span in spans if span.parent is None}


def spans_of_task(spans: list[ReadableSpan], task_id: str) -> list[ReadableSpan]:
    trace_id = roots(spans)[task_id].context.trace_id
    return [span for span in spans if span.context.trace_id == trace_id]


@pytest.mark.parametrize("bugs", ["all", "none"])
def test_same_seed_and_release_replay_identical_spans_and_grades(bugs: str) -> None:
    first_results, first_spans = run(bugs, seed=11)
    second_results, second_spans = run(bugs, seed=11)
    assert signature(first_spans) == signature(second_spans)
    strip = lambda results: [(r.task_id, r.score, r.outcome, r.answer, r.failed_checks) for r in results]  # noqa: E731
    assert strip(first_results) == strip(second_results)
    assert {span.context.trace_id for span in first_spans}.isdisjoint({span.context.trace_id for span in second_spans})


def test_another_seed_moves_the_timeline() -> None:
    _, spans_a = run("none", seed=1)
    _, spans_b = run("none", seed=2)
    assert [s.start_time for s in roots(spans_a).values()] != [s.start_time for s in roots(spans_b).values()]


@pytest.mark.parametrize("seed", [0, 5, 42])
def test_without_faults_every_task_passes(seed: int) -> None:
    results, spans = run("none", seed=seed)
    assert [result.task_id for result in results] == ALL_TASK_IDS
    assert failing(results) == set()
    assert all(result.score == 1.0 for result in results)
    assert {root.attributes["clear.outcome"] for root in roots(spans).values()} == {"success"}


@pytest.mark.parametrize("seed", [0, 3, 1234])
@pytest.mark.parametrize("bug", BUG_NAMES)
def test_each_fault_alone_lowers_exactly_its_tasks(bug: str, seed: int) -> None:
    clean = {r.task_id: r.score for r in run("none", seed=seed)[0]}
    faulty = {r.task_id: r.score for r in run(bug, seed=seed)[0]}
    lowered = {task_id for task_id in clean if faulty[task_id] < clean[task_id]}
    assert lowered == TOUCHED_BY[bug]
    assert all(faulty[task_id] == clean[task_id] for task_id in clean if task_id not in lowered)


def test_all_faults_fail_the_union_of_their_tasks() -> None:
    results, _ = run("all", seed=0)
    assert failing(results) == set().union(*TOUCHED_BY.values())
    assert len(ALL_TASK_IDS) >= 20


def test_every_agent_appears_as_gen_ai_agent_name() -> None:
    _, spans = run("none", seed=0)
    names = {span.attributes.get("gen_ai.agent.name") for span in spans}
    assert AGENT_NAMES <= names
    for span in spans:
        operation = span.attributes["gen_ai.operation.name"]
        assert span.name.startswith(f"{operation} ")
        assert span.attributes.get("gen_ai.agent.name")


def test_root_span_carries_task_seed_grade_and_release() -> None:
    results, spans = run("all", seed=9, release="2025.01.2")
    by_task = roots(spans)
    assert set(by_task) == set(ALL_TASK_IDS)
    for result in results:
        root = by_task[result.task_id]
        assert root.name == "invoke_agent support_desk"
        assert root.attributes["clear.seed"] == 9
        assert root.attributes["clear.timing"] == "synthetic"
        assert root.attributes["clear.outcome"] == result.outcome
        assert root.attributes["clear.score"] == result.score
        assert 0.0 <= result.score <= 1.0
        assert root.resource.attributes["service.name"] == "support-desk"
        assert root.resource.attributes["service.version"] == "2025.01.2"
        assert root.start_time == min(s.start_time for s in spans_of_task(spans, result.task_id))
        assert root.end_time == max(s.end_time for s in spans_of_task(spans, result.task_id))


def test_chat_and_tool_spans_follow_gen_ai_conventions() -> None:
    _, spans = run("all", seed=0)
    chats = [span for span in spans if span.attributes["gen_ai.operation.name"] == "chat"]
    tools = [span for span in spans if span.attributes["gen_ai.operation.name"] == "execute_tool"]
    assert chats and tools
    for span in chats:
        attributes = span.attributes
        assert span.name == f"chat {attributes['gen_ai.request.model']}"
        assert attributes["gen_ai.response.model"].startswith(attributes["gen_ai.request.model"])
        assert attributes["gen_ai.usage.input_tokens"] > 0 and attributes["gen_ai.usage.output_tokens"] > 0
        assert tuple(attributes["gen_ai.response.finish_reasons"]) in {("stop",), ("tool_calls",)}
        assert isinstance(json.loads(attributes["gen_ai.input.messages"]), list)
        assert json.loads(attributes["gen_ai.output.messages"])[0]["role"] == "assistant"
    for span in tools:
        attributes = span.attributes
        assert span.name == f"execute_tool {attributes['gen_ai.tool.name']}"
        assert isinstance(json.loads(attributes["gen_ai.tool.call.arguments"]), dict)
        result = json.loads(attributes["gen_ai.tool.call.result"])
        if span.status.status_code is StatusCode.ERROR:
            assert "error" in result
            assert [event.name for event in span.events] == ["exception"]


def test_nothing_in_the_traces_names_a_fault() -> None:
    _, spans = run("all", seed=0)
    for span in spans:
        texts = [span.name, span.status.description or ""]
        texts += [f"{key}={value}" for key, value in span.attributes.items()]
        texts += [f"{key}={value}" for event in span.events for key, value in event.attributes.items()]
        texts += [f"{key}={value}" for key, value in span.resource.attributes.items()]
        for text in texts:
            assert not GIVEAWAY.search(text), text


def test_retry_loop_shows_identical_failing_calls_and_backoff_fixes_it() -> None:
    _, faulty = run("retry_loop", seed=0, task_ids=["compare-two-invoices"])
    calls = Counter(
        (span.name, span.attributes["gen_ai.tool.call.arguments"])
        for span in faulty
        if span.name.startswith("execute_tool") and span.status.status_code is StatusCode.ERROR
    )
    (call, count), = calls.most_common(1)
    assert count >= 3 and call[0] == "execute_tool invoice_lookup"
    assert all(
        json.loads(s.attributes["gen_ai.tool.call.result"]) == {"error": "rate_limited", "retry_after": 2}
        for s in faulty if s.status.status_code is StatusCode.ERROR and s.name.startswith("execute_tool")
    )

    _, fixed = run("none", seed=0, task_ids=["compare-two-invoices"])
    lookups = [s for s in fixed if s.name == "execute_tool invoice_lookup"]
    refused = [s for s in lookups if s.status.status_code is StatusCode.ERROR]
    assert len(lookups) == 3 and len(refused) == 1
    retried = [
        s for s in lookups
        if s is not refused[0]
        and s.attributes["gen_ai.tool.call.arguments"] == refused[0].attributes["gen_ai.tool.call.arguments"]
    ]
    assert len(retried) == 1 and retried[0].start_time - refused[0].end_time >= 2_000_000_000


def test_misroute_sends_refunds_to_the_orders_worker() -> None:
    for bugs, expect_refund_tool in (("misroute", False), ("none", True)):
        _, spans = run(bugs, seed=0, task_ids=sorted(TOUCHED_BY["misroute"]))
        for task_id in TOUCHED_BY["misroute"]:
            tool_names = {s.attributes.get("gen_ai.tool.name") for s in spans_of_task(spans, task_id)}
            agents = {s.attributes["gen_ai.agent.name"] for s in spans_of_task(spans, task_id)}
            assert ("refund_lookup" in tool_names) is expect_refund_tool
            assert ("orders_worker" in agents) is not expect_refund_tool


def test_mediator_loses_one_of_two_results_that_complete_together() -> None:
    results, spans = run("mediator_race", seed=0, task_ids=["two-orders-status"])
    lookups = [s for s in spans if s.name == "execute_tool order_lookup"]
    assert len(lookups) == 2 and lookups[0].end_time == lookups[1].end_time
    answer = results[0].answer
    assert ("O-5010" in answer) != ("O-5011" in answer)


def test_run_task_replays_the_suite_task() -> None:
    suite_results, suite_spans = run("all", seed=4)
    exporter = InMemorySpanExporter()
    single = run_task("refund-status", seed=4, bugs="all", exporter=exporter, release="r1")
    from_suite = next(r for r in suite_results if r.task_id == "refund-status")
    assert (single.score, single.outcome, single.answer) == (from_suite.score, from_suite.outcome, from_suite.answer)
    suite_rows = [row for row in signature(suite_spans) if row[0] == "refund-status"]
    assert signature(list(exporter.get_finished_spans())) == suite_rows


def test_bug_switch_parsing() -> None:
    assert BugSwitches.parse("none").enabled == ()
    assert BugSwitches.parse("all").enabled == BUG_NAMES
    assert BugSwitches.parse(None).enabled == BUG_NAMES
    assert BugSwitches.parse("misroute, retry_loop").enabled == ("retry_loop", "misroute")
    with pytest.raises(ValueError):
        BugSwitches.parse("typo")


def test_whole_suite_runs_on_the_virtual_clock_without_waiting(monkeypatch) -> None:
    """Tool latencies are simulated (runtime.Sleep moves a virtual clock), so a suite takes no wall time to speak of:
    nothing in it may really sleep."""
    def no_real_sleep(seconds: float) -> None:
        raise AssertionError(f"the example agent slept {seconds}s of real time")

    monkeypatch.setattr(time, "sleep", no_real_sleep)
    run("all", seed=0)


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    # The collector is local: keep any proxy configured in the environment out of the way.
    no_proxy = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **no_proxy}
    return subprocess.run(
        [sys.executable, "-m", "examples.support_desk", *args],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )


def test_cli_list_and_run_task_write_json(tmp_path: Path) -> None:
    listing = cli("list")
    assert listing.returncode == 0
    assert all(task_id in listing.stdout for task_id in ALL_TASK_IDS)

    out = tmp_path / "result.json"
    completed = cli("run-task", "--task", "two-orders-status", "--seed", "5", "--out", str(out))
    assert completed.returncode == 0, completed.stderr
    document = json.loads(out.read_text())
    assert {"task_id", "seed", "score", "outcome", "answer"} <= set(document)
    expected = run_task("two-orders-status", seed=5)
    assert (document["task_id"], document["seed"], document["score"], document["outcome"], document["answer"]) == (
        "two-orders-status", 5, expected.score, expected.outcome, expected.answer)

    clean = cli("run-task", "--task", "two-orders-status", "--seed", "5", "--bugs", "none", "--out", str(out))
    assert clean.returncode == 0 and json.loads(out.read_text())["outcome"] == "success"


class _CollectorHandler(BaseHTTPRequestHandler):
    received: list[tuple[str, dict[str, str], bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {key.lower(): value for key, value in self.headers.items()}
        type(self).received.append((self.path, headers, body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep test output quiet
        pass


def test_cli_run_exports_every_span_over_otlp_http() -> None:
    handler = type("Handler", (_CollectorHandler,), {"received": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}/"
        completed = cli("run", "--endpoint", endpoint, "--key", "s3cret", "--release", "r9", "--seed", "2")
    finally:
        server.shutdown()
        server.server_close()
    assert completed.returncode == 0, completed.stderr
    assert "total:" in completed.stdout
    assert all(task_id in completed.stdout for task_id in ALL_TASK_IDS)

    _, local_spans = run("all", seed=2, release="r9")
    exported = []
    for path, headers, body in handler.received:
        assert path == "/v1/traces"
        assert headers["authorization"] == "Bearer s3cret"
        assert headers["content-type"] == "application/x-protobuf"
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            resource = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
            assert resource["service.name"] == "support-desk" and resource["service.version"] == "r9"
            for scope_spans in resource_spans.scope_spans:
                exported.extend(scope_spans.spans)
    assert len(exported) == len(local_spans)
    assert Counter(span.name for span in exported) == Counter(span.name for span in local_spans)
    root_tasks = {
        kv.value.string_value
        for span in exported if not span.parent_span_id
        for kv in span.attributes if kv.key == "clear.task.id"
    }
    assert root_tasks == set(ALL_TASK_IDS)
    assert sorted(span.start_time_unix_nano for span in exported) == sorted(span.start_time for span in local_spans)
