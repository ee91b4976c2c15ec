"""`manage.py import_traces`: OTLP/JSON files and JSONL into a project, idempotent, with reasons for what it refuses."""

import gzip
import json
import shutil
from collections import Counter
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from traces.models import Score, Span, Trace

pytestmark = pytest.mark.django_db

WHOWHEN = Path("datasets") / "whowhen-algorithm-generated"


def _import(path, project, *extra, json_output=True):
    out, err = StringIO(), StringIO()
    args = [str(path), "--project", project.name, *extra]
    if json_output:
        args.append("--json")
    call_command("import_traces", *args, stdout=out, stderr=err)
    return (json.loads(out.getvalue()) if json_output else out.getvalue()), err.getvalue()


def _attr(span: dict, key: str):
    for kv in span.get("attributes", []):
        if kv["key"] == key:
            return next(iter(kv["value"].values()))
    return None


def _spans_of(path: Path) -> list[dict]:
    doc = json.loads(path.read_text())
    return [span for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for span in ss["spans"]]


def _otlp(spans: list[dict], service: str = "import-test") -> dict:
    return {"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
        "scopeSpans": [{"scope": {"name": "tests"}, "spans": spans}],
    }]}


def _span(trace_id: str, span_id: str, name: str, parent: str = "", attributes: dict | None = None, **extra) -> dict:
    span = {
        "traceId": trace_id, "spanId": span_id, "name": name,
        "startTimeUnixNano": "1767225600000000000", "endTimeUnixNano": "1767225601000000000",
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in (attributes or {}).items()],
        **extra,
    }
    if parent:
        span["parentSpanId"] = parent
    return span


def _agent_run(trace_id: str, *, outcome: str | None = None) -> dict:
    root_attrs = {"gen_ai.operation.name": "invoke_workflow"}
    if outcome:
        root_attrs["clear.outcome"] = outcome
    return _otlp([
        _span(trace_id, "a000000000000001", "invoke_workflow run", attributes=root_attrs),
        _span(trace_id, "a000000000000002", "invoke_agent planner", parent="a000000000000001",
              attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}),
        _span(trace_id, "a000000000000003", "chat gpt-4o", parent="a000000000000002",
              attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}),
    ])


def test_the_126_whowhen_files_import_completely_and_labels_are_refused(project, shared_dir):
    folder = shared_dir / WHOWHEN
    files = sorted(folder.glob("Algorithm-Generated-*.json"))
    assert len(files) == 126
    expected = {}
    for path in files:
        spans = _spans_of(path)
        (trace_id,) = {s["traceId"] for s in spans}
        expected[trace_id] = spans

    summary, progress = _import(folder, project)

    assert summary["files"] == 127 and summary["skipped_files"] == ["LICENSE"]
    assert summary["requests_accepted"] == 126
    assert (summary["traces"], summary["traces_created"]) == (126, 126)
    total = sum(len(spans) for spans in expected.values())
    assert (summary["spans"], summary["spans_created"], summary["spans_already_present"]) == (total, total, 0)
    # labels.jsonl sits in the same folder: every line is refused, none becomes a trace or a span.
    assert summary["requests_refused"] == 126
    (refusal,) = summary["refused"]
    assert refusal["where"] == "labels.jsonl:1-126 (126 lines)"
    assert "not an OTLP request" in refusal["reason"] and "labels are never imported" in refusal["reason"]
    assert "100%" in progress and "[" in progress

    assert Trace.objects.filter(project=project).count() == 126
    assert Span.objects.filter(project=project).count() == total
    assert not Span.objects.filter(project=project, attributes__has_key="mistake_agent").exists()
    labels = [json.loads(line) for line in (folder / "labels.jsonl").read_text().splitlines() if line.strip()]
    assert not Span.objects.filter(project=project, output__icontains=labels[0]["mistake_reason"]).exists()

    for trace in Trace.objects.filter(project=project):
        raw = expected[trace.trace_id]
        assert trace.span_count == len(raw), trace.trace_id
        assert trace.finalized_at is not None
        assert trace.outcome == "failure" and trace.outcome_source == "root_span"
        stored = {s.span_id: s for s in trace.spans.all()}
        assert set(stored) == {s["spanId"] for s in raw}
        agent_names = {_attr(s, "gen_ai.agent.name") for s in raw} - {None}
        assert set(trace.spans.filter(kind="AGENT").values_list("node", flat=True)) == agent_names
        for span in raw:
            if _attr(span, "gen_ai.agent.name"):
                assert stored[span["spanId"]].node == _attr(span, "gen_ai.agent.name")

    again, _ = _import(folder, project)
    assert (again["traces"], again["traces_created"], again["traces_already_present"]) == (126, 0, 126)
    assert (again["spans_created"], again["spans_already_present"]) == (0, total)
    assert Trace.objects.filter(project=project).count() == 126
    assert Span.objects.filter(project=project).count() == total


