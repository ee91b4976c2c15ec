"""Issue 43, acceptance 2: benchmarks/model_mode counts itself, from what is stored and shown, the model texts that
must never be shown: the judges' issue titles, critiques and details naming an entity absent from the trace, titles
over the limit, root causes quoting a value their span does not hold. A run whose texts passed the checks counts 0;
the same run with such texts written into its stored verdicts (as a check that let them through would) counts each."""

import pytest

from benchmarks.model_mode.texts import _must_be_zero
from diagnosis.models import Feedback
from tests.diagnosis.llm.helpers import judge_reply
from tests.diagnosis.test_run_status_honest import _run, llm_project  # noqa: F401 - the fixture
from traces.models import Span

pytestmark = pytest.mark.django_db
COUNTS = ("echo_statements", "titles_naming_absent_entities", "titles_over_limit", "titles_naming_no_failure",
          "root_causes_naming_absent_entities", "root_causes_quoting_absent_values",
          "verdict_texts_naming_absent_entities")


def test_the_benchmark_counts_shown_texts_naming_absent_entities(llm_project, fake_llm):
    fake_llm.script(default=judge_reply)
    run = _run(llm_project, ["llm"])
    zero = _must_be_zero(run=run, project=llm_project)
    assert {key: zero[key] for key in COUNTS} == dict.fromkeys(COUNTS, 0)

    step = Feedback.objects.filter(run=run, judge="llm.step", status="ok").first()
    step.issues = [{"title": "`refund_tool` was never called", "detail": "d", "severity": "high", "evidence": []},
                   {"title": "The order lookup " + "went wrong and " * 6, "detail": "d", "severity": "low",
                    "evidence": []},
                   {"title": "The chat is over.", "detail": "d", "severity": "low", "evidence": []}]
    step.critique = "The Lambda agent dropped the request."
    step.save(update_fields=["issues", "critique"])
    trace = Feedback.objects.filter(run=run, judge="llm.trace", status="ok").first()
    span_id = Span.objects.filter(trace_id=trace.trace_id).values_list("span_id", flat=True).first()
    trace.details = {**trace.details, "root_cause": {
        "node": "x", "span_id": span_id, "reason": 'The desk answered "refund approved for INV-9" via the router '
                                                   "service."}}
    trace.save(update_fields=["details"])

    zero = _must_be_zero(run=run, project=llm_project)
    assert zero["titles_naming_absent_entities"] == 1 and zero["title_examples"][0]["absent"] == ["refund_tool"]
    assert zero["titles_over_limit"] == 1
    assert zero["titles_naming_no_failure"] == 1 and zero["no_failure_title_examples"] == ["The chat is over."]
    assert zero["verdict_texts_naming_absent_entities"] == 1
    assert zero["root_causes_naming_absent_entities"] == 1 and zero["root_cause_examples"][0]["absent"] == ["router"]
    assert zero["root_causes_quoting_absent_values"] == 1
