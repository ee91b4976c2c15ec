"""Issue 28, item 1 (separate causes) on tau-airline traces: tools answer "Error: …" with status OK, and every such
answer is a tool error; insights group them by tool and error pattern, never as "some tool failed".

The traces: task 0 (book_reservation: payment amount does not add up), 13 (update_reservation_flights: flight not
available on a date), 15 (update_reservation_flights: not enough seats), 3 and 23 (update_reservation_flights: gift
card balance is not enough; one run also gets update_reservation_baggages' same message, once), succeeding runs of
13 and 15 among them. Diagnosed with the rule judges only (no model)."""

from __future__ import annotations

import pytest

from diagnosis.judges.text import error_pattern
from diagnosis.models import Feedback, Insight
from tests.diagnosis.insights.conftest import diagnose, held
from tests.diagnosis.support import ingest_otlp, whowhen_spans
from traces.models import Span

pytestmark = pytest.mark.django_db

FILES = ["airline-0-0", "airline-0-1", "airline-0-2", "airline-13-0", "airline-13-1", "airline-13-3", "airline-15-0",
         "airline-15-1", "airline-15-2", "airline-23-2", "airline-23-3", "airline-3-2", "airline-3-3"]


def _attribute(span: dict, key: str):
    for item in span.get("attributes", []):
        if item["key"] == key:
            return next(iter(item["value"].values()))
    return None


def _tool_errors(shared_dir) -> dict[tuple[str, str], tuple[str, str]]:
    """From the raw files: (trace id, span id) -> (tool, error pattern) of every tool span answering "Error: …"."""
    found = {}
    for name in FILES:
        for span in whowhen_spans(shared_dir / "datasets" / "tau-airline" / f"{name}.json"):
            output = _attribute(span, "output.value")
            if isinstance(output, str) and output.lstrip().startswith("Error:"):
                assert span.get("status", {}).get("code") in (None, 0, 1, "STATUS_CODE_UNSET", "STATUS_CODE_OK")
                found[(span["traceId"].lower(), span["spanId"].lower())] = \
                    (_attribute(span, "tool.name"), error_pattern(output))
    return found


def test_tool_errors_of_different_tools_and_patterns_are_different_insights(project, shared_dir, settings):
    settings.CLEAR_JUDGE_MODEL = ""
    expected = _tool_errors(shared_dir)
    assert len(expected) == 24 and len(set(expected.values())) == 6
    for name in FILES:
        body = (shared_dir / "datasets" / "tau-airline" / f"{name}.json").read_bytes()
        ingest_otlp(project=project, body=body, content_type="application/json")
    run = diagnose(project, "", judges=["rules"])

    # Every "Error: …" answer is a tool error although no span's status says so, titled by tool and pattern. It is
    # blamed on the model turn that made the call (issue 41), which cites the tool span that answered.
    spans = {(t, s): (tool, output, kind) for t, s, tool, output, kind in Span.objects.filter(trace__project=project)
             .values_list("trace__trace_id", "span_id", "tool_name", "output", "kind")}
    failing = Feedback.objects.filter(run=run, judge="rule.tool_error").exclude(issues=[]).select_related("trace")
    flagged = {}
    for feedback in failing:
        # (A recovered error, a pass that keeps its issue, stays on the failed call: verdicts.py.)
        assert spans[(feedback.trace.trace_id, feedback.target_span_id)][2] == \
            ("TOOL" if feedback.details.get("recovered") else "LLM")
        for issue in feedback.issues:
            for cited in issue["evidence"]:
                if spans[(feedback.trace.trace_id, cited["span_id"])][2] == "TOOL":
                    flagged[(feedback.trace.trace_id, cited["span_id"])] = issue["title"]
    assert set(flagged) == set(expected)
    for key, (tool, pattern) in expected.items():
        assert flagged[key] == f"{tool} returned an error: {pattern}"

    def calls(statement) -> set[tuple[str, str]]:
        return {(statement.trace.trace_id, e["span_id"]) for e in statement.evidence
                if spans.get((statement.trace.trace_id, e["span_id"]), ("", "", ""))[2] == "TOOL"}

    insights = list(Insight.objects.filter(project=project, is_other=False, occurrences__run=run).distinct())
    by_key: dict[tuple[str, str], list[Insight]] = {}
    for insight in insights:
        statements = list(held(insight, run).select_related("trace"))
        tools = {spans[key][0] for s in statements if s.judge in ("rule.tool_error", "rule.span_error")
                 for key in calls(s)} - {""}
        assert len(tools) <= 1, (insight.title, tools)  # no insight mixes tools' errors
        errors = {expected.get(key) for s in statements if s.judge == "rule.tool_error" for key in calls(s)}
        if not errors:
            continue
        # An insight of tool errors holds one tool's one error pattern, nothing else, and its title says which.
        assert len(errors) == 1 and None not in errors, (insight.title, errors)
        assert {s.judge for s in statements} == {"rule.tool_error"}, insight.title
        tool, pattern = errors.pop()
        assert insight.title == f"{tool} returned an error: {pattern}"
        by_key.setdefault((tool, pattern), []).append(insight)

    # Each pattern seen 3+ times in 2+ traces is its own insight, at one node; the once-seen ones are "other". So
    # is one whose every occurrence the agent recovered from (issue 41: the same tool succeeded later on corrected
    # arguments) unless those runs are associated with failure: task 0's book_reservation "payment amount does not
    # add up" was retried and went through in all three runs, and with 2 succeeding traces among these 13 that
    # association cannot be known (on all 200 runs it is: benchmarks/insights_real).
    assert sorted(by_key) == [
        ("update_reservation_flights", "flight <id> not available on date <date>"),
        ("update_reservation_flights", "gift card balance is not enough"),
        ("update_reservation_flights", "not enough seats on flight <id>"),
    ]
    for (tool, pattern), found in by_key.items():
        assert len([i for i in found if i.level == Insight.Level.NODE]) == 1, (tool, pattern)

    # A second run keeps each pattern's insight: the centroids of the patterns are nearly equal (the embedding masks
    # tool names), so only the pattern may say which insight a cluster is.
    again = diagnose(project, "", judges=["rules"])
    for (tool, pattern), found in by_key.items():
        node = next(i for i in found if i.level == Insight.Level.NODE)
        statements = held(node, again).select_related("trace")
        assert statements.exists(), (tool, pattern)
        assert {expected.get(key) for s in statements for key in calls(s)} == {(tool, pattern)}
