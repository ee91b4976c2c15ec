"""Langfuse ingestion batches: every event type, create/update merging, scores, per-event errors."""

from __future__ import annotations

import json
import uuid

import pytest

from traces.normalize import (
    LangfuseBatchError,
    ScoreRecord,
    SpanUpdate,
    TraceUpdate,
    normalize_ingestion_batch,
    resolve_nodes,
)
from traces.normalize.values import langfuse_observation_id, langfuse_root_span_id

TRACE = "5f1b7c8e-2a4d-4c1e-9b7a-0d3c2b1a0f9e"
TRACE_HEX = TRACE.replace("-", "")
T0 = "2025-03-01T10:00:00.000Z"
T1 = "2025-03-01T10:00:01.500Z"
T2 = "2025-03-01T10:00:03.000Z"


def _ev(etype, body, *, eid=None, ts=T0):
    return {"id": eid or str(uuid.uuid4()), "type": etype, "timestamp": ts, "body": body}


def _run(*events):
    return normalize_ingestion_batch(payload={"batch": list(events), "metadata": {"sdk_name": "python"}})


def test_trace_span_generation_flow_like_the_python_sdk():
    result = _run(
        _ev("trace-create", {"id": TRACE, "name": "support-chat", "userId": "u1", "sessionId": "s1",
                             "release": "1.2.0", "environment": "production", "tags": ["vip", "vip", "web"],
                             "metadata": {"plan": "pro", "clear.outcome": "failure", "clear.task.id": "t-1"},
                             "input": {"question": "Where is my refund?"}, "timestamp": T0}, eid="e1"),
        _ev("span-create", {"id": "span-1", "traceId": TRACE, "name": "retrieve-1234", "startTime": T0,
                            "input": '{"query": "refund"}'}, eid="e2"),
        _ev("generation-update", {"id": "gen-1", "traceId": TRACE, "endTime": T2, "output": "Your refund is on its way",
                                  "usageDetails": {"prompt_tokens": 120, "completion_tokens": 9,
                                                   "prompt_tokens_details": {"cached_tokens": 100}},
                                  "costDetails": {"input": 0.001, "output": 0.0005}}, eid="e4", ts=T2),
        _ev("generation-create", {"id": "gen-1", "traceId": TRACE, "parentObservationId": "span-1", "name": "answer",
                                  "model": "gpt-4o", "modelParameters": {"temperature": 0.1}, "startTime": T1,
                                  "input": [{"role": "user", "content": "Where is my refund?"}],
                                  "usage": {"input": 1, "output": 1, "unit": "TOKENS"},
                                  "metadata": {"agent_name": "support"}}, eid="e3", ts=T1),
        _ev("span-update", {"id": "span-1", "traceId": TRACE, "endTime": T2, "output": {"docs": 3}}, eid="e5", ts=T2),
    )
    assert result.errors == []
    assert [s["id"] for s in result.successes] == ["e1", "e2", "e4", "e3", "e5"]
    assert all(s["status"] == 201 for s in result.successes)
    assert result.updates == []
    resolve_nodes(result.spans)
    spans = {s.attributes["langfuse.id"]: s for s in result.spans}
    root, span, gen = spans[TRACE], spans["span-1"], spans["gen-1"]

    assert root.trace_id == TRACE_HEX and root.span_id == langfuse_root_span_id(TRACE)
    assert (root.is_root, root.kind, root.name, root.parent_span_id) == (True, "CHAIN", "support-chat", None)
    assert root.input == {"question": "Where is my refund?"}
    assert (root.outcome, root.task_id, root.release, root.user_id) == ("failure", "t-1", "1.2.0", "u1")
    assert root.tags == ["vip", "web"]

    assert span.parent_span_id == root.span_id  # top-level observations hang under the trace's root
    assert span.span_id == langfuse_observation_id("span-1") and len(span.span_id) == 16
    assert span.input == {"query": "refund"} and span.output == {"docs": 3}  # create + update merged
    assert span.end_time is not None and span.kind == "SPAN"
    assert span.node == "retrieve"  # no agent ancestor: normalised name
    assert (span.session_id, span.user_id, span.release, span.environment) == ("s1", "u1", "1.2.0", "production")

    assert gen.kind == "LLM" and gen.parent_span_id == span.span_id
    assert gen.model == "gpt-4o" and gen.node == "support"  # owning agent from metadata
    assert (gen.input_tokens, gen.output_tokens, gen.cached_tokens) == (120, 9, 100)  # update wins over create
    assert gen.cost == pytest.approx(0.0015)
    assert gen.output == "Your refund is on its way"
    assert gen.metadata["model_parameters"] == {"temperature": 0.1}
    assert gen.start_time.isoformat() == "2025-03-01T10:00:01.500000+00:00"

    (trace_update,) = result.traces
    assert isinstance(trace_update, TraceUpdate)
    assert trace_update.trace_id == TRACE_HEX and trace_update.root_span_id == root.span_id
    assert trace_update.fields["session_id"] == "s1" and trace_update.fields["metadata"]["plan"] == "pro"
    assert result.provided_fields[(TRACE_HEX, span.span_id)] >= {"name", "input", "output", "end_time"}
    json.dumps(result.response_body())