def test_bad_requests_are_refused_with_a_reason_while_good_ones_import(project, shared_dir, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    good = shared_dir / WHOWHEN / "Algorithm-Generated-1.json"
    shutil.copy(good, folder / "good.json")
    (folder / "garbage.json").write_bytes(b"\x00\xff\x10 this is not json")
    (folder / "truncated.json").write_text(good.read_text()[:500])
    labels = (shared_dir / WHOWHEN / "labels.jsonl").read_text().splitlines()[:2]
    (folder / "labels.jsonl").write_text("\n".join(labels) + "\n")
    logs = {"resourceLogs": [{"resource": {}, "scopeLogs": [{"logRecords": [{"timeUnixNano": "1", "body": {}}]}]}]}
    (folder / "logs.json").write_text(json.dumps(logs))
    (folder / "notes.txt").write_text("not a trace file")
    lines = [
        json.dumps(_agent_run("b" * 32)),  # 1: fine
        "{not json",  # 2
        "",  # 3: blank lines are skipped
        json.dumps(_otlp([_span("c" * 32, "zz", "bad id")])),  # 4: every span rejected
        json.dumps(_otlp([_span("d" * 32, "d000000000000001", "ok"), _span("", "d000000000000002", "no trace")])),  # 5
        json.dumps({"batch": []}),  # 6: an empty Langfuse batch
    ]
    (folder / "requests.jsonl").write_text("\n".join(lines) + "\n")
    with gzip.open(folder / "more.jsonl.gz", "wt") as handle:
        handle.write(json.dumps(_agent_run("e" * 32)) + "\n")

    summary, _ = _import(folder, project)

    refused = {r["where"]: r["reason"] for r in summary["refused"]}
    assert set(refused) == {
        "garbage.json", "truncated.json", "labels.jsonl:1-2 (2 lines)", "logs.json", "requests.jsonl:2",
        "requests.jsonl:4", "requests.jsonl:6",
    }
    assert "not UTF-8" in refused["garbage.json"]
    assert "not valid JSON" in refused["truncated.json"]
    assert "not an OTLP request" in refused["labels.jsonl:1-2 (2 lines)"]
    assert "logs export" in refused["logs.json"]
    assert "not valid JSON" in refused["requests.jsonl:2"]
    assert "all 1 spans rejected" in refused["requests.jsonl:4"] and "spanId" in refused["requests.jsonl:4"]
    assert "without traces" in refused["requests.jsonl:6"]
    (warning,) = summary["warnings"]
    assert warning["where"] == "requests.jsonl:5" and "1 of 2 spans rejected" in warning["reason"]
    assert summary["skipped_files"] == ["notes.txt"]
    assert (summary["requests_accepted"], summary["requests_refused"]) == (4, 8)
    assert summary["spans_rejected"] == 1
    assert set(Trace.objects.filter(project=project).values_list("trace_id", flat=True)) == {
        _spans_of(good)[0]["traceId"], "b" * 32, "d" * 32, "e" * 32,
    }


def test_the_text_summary_lists_refusals_and_everything_refused_is_an_error(project, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"file": "x.json", "trace_id": "abc", "mistake_agent": "A", "mistake_step": 1}\n[1, 2]\n')
    with pytest.raises(CommandError, match="Nothing imported .* all 2 requests were refused"):
        call_command("import_traces", str(bad), "--project", project.name, stdout=StringIO(), stderr=StringIO())
    out = StringIO()
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_agent_run("f" * 32)))
    call_command("import_traces", str(good), "--project", project.name, stdout=out, stderr=StringIO())
    text = out.getvalue()
    assert "requests: 1 accepted, 0 refused" in text
    assert "traces:   1 (1 new, 0 already present)" in text
    assert "spans:    3 (3 new, 0 already present, 0 rejected for bad ids)" in text


