"""The judges of a conversation say the same about a run whichever SDK recorded it. tau-airline's runs (OpenInference)
re-encoded as the GenAI conventions' `parts`, as Anthropic content blocks, as OpenAI chat messages and as the Langfuse
SDK's `@observe()` records them (tools as plain spans) (benchmarks/insights_real/formats.py, the benchmark's
`--format`) keep their span ids: every rule judge must give each run the same verdicts on the same spans.

Before diagnosis/judges/messages.py, the judges read only OpenInference's `{"role", "content"}`: on the Anthropic
shape (a tool's reply is a user message's `tool_result` block; a tool call's arguments sit in the agent's content)
`unconfirmed_write`, `refused_write_retried` and `unnamed_write_choice` flagged nothing, and on the `parts` shape (no
`content` at all) every user message read as empty, so writes were flagged that the user had asked for. Before
diagnosis/judges/tool_calls.py, no judge of tool calls saw a tool recorded as a plain span."""

import json

import pytest

from benchmarks.insights_real.formats import FORMATS, reencode
from clear.projects.services import project_create
from diagnosis.models import Feedback
from diagnosis.services import diagnosis_run_execute, diagnosis_run_start
from tests.diagnosis.support import ingest_otlp

pytestmark = pytest.mark.django_db

# Tasks 0-9 of the tune split, every trial: runs in which each judge of a conversation flags a write, and runs where
# none does.
TASKS = range(10)
CONVERSATION_JUDGES = ("rule.unconfirmed_write", "rule.unnamed_write_choice", "rule.refused_write_retried",
                       "rule.ungrounded_write_argument")


def _verdicts(*, owner, name: str, requests: list[dict]) -> dict[tuple, str]:
    project = project_create(name=name, owner=owner)
    for request in requests:
        ingest_otlp(project=project, body=json.dumps(request).encode(), content_type="application/json")
    run = diagnosis_run_execute(run=diagnosis_run_start(project=project, judges=["rules"], enqueue=False))
    assert run.status == "succeeded", run.errors
    return {(f.trace.trace_id, f.judge, f.target_span_id, (f.details or {}).get("call_span_id")): f.verdict or f.status
            for f in Feedback.objects.filter(run=run).select_related("trace")}


def test_every_instrumentation_gets_the_same_verdicts_on_the_same_spans(owner, shared_dir):
    folder = shared_dir / "datasets" / "tau-airline"
    requests = [json.loads((folder / f"airline-{task}-{trial}.json").read_text())
                for task in TASKS for trial in range(4)]
    recorded = _verdicts(owner=owner, name="as recorded", requests=requests)
    flagged = {judge: sum(1 for key, verdict in recorded.items() if key[1] == judge and verdict == "fail")
               for judge in CONVERSATION_JUDGES}
    assert all(flagged.values()), flagged  # each judge of a conversation has something to find here
    for fmt in FORMATS:
        other = _verdicts(owner=owner, name=fmt, requests=[reencode(r, fmt) for r in requests])
        differ = sorted(set(recorded.items()) ^ set(other.items()), key=str)
        assert not differ, (fmt, differ[:6])