@pytest.mark.parametrize(
    "etype,kind",
    [("agent-create", "AGENT"), ("tool-create", "TOOL"), ("chain-create", "CHAIN"), ("retriever-create", "RETRIEVER"),
     ("evaluator-create", "EVALUATOR"), ("embedding-create", "EMBEDDING"), ("guardrail-create", "GUARDRAIL"),
     ("event-create", "EVENT"), ("span-create", "SPAN"), ("generation-create", "LLM")],
)
def test_typed_creates(etype, kind):
    result = _run(_ev(etype, {"id": "obs-1", "traceId": TRACE, "name": "lookup_order", "startTime": T0}))
    assert result.errors == []
    (span,) = result.spans
    assert span.kind == kind and span.trace_id == TRACE_HEX
    if kind == "AGENT":
        assert span.node == span.agent_name == "lookup_order"
    if kind == "TOOL":
        assert span.tool_name == "lookup_order" and span.node_fallback == "lookup_order"
    if kind == "EVENT":
        assert span.end_time == span.start_time


def test_legacy_observation_events_and_typed_updates():
    result = _run(
        _ev("observation-create", {"id": "o1", "traceId": TRACE, "type": "GENERATION", "name": "g", "model": "m"}),
        _ev("observation-update", {"id": "o1", "traceId": TRACE, "type": "GENERATION", "endTime": T2}, ts=T2),
        _ev("agent-update", {"id": "a1", "traceId": TRACE, "output": "done"}),
        _ev("tool-update", {"id": "t1", "output": {"ok": True}, "level": "ERROR", "statusMessage": "exit code 1"}),
    )
    assert result.errors == []
    (span,) = result.spans
    assert (span.kind, span.model) == ("LLM", "m") and span.end_time is not None
    updates = {u.span_id: u for u in result.updates}
    agent_update = updates[langfuse_observation_id("a1")]
    assert isinstance(agent_update, SpanUpdate)
    assert agent_update.trace_id == TRACE_HEX and agent_update.fields == {"output": "done"}
    tool_update = updates[langfuse_observation_id("t1")]
    assert tool_update.trace_id is None  # no traceId in the event: storage looks the span up by id
    assert tool_update.fields["status"] == "error" and tool_update.fields["status_message"] == "exit code 1"
    assert tool_update.fields["metadata"] == {"level": "ERROR"}


def test_scores():
    result = _run(
        _ev("score-create", {"id": "sc1", "traceId": TRACE, "name": "outcome", "value": 0, "dataType": "BOOLEAN",
                             "comment": "wrong refund amount"}),
        _ev("score-create", {"traceId": TRACE, "observationId": "gen-1", "name": "helpfulness", "value": 0.8}),
        _ev("score-create", {"traceId": TRACE, "name": "category", "value": "billing", "dataType": "CATEGORICAL"}),
    )
    assert result.errors == []
    s1, s2, s3 = result.scores
    assert s1 == ScoreRecord(trace_id=TRACE_HEX, observation_id=None, name="outcome", value=0.0,
                             string_value="False", comment="wrong refund amount", id="sc1", data_type="BOOLEAN",
                             timestamp=s1.timestamp)
    assert s2.observation_id == langfuse_observation_id("gen-1") and s2.value == 0.8 and s2.string_value is None
    assert (s3.value, s3.string_value) == (None, "billing")


def test_sdk_log_is_accepted_and_dropped():
    result = _run(_ev("sdk-log", {"log": {"message": "flush"}}, eid="log-1"))
    assert result.successes == [{"id": "log-1", "status": 201}]
    assert result.spans == [] and result.logs == [{"message": "flush"}]


