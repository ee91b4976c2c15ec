import pytest

from diagnosis.judges.rules import RULES
from diagnosis.judges.rules.errors import rule_exit_code, rule_span_error, rule_tool_error
from diagnosis.judges.rules.outliers import node_stats_compute, rule_latency_outlier, rule_token_outlier
from diagnosis.judges.rules.output import rule_empty_output, rule_truncated_output
from diagnosis.judges.rules.repetition import REPEATED_CALL_THRESHOLD, rule_loop, rule_repeated_tool_call
from diagnosis.services.evidence import evidence_verify
from tests.diagnosis.support import span, view


def _failing(results):
    return [r for r in results if r.verdict == "fail"]


def _only_pass(results):
    assert len(results) == 1 and results[0].verdict == "pass" and results[0].target_span_id is None


def test_every_rule_passes_a_clean_trace_with_one_whole_trace_result():
    trace = view(span("a", output="Looked it up."), span("b", kind="TOOL", tool_name="lookup", input={"id": 1},
                                                          output={"ok": True}, at=1))
    for name, rule in RULES.items():
        results = rule(trace, {})
        assert len(results) == 1 and results[0].target_span_id is None, name
        assert results[0].verdict == "pass" or results[0].status == "skipped", name


def test_span_errors_quote_the_status_message_and_exception():
    trace = view(span("a", kind="TOOL", tool_name="db", status="error", status_message="connection refused",
                      exceptions=[{"type": "psycopg.OperationalError", "message": "connection refused"}]),
                 span("b", exceptions=[{"type": "ValueError", "message": "bad json"}], at=1))
    failing = _failing(rule_span_error(trace))
    assert [r.target_span_id for r in failing] == ["a", "b"]
    assert [e.quote for e in failing[0].issues[0].evidence] == ["connection refused"]
    assert "OperationalError" in failing[0].issues[0].title
    assert [e.quote for e in failing[1].issues[0].evidence] == ["bad json"]
    assert evidence_verify(trace=trace, results=failing) == 0


@pytest.mark.parametrize("output, code", [
    ("exitcode: 1 (execution failed)\nTraceback ...", 1),
    ("Command failed with exit code 127: not found", 127),
    ('{"stdout": "", "exit_code": 2}', 2),
    ("exit status 3", 3),
])
def test_non_zero_exit_codes_in_tool_output(output, code):
    trace = view(span("t", kind="TOOL", tool_name="shell", output=output))
    (result,) = rule_exit_code(trace)
    assert result.verdict == "fail" and result.details["exit_code"] == code and result.target_span_id == "t"
    assert evidence_verify(trace=trace, results=[result]) == 0


def test_exit_code_zero_and_non_tool_mentions_are_not_flagged():
    trace = view(span("t", kind="TOOL", tool_name="shell", output="exitcode: 0 (execution succeeded)"),
                 span("m", kind="AGENT", output="The run ended with exitcode: 1, let me fix it.", at=1))
    _only_pass(rule_exit_code(trace))


def test_tool_error_payloads_json_and_text():
    trace = view(
        span("j", kind="TOOL", tool_name="crm", output={"error": "not_found", "message": "no such customer"}),
        span("s", kind="TOOL", tool_name="search", output='{"error": {"code": 429}}', at=1),
        span("x", kind="TOOL", tool_name="py", output="exitcode: 0\nCode output: Error: unsupported language", at=2),
        span("ok", kind="TOOL", tool_name="py", output="The error rate dropped to 2%.", at=3),
        span("e", kind="TOOL", tool_name="crm", status="error", output={"error": "boom"}, at=4),
    )
    failing = _failing(rule_tool_error(trace))
    assert [(r.target_span_id, r.issues[0].evidence[0].quote) for r in failing] == [
        ("j", "not_found"), ("s", '{"code": 429}'), ("x", "Code output: Error: unsupported language")]
    assert evidence_verify(trace=trace, results=failing) == 0


