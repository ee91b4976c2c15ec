"""The support desk's labels generator: where each planted fault acted, beside the traces and never in them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from benchmarks.insights_real.example_agent import example_agent_dataset
from examples.support_desk import run_suite
from examples.support_desk.labels import LABELS_FILE, export_run, read_labels
from examples.support_desk.labels.__main__ import main as labels_main
from examples.support_desk.target_repo import target_repo_files

DECIDER = {"mediator_race": "mediator", "misroute": "planner", "retry_loop": "billing_worker"}
# Must match examples/support_desk/BUGS.md (and TOUCHED_BY in test_support_desk.py).
TOUCHED_BY = {
    "mediator_race": {"two-orders-status", "track-two-packages", "two-how-to-questions", "orders-and-next-bill"},
    "retry_loop": {"compare-two-invoices", "two-charges-this-month", "invoices-and-next-charge"},
    "misroute": {"refund-damaged-item", "refund-status", "refund-cancelled-order", "refund-late-delivery"},
}
LABEL_TEXT = re.compile(r"mediator_race|retry_loop|misroute|mistake|planted", re.IGNORECASE)


def _value(wrapped: dict[str, Any]) -> Any:
    (kind, value), = wrapped.items()
    if kind == "arrayValue":
        return [_value(item) for item in value.get("values", [])]
    # OTLP/JSON writes 64-bit integers as strings.
    return int(value) if kind == "intValue" else value


def _spans(path: Path) -> dict[str, dict[str, Any]]:
    """span id -> {name, parent, attributes} of one OTLP/JSON file."""
    document = json.loads(path.read_text())
    spans = {}
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                spans[span["spanId"]] = {
                    "trace_id": span["traceId"],
                    "name": span["name"],
                    "parent": span.get("parentSpanId", ""),
                    "attributes": {a["key"]: _value(a["value"]) for a in span.get("attributes", [])},
                }
    return spans


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, str], tuple[Path, list[dict[str, Any]]]]:
    runs = {}
    for seed in (0, 3):
        for spec in ("all", "none", "mediator_race", "retry_loop", "misroute"):
            folder = tmp_path_factory.mktemp(f"labels-{seed}-{spec}")
            paths, rows = export_run(out=folder, seed=seed, bugs=spec, release="r1")
            assert [path.name for path in paths] == [row["file"] for row in rows]
            runs[(seed, spec)] = folder, rows
    return runs


def test_each_fault_is_labelled_at_an_llm_step_of_its_deciding_agent(exported) -> None:
    for (seed, spec), (folder, rows) in exported.items():
        for row in rows:
            spans = _spans(folder / row["file"])
            assert {span["trace_id"] for span in spans.values()} == {row["trace_id"]}
            for mistake in row["mistakes"]:
                assert mistake["agent"] == DECIDER[mistake["bug"]], (seed, spec, row["task_id"])
                step = spans[mistake["span_id"]]
                assert step["attributes"]["gen_ai.operation.name"] == "chat"
                assert step["attributes"]["gen_ai.agent.name"] == mistake["agent"]
                parent = spans[step["parent"]]
                assert parent["name"] == f"invoke_agent {mistake['agent']}"
                assert step["parent"] == mistake["agent_span_id"]
                for span_id in mistake["tool_span_ids"] + mistake["lost_tool_span_ids"]:
                    assert spans[span_id]["attributes"]["gen_ai.operation.name"] == "execute_tool"
                assert 0 <= mistake["step_index"] < row["n_steps"]
            if row["mistakes"]:
                first = row["mistakes"][0]
                assert (row["mistake_agent"], row["mistake_span_id"]) == (first["agent"], first["span_id"])


def test_caused_and_lost_tool_calls(exported) -> None:
    _, rows = exported[(0, "all")]
    by_bug = {m["bug"]: (row, m) for row in rows for m in row["mistakes"]}
    folder = exported[(0, "all")][0]
    row, retry = by_bug["retry_loop"]
    # Attempts 2..5 of the rate-limited invoice lookup went out without waiting.
    retried = [_spans(folder / row["file"])[span_id] for span_id in retry["tool_span_ids"]]
    assert len(retried) == 4
    assert {s["attributes"]["gen_ai.tool.name"] for s in retried} == {"invoice_lookup"}
    assert len({s["attributes"]["gen_ai.tool.call.id"] for s in retried}) == 1
    row, misroute = by_bug["misroute"]
    assert {_spans(folder / row["file"])[s]["attributes"]["gen_ai.agent.name"] for s in misroute["tool_span_ids"]} == {
        "orders_worker"
    }
    row, race = by_bug["mediator_race"]
    assert race["tool_span_ids"] == [] and len(race["lost_tool_span_ids"]) == 1


def test_labelled_runs_are_exactly_the_failing_runs_a_fault_touches(exported) -> None:
    for (seed, spec), (_, rows) in exported.items():
        touched = set().union(*(TOUCHED_BY[b] for b in TOUCHED_BY if spec in ("all", b)))
        assert {row["task_id"] for row in rows if row["mistakes"]} == touched, (seed, spec)
        assert {row["task_id"] for row in rows if row["failed"]} == touched, (seed, spec)
        for row in rows:
            assert len(row["mistakes"]) <= 1


def test_no_faults_no_mistakes(exported) -> None:
    for seed in (0, 3):
        _, rows = exported[(seed, "none")]
        assert rows and all(not row["mistakes"] and not row["failed"] for row in rows)
        assert all(row["mistake_agent"] is None for row in rows)


def test_no_label_text_in_any_span(exported) -> None:
    for folder, rows in exported.values():
        for row in rows:
            text = (folder / row["file"]).read_text()
            assert not LABEL_TEXT.search(text), row["file"]


def test_spans_are_those_of_a_plain_run(tmp_path: Path) -> None:
    """The probe changes nothing: same spans as `run_suite` without it, apart from the ids."""
    exporter = InMemorySpanExporter()
    run_suite(release="r1", bugs="all", seed=0, exporter=exporter)
    plain = sorted(
        json.dumps([span.name, span.start_time, span.end_time, dict(span.attributes or {}),
                    span.status.status_code.name, [event.name for event in span.events]], sort_keys=True, default=list)
        for span in exporter.get_finished_spans()
    )
    paths, _ = export_run(out=tmp_path, seed=0, bugs="all", release="r1")
    exported_spans = []
    for path in paths:
        for resource in json.loads(path.read_text())["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    attributes = {a["key"]: _value(a["value"]) for a in span.get("attributes", [])}
                    status = {0: "UNSET", 1: "OK", 2: "ERROR"}[span.get("status", {}).get("code", 0)]
                    exported_spans.append(json.dumps(
                        [span["name"], int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"]), attributes,
                         status, [event["name"] for event in span.get("events", [])]], sort_keys=True, default=list))
    assert sorted(exported_spans) == plain


def test_deterministic_for_a_seed(tmp_path: Path) -> None:
    first, rows_a = export_run(out=tmp_path / "a", seed=2, bugs="all", release="r1")
    second, rows_b = export_run(out=tmp_path / "b", seed=2, bugs="all", release="r1")
    assert rows_a == rows_b
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]
    _, other_seed = export_run(out=tmp_path / "c", seed=5, bugs="all", release="r1")
    _, other_bugs = export_run(out=tmp_path / "d", seed=2, bugs="misroute", release="r1")
    ids = [{row["trace_id"] for row in rows} for rows in (rows_a, other_seed, other_bugs)]
    assert all(len(group) == len(rows_a) for group in ids)
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2])


def test_cli_writes_traces_and_labels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert labels_main(["--out", str(tmp_path), "--seed", "1", "--bugs", "misroute",
                        "--tasks", "refund-status,order-status-shipped"]) == 0
    rows = read_labels(tmp_path / LABELS_FILE)
    assert [row["task_id"] for row in rows] == ["refund-status", "order-status-shipped"]
    assert [len(row["mistakes"]) for row in rows] == [1, 0]
    assert sorted(p.name for p in tmp_path.glob("*.json")) == sorted(row["file"] for row in rows)
    assert "1 mistake(s) labelled" in capsys.readouterr().out


def test_files_decode_as_otlp_json(exported) -> None:
    from traces.normalize.otlp import decode_export_request

    folder, rows = exported[(0, "all")]
    for row in rows:
        batch = decode_export_request(body=(folder / row["file"]).read_bytes(), content_type="application/json")
        assert not batch.rejected
        kinds = {span.span_id: span.kind for span in batch.spans}
        for mistake in row["mistakes"]:
            assert kinds[mistake["span_id"]] == "LLM"


def test_example_agent_dataset(tmp_path: Path) -> None:
    paths, rows = example_agent_dataset(dest=tmp_path, seeds=[0, 1], bug_specs=["all", "mediator_race"])
    assert len(paths) == len(rows) == 2 * 2 * 22
    assert len({row["trace_id"] for row in rows}) == len(rows)
    assert read_labels(tmp_path / LABELS_FILE) == rows
    assert sum(bool(row["mistakes"]) for row in rows) == 2 * (11 + 4)


def test_the_evolution_target_carries_no_labels() -> None:
    files = target_repo_files(bugs="all")
    assert not [path for path in files if "labels" in path]