def test_bad_events_get_per_event_errors_and_the_rest_goes_through():
    good = _ev("span-create", {"id": "ok", "traceId": TRACE, "name": "fine"}, eid="good")
    bad = [
        ("not-an-object", "each batch entry must be an event object"),
        ({"type": "span-create", "body": {}}, "id is required"),
        (_ev("span-explode", {}, eid="b1"), "type must be one of"),
        (_ev("span-create", None, eid="b2"), "body must be an object"),
        ({**_ev("span-create", {"id": "x"}, eid="b3"), "timestamp": "yesterday"}, "timestamp must be an ISO-8601"),
        (_ev("span-update", {"traceId": TRACE}, eid="b4"), "body.id is required"),
        (_ev("span-create", {"id": "x", "startTime": "12:00"}, eid="b5"), "body.startTime must be an ISO-8601"),
        (_ev("generation-create", {"id": "x", "usage": {"input": -3}}, eid="b6"),
         "body.usage.input must not be negative"),
        (_ev("generation-create", {"id": "x", "usageDetails": {"input": "many"}}, eid="b7"), "must be a number"),
        (_ev("span-create", {"id": "x", "level": "LOUD"}, eid="b8"), "body.level must be one of"),
        (_ev("score-create", {"traceId": TRACE, "value": 1}, eid="b9"), "body.name is required"),
        (_ev("score-create", {"name": "n", "value": 1}, eid="b10"), "body.traceId is required"),
        (_ev("score-create", {"traceId": TRACE, "name": "n", "value": "x", "dataType": "NUMERIC"}, eid="b11"),
         "must be a number"),
        (_ev("score-create", {"traceId": TRACE, "name": "n", "value": 2, "dataType": "BOOLEAN"}, eid="b12"),
         "must be 0 or 1"),
        (_ev("dataset-run-item-create", {"id": "x"}, eid="b13"), "not accepted on the public API"),
        (_ev("observation-create", {"id": "x", "type": "WIDGET"}, eid="b14"), "body.type must be GENERATION"),
        (_ev("generation-create", {"id": "x", "promptName": "p"}, eid="b15"), "promptName and body.promptVersion"),
        (_ev("trace-create", {"id": "x", "tags": "a,b"}, eid="b16"), "body.tags must be an array"),
        (_ev("span-create", {"id": "x" * 801}, eid="b17"), "at most 800 characters"),
    ]
    result = _run(good, *[b for b, _ in bad])
    assert result.successes == [{"id": "good", "status": 201}]
    assert len(result.errors) == len(bad)
    for error, (_, expected) in zip(result.errors, bad):
        assert error["status"] == 400
        assert expected in error["message"], error
        assert error["error"] == "Invalid request data"
    assert [e["id"] for e in result.errors][2:] == [f"b{i}" for i in range(1, 18)]
    assert [s.name for s in result.spans] == ["fine"]


def test_malformed_outer_body_is_a_batch_error():
    for payload in ({}, {"batch": {}}, [], {"batch": "x"}):
        with pytest.raises(LangfuseBatchError):
            normalize_ingestion_batch(payload=payload)
    assert normalize_ingestion_batch(payload={"batch": []}).response_body() == {"successes": [], "errors": []}


def test_id_mapping_is_deterministic():
    assert len(langfuse_observation_id("anything")) == 16
    trace = _ev("trace-create", {"id": "my-trace", "name": "t"})
    span = _ev("span-create", {"id": "s", "traceId": "my-trace"})
    r1, r2 = _run(trace, span), _run(span, trace)
    ids1 = sorted((s.trace_id, s.span_id, s.parent_span_id) for s in r1.spans)
    ids2 = sorted((s.trace_id, s.span_id, s.parent_span_id) for s in r2.spans)
    assert ids1 == ids2
    assert all(len(t) == 32 and len(s) == 16 for t, s, _ in ids1)
    hexed = _run(_ev("span-create", {"id": "b7ad6b7169203331", "traceId": "0AF7651916CD43DD8448EB211C80319C"}))
    (span,) = hexed.spans
    assert (span.trace_id, span.span_id) == ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    orphan = _run(_ev("span-create", {"id": "lonely"}))
    (span,) = orphan.spans
    assert len(span.trace_id) == 32 and span.attributes["langfuse.id"] == "lonely"


def test_create_only_usage_units_and_costs():
    result = _run(
        _ev("generation-create", {"id": "g1", "traceId": TRACE,
                                  "usage": {"input": 500, "output": 20, "unit": "CHARACTERS", "totalCost": 0.2}}),
        _ev("generation-create", {"id": "g2", "traceId": TRACE,
                                  "usageDetails": {"input": 80, "input_cached_tokens": 20, "output": 5,
                                                   "output_reasoning": 15}}),
        _ev("generation-create", {"id": "g3", "traceId": TRACE,
                                  "usage": {"promptTokens": 7, "completionTokens": 3,
                                            "inputCost": 0.1, "outputCost": 0.2}}),
    )
    g1, g2, g3 = sorted(result.spans, key=lambda s: s.attributes["langfuse.id"])
    assert (g1.input_tokens, g1.cost, g1.metadata["usage"]["unit"]) == (None, 0.2, "CHARACTERS")
    assert (g2.input_tokens, g2.output_tokens, g2.cached_tokens) == (100, 20, 20)  # Langfuse buckets made inclusive
    assert (g3.input_tokens, g3.output_tokens) == (7, 3) and g3.cost == pytest.approx(0.3)


def test_raw_body_fields_are_kept_in_attributes():
    result = _run(
        _ev("generation-create", {"id": "g", "traceId": TRACE, "model": "gpt-4o", "usageDetails": {"input": 3},
                                  "promptName": "p", "promptVersion": 2, "version": "v1"}),
        _ev("generation-update", {"id": "g", "costDetails": {"total": 0.1}}, ts=T2),
    )
    (span,) = result.spans
    assert span.attributes["langfuse.model"] == "gpt-4o"
    assert span.attributes["langfuse.usageDetails"] == {"input": 3}
    assert span.attributes["langfuse.costDetails"] == {"total": 0.1}
    assert span.attributes["langfuse.promptVersion"] == 2
    assert span.metadata["prompt_name"] == "p" and span.metadata["version"] == "v1"
    json.dumps(span.attributes)