def test_repeated_identical_tool_calls_from_one_caller():
    calls = [span(f"c{i}", parent="w", kind="TOOL", tool_name="invoice", input={"id": "INV-1"},
                  output={"error": "rate_limited"}, at=i) for i in range(REPEATED_CALL_THRESHOLD)]
    other = [span("d1", parent="w", kind="TOOL", tool_name="invoice", input={"id": "INV-2"}, at=9),
             span("d2", parent="v", kind="TOOL", tool_name="invoice", input={"id": "INV-1"}, at=9)]
    worker = span("w", kind="AGENT", node="billing")
    trace = view(worker, *calls, *other)
    (result,) = rule_repeated_tool_call(trace)
    assert result.verdict == "fail" and result.target_span_id == "w"
    # Each call's arguments, then the reply the repeats ignored (no step of the calls' agent is known: the parent).
    assert [e.span_id for e in result.issues[0].evidence] == ["c0", "c1", "c2", "c0"]
    assert result.issues[0].evidence[0].quote == '{"id": "INV-1"}'
    assert result.issues[0].evidence[-1].quote == '{"error": "rate_limited"}'
    assert evidence_verify(trace=trace, results=[result]) == 0
    # One retry (two identical calls) is a normal back-off, not a loop.
    _only_pass(rule_repeated_tool_call(view(worker, *calls[:2])))


def test_loops_are_back_to_back_repetitions_only():
    a, b = "Let me search for the page again.", "Here is the answer."
    trace = view(span("1", kind="AGENT", node="web", output=a, at=1), span("2", kind="AGENT", node="web", output=a, at=2),
                 span("3", kind="AGENT", node="web", output=" let me  SEARCH for the page again. ", at=3),
                 span("4", kind="AGENT", node="writer", output=b, at=4), span("5", kind="AGENT", node="web", output=b,
                                                                                at=5),
                 span("6", kind="AGENT", node="web", output=a, at=6))
    (result,) = _failing(rule_loop(trace))
    assert result.target_span_id == "2" and result.details["repeats"] == 3
    assert [e.span_id for e in result.issues[0].evidence] == ["1", "2", "3"]
    assert result.issues[0].severity == "high"
    assert evidence_verify(trace=trace, results=[result]) == 0


def test_empty_and_truncated_outputs():
    trace = view(
        span("e", output=[{"role": "assistant", "parts": [{"type": "text", "content": "  "}]}]),
        span("n", output=None, at=1),
        span("c", output=[{"role": "assistant", "parts": [{"type": "tool_call", "name": "x"}]}], at=2),
        span("t", output="The answer is", attributes={"gen_ai.response.finish_reasons": ["length"]}, at=3),
        span("u", output="Fine.", attributes={"gen_ai.response.finish_reasons": '["stop"]'}, at=4),
        span("k", kind="TOOL", tool_name="x", output="", at=5),
    )
    assert [r.target_span_id for r in _failing(rule_empty_output(trace))] == ["e", "k"]
    (truncated,) = _failing(rule_truncated_output(trace))
    assert truncated.target_span_id == "t" and truncated.issues[0].evidence[0].quote == "length"
    assert evidence_verify(trace=trace, results=[truncated]) == 0


def _node_spans(durations, tokens=None):
    return [span(f"s{i}", node="writer", at=i, duration=d / 1000, input_tokens=(tokens or {}).get(i, 100),
                 output_tokens=0) for i, d in enumerate(durations)]


def test_latency_and_token_outliers_against_the_node_baseline():
    durations = [100, 110, 95, 105, 98, 102, 99, 101, 5000]
    spans = _node_spans(durations, tokens={3: 4000})
    trace = view(*spans)
    rows = [(s.node, s.kind, s.tool_name, (s.end_time - s.start_time).total_seconds() * 1000,
             (s.input_tokens or 0) + (s.output_tokens or 0)) for s in spans]
    # A flat token baseline (MAD 0) says nothing; vary it a little.
    rows = [(n, k, t, d, tok + i) for i, (n, k, t, d, tok) in enumerate(rows)]
    stats = node_stats_compute(rows)
    (slow,) = _failing(rule_latency_outlier(trace, stats))
    assert slow.target_span_id == "s8" and slow.details["z"] > 3.5
    (heavy,) = _failing(rule_token_outlier(trace, stats))
    assert heavy.target_span_id == "s3"
    # Synthetic timestamps: latency is no evidence, the rule stands down; too few spans: no baseline, no verdict.
    (skipped,) = rule_latency_outlier(view(*spans, synthetic=True), stats)
    assert skipped.status == "skipped" and skipped.verdict is None
    few = node_stats_compute(rows[:5])
    _only_pass(rule_latency_outlier(view(*spans[:5]), few))
    assert rule_token_outlier(trace, {})[0].status == "skipped"
