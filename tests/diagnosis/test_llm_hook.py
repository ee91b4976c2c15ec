"""The run → LLM judges hook (diagnosis.judges.llm.judge_trace_with_llm) against the fake OpenAI-compatible server:
the judges' results become Feedback, their calls go through the judge cache, and the run's budget gates them."""

import pytest

from diagnosis.models import Feedback
from diagnosis.services import diagnosis_run_execute, diagnosis_run_start, rubric_create
from tests.diagnosis.llm.helpers import judge_reply
from tests.diagnosis.support import support_desk_ingest

pytestmark = pytest.mark.django_db

MODEL = "openai/gpt-4o-mini"


@pytest.fixture
def llm_project(project, settings, fake_llm):
    settings.CLEAR_JUDGE_MODEL = ""
    settings.CLEAR_JUDGE_API_BASE = fake_llm.api_base
    settings.CLEAR_JUDGE_API_KEY = "test-key"
    support_desk_ingest(project=project, bugs="all", task_ids=["refund-status", "return-policy"])
    return project


def test_llm_judges_write_feedback_and_a_rerun_makes_zero_model_calls(llm_project, fake_llm):
    rubric = rubric_create(project=llm_project, name="polite", kind="llm",
                           config={"criterion": "The answer to the customer is polite."})
    fake_llm.script(default=judge_reply)
    run = diagnosis_run_execute(run=diagnosis_run_start(project=llm_project, judges=["rules", "rubrics", "llm"],
                                                        model=MODEL, enqueue=False))
    assert run.status == "succeeded" and run.error_count == 0 and run.model == MODEL
    calls = fake_llm.call_count
    assert calls > 0 and run.input_tokens > 0 and run.output_tokens > 0
    feedback = Feedback.objects.filter(run=run)
    assert feedback.filter(judge="llm.trace", target_span_id=None).count() == 2
    assert feedback.filter(judge="llm.step").count() > 2
    assert feedback.filter(judge=rubric.judge_name, rubric=rubric, verdict="pass").count() == 2
    assert set(feedback.filter(judge_kind="llm").values_list("model", flat=True)) == {MODEL}
    assert sum(feedback.values_list("input_tokens", flat=True)) == run.input_tokens

    fake_llm.script(default=judge_reply)
    again = diagnosis_run_execute(run=diagnosis_run_start(project=llm_project, judges=["rules", "rubrics", "llm"],
                                                          model=MODEL, enqueue=False))
    assert again.status == "succeeded"
    assert fake_llm.call_count == 0
    assert again.input_tokens == 0 and again.cost == 0
    assert Feedback.objects.filter(run=again).count() == feedback.count()


def test_the_budget_stops_llm_judges_without_recording_failures(llm_project, fake_llm):
    fake_llm.script(default=judge_reply)
    run = diagnosis_run_execute(run=diagnosis_run_start(project=llm_project, judges=["rules", "llm"], model=MODEL,
                                                        budget_tokens=10, enqueue=False))
    assert run.status == "budget_exhausted"
    assert fake_llm.call_count == 0 and run.error_count == 0
    assert not Feedback.objects.filter(run=run, judge_kind="llm").exists()
    assert not Feedback.objects.filter(run=run, status="error").exists()
    assert run.done_count + run.skipped_count == 2 and run.skipped_count >= 1


def test_a_failing_model_is_recorded_as_judge_errors_not_scores(llm_project, fake_llm):
    fake_llm.script(default={"status": 401})
    run = diagnosis_run_execute(run=diagnosis_run_start(project=llm_project, judges=["llm.trace"], model=MODEL,
                                                        enqueue=False))
    # Every model call failed and no other judge ran: no verdict at all, so the run failed (issue 25.4).
    assert run.status == "failed" and "No judge produced a verdict: 2 of 2 model calls failed" in run.failure_message
    errors = Feedback.objects.filter(run=run, judge="llm.trace")
    assert errors.count() == 2 and set(errors.values_list("status", "score")) == {("error", None)}
    assert run.error_count == 2 and {e["judge"] for e in run.errors} == {"llm.trace"}
