"""Rule judges on the Who&When traces, through a whole diagnosis run (ingested as the endpoint stores them).

Loop decision (documented in diagnosis/judges/rules/repetition.py): 27 traces repeat an (agent, message) pair
somewhere, 3 of them back to back. `rule.loop` reports only the back-to-back repetitions — a speaker saying the
identical thing twice in a row is a conversation that is not progressing. The other 24 are not reported: 18 of them
are the executor's canned reply ("There is no code from the last 1 message for me to execute…") coming back after
other turns, the rest a re-run script printing the same output again; neither is evidence of a fault on its own.
"""

import collections
import json

import pytest

from diagnosis.models import Feedback
from diagnosis.services import diagnosis_run_execute, diagnosis_run_start
from tests.diagnosis.support import whowhen_files, whowhen_ingest, whowhen_spans

pytestmark = pytest.mark.django_db


def _attribute(span: dict, key: str):
    for item in span.get("attributes", []):
        if item["key"] == key:
            return next(iter(item["value"].values()))
    return None


def _expected(shared_dir):
    """From the raw files: Computer_terminal spans whose output starts with a non-zero exit code, and the traces
    with repeated (agent, message) pairs, anywhere and back to back."""
    exits, repeated, adjacent = set(), set(), set()
    for path in whowhen_files(shared_dir):
        spans = whowhen_spans(path)
        trace_id = spans[0]["traceId"].lower()
        messages = []
        for span in spans:
            output = _attribute(span, "output.value") or ""
            if span["name"] == "execute_tool Computer_terminal":
                code = output.split("(", 1)[0].removeprefix("exitcode:").strip()
                if code.lstrip("-").isdigit() and int(code) != 0:
                    exits.add((trace_id, span["spanId"].lower()))
            if span.get("parentSpanId"):
                messages.append((span["name"], output))
        if any(n > 1 for n in collections.Counter(messages).values()):
            repeated.add(trace_id)
        if any(a == b for a, b in zip(messages, messages[1:])):
            adjacent.add(trace_id)
    return exits, repeated, adjacent


def test_rule_judges_on_whowhen_flag_exit_codes_and_back_to_back_loops(project, shared_dir):
    exits, repeated, adjacent = _expected(shared_dir)
    assert (len(exits), len({t for t, _ in exits}), len(repeated), len(adjacent)) == (90, 67, 27, 3)
    names = whowhen_ingest(project=project, shared_dir=shared_dir)
    assert len(names) == 126

    run = diagnosis_run_start(project=project, judges=["rules"], enqueue=False)
    run = diagnosis_run_execute(run=run)
    assert run.status == "succeeded"
    assert (run.total_count, run.done_count, run.error_count, run.dropped_evidence) == (126, 126, 0, 0)

    failing = Feedback.objects.filter(run=run, verdict="fail").select_related("trace")
    flagged_exits = {(f.trace.trace_id, f.target_span_id) for f in failing.filter(judge="rule.exit_code")}
    assert flagged_exits == exits
    # The same spans are ERROR spans; the exit-code rule owns them, so rule.span_error does not report them twice.
    assert not failing.filter(judge="rule.span_error").exists()
    for feedback in failing.filter(judge="rule.exit_code")[:5]:
        quote = feedback.issues[0]["evidence"][0]
        assert quote["span_id"] == feedback.target_span_id and quote["quote"].startswith("exitcode: ")

    loops = {f.trace.trace_id for f in failing.filter(judge="rule.loop")}
    assert loops == adjacent
    assert {names[t] for t in loops} == {"Algorithm-Generated-28.json", "Algorithm-Generated-29.json",
                                          "Algorithm-Generated-35.json"}
    assert repeated - loops and len(repeated - loops) == 24  # reported nowhere, by decision
    loop = failing.filter(judge="rule.loop").first()
    evidence = loop.issues[0]["evidence"]
    assert len(evidence) >= 2 and len({e["span_id"] for e in evidence}) == len(evidence)

    # Tool output that reports an error with exit code 0 ("Code output: Error: …") is a tool error, never an exit code.
    tool_errors = failing.filter(judge="rule.tool_error")
    assert tool_errors.count() == 3
    assert all("Error:" in f.issues[0]["evidence"][0]["quote"] for f in tool_errors)
    assert not {(f.trace.trace_id, f.target_span_id) for f in tool_errors} & exits

    # Timestamps are synthetic (resource dataset.synthetic_timing=true): the latency rule stands down.
    latency = Feedback.objects.filter(run=run, judge="rule.latency_outlier")
    assert latency.count() == 126 and set(latency.values_list("status", flat=True)) == {"skipped"}
    # Every rule left one row per trace at least: a pass on the whole trace when it found nothing.
    per_judge = collections.Counter(Feedback.objects.filter(run=run).values_list("judge", flat=True))
    assert all(per_judge[name] >= 126 for name in run.judges if name.startswith("rule."))
    print(json.dumps(per_judge, indent=1))