def test_outcome_is_set_only_on_traces_that_carry_none(project, shared_dir, tmp_path):
    whowhen = shared_dir / WHOWHEN / "Algorithm-Generated-2.json"
    shutil.copy(whowhen, tmp_path / "whowhen.json")  # carries clear.outcome = failure
    (tmp_path / "plain.json").write_text(json.dumps(_agent_run("1" * 32)))  # carries no outcome
    (tmp_path / "passed.json").write_text(json.dumps(_agent_run("2" * 32, outcome="failure")))

    summary, _ = _import(tmp_path, project, "--outcome", "success")

    assert summary["outcome_set"] == 1
    outcomes = dict(Trace.objects.filter(project=project).values_list("trace_id", "outcome"))
    assert outcomes == {_spans_of(whowhen)[0]["traceId"]: "failure", "1" * 32: "success", "2" * 32: "failure"}
    plain = Trace.objects.get(project=project, trace_id="1" * 32)
    assert plain.outcome_source == "import"

    again, _ = _import(tmp_path, project, "--outcome", "failure")
    assert again["outcome_set"] == 0
    assert Trace.objects.get(pk=plain.pk).outcome == "success"


def test_langfuse_events_in_jsonl_go_through_the_langfuse_mapping(project, tmp_path):
    batch = {"batch": [
        {"id": "e1", "type": "trace-create", "timestamp": "2025-01-01T00:00:00.000Z",
         "body": {"id": "lf-trace-1", "name": "ticket", "release": "r7"}},
        {"id": "e2", "type": "agent-create", "timestamp": "2025-01-01T00:00:01.000Z",
         "body": {"id": "obs-agent", "traceId": "lf-trace-1", "name": "planner",
                  "startTime": "2025-01-01T00:00:01.000Z", "endTime": "2025-01-01T00:00:03.000Z"}},
        {"id": "e3", "type": "generation-create", "timestamp": "2025-01-01T00:00:02.000Z",
         "body": {"id": "obs-gen", "traceId": "lf-trace-1", "parentObservationId": "obs-agent", "name": "chat",
                  "model": "gpt-4o", "startTime": "2025-01-01T00:00:02.000Z",
                  "usageDetails": {"input": 10, "output": 5}}},
        {"id": "e4", "type": "span-create", "body": {"id": "bad", "startTime": "yesterday"}},
    ]}
    score = {"id": "e5", "type": "score-create", "timestamp": "2025-01-01T00:00:04.000Z",
             "body": {"id": "score-1", "traceId": "lf-trace-1", "name": "outcome", "value": 1}}
    path = tmp_path / "langfuse.jsonl"
    path.write_text(json.dumps(batch) + "\n" + json.dumps(score) + "\n")

    summary, _ = _import(path, project)

    assert (summary["requests_accepted"], summary["requests_refused"]) == (2, 0)
    assert summary["langfuse_events_refused"] == 1 and "startTime" in summary["warnings"][0]["reason"]
    assert (summary["traces"], summary["spans_created"], summary["scores"]) == (1, 3, 1)
    trace = Trace.objects.get(project=project)
    assert (trace.release, trace.outcome, trace.input_tokens, trace.span_count) == ("r7", "success", 10, 3)
    assert Counter(trace.spans.values_list("node", flat=True))["planner"] == 2

    again, _ = _import(path, project)
    assert (again["spans_created"], again["spans_already_present"]) == (0, 3)
    assert Span.objects.filter(project=project).count() == 3
    assert Score.objects.filter(project=project).count() == 1


def test_missing_path_and_unknown_project_say_what_to_fix(project, tmp_path):
    with pytest.raises(CommandError, match=r"does not exist: pass a file or a folder"):
        call_command("import_traces", str(tmp_path / "nope"), "--project", project.name, stderr=StringIO())
    (tmp_path / "a.json").write_text(json.dumps(_agent_run("3" * 32)))
    with pytest.raises(CommandError, match=r"No project named 'Bob'.*create_project.*Alice's agent"):
        call_command("import_traces", str(tmp_path), "--project", "Bob", stderr=StringIO())
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CommandError, match="holds no \\*.json"):
        call_command("import_traces", str(empty), "--project", project.name, stderr=StringIO())
    assert not Trace.objects.exists()
    # the project's slug works as well as its name
    call_command("import_traces", str(tmp_path / "a.json"), "--project", project.slug, stdout=StringIO(),
                 stderr=StringIO())
    assert Trace.objects.filter(project=project).count() == 1
