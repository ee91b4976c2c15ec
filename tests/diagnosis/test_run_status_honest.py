"""Issue 25.4: a run says honestly how its model calls went. Every model call failing with no rule judge → the run
is `failed` and `diagnose` exits non-zero; errors beside verdicts → `succeeded`, shown as "finished with errors (N of
M model calls)" in the API and the pages, grouped by cause instead of one line per step; the traces whose judging
errored can be re-judged alone (`diagnose --retry-errors`, the API, the run page's button)."""

import io

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from clear import llm
from diagnosis.models import DiagnosisRun, Feedback
from diagnosis.services import diagnosis_run_execute, diagnosis_run_start
from tests.diagnosis.llm.helpers import judge_reply
from tests.diagnosis.support import support_desk_ingest

pytestmark = pytest.mark.django_db

MODEL = "openai/clear-local-model"
REFUSED = {"status": 400, "body": {"error": {"message": "model 'clear-local-model' not loaded", "type": "invalid"}}}


@pytest.fixture
def llm_project(project, settings, fake_llm, monkeypatch):
    settings.CLEAR_JUDGE_MODEL = ""
    settings.CLEAR_JUDGE_API_BASE = fake_llm.api_base
    settings.CLEAR_JUDGE_API_KEY = "test-key"
    monkeypatch.setattr(llm, "sleep", lambda seconds: None)
    support_desk_ingest(project=project, bugs="all", task_ids=["refund-status", "return-policy"])
    return project


def _run(project, judges):
    return diagnosis_run_execute(run=diagnosis_run_start(project=project, judges=judges, model=MODEL, enqueue=False))


def test_every_model_call_failing_without_rule_judges_fails_the_run(llm_project, fake_llm):
    fake_llm.script(default=REFUSED)
    run = _run(llm_project, ["llm"])
    assert run.status == "failed"
    assert run.failure_message.startswith("No judge produced a verdict:")
    assert "provider_error" in run.failure_message and "--retry-errors" in run.failure_message

    fake_llm.script(default=REFUSED)
    with pytest.raises(CommandError, match="No judge produced a verdict"):
        call_command("diagnose", "--project", llm_project.name, "--judges", "llm", "--model", MODEL, "--inline",
                     stdout=io.StringIO(), stderr=io.StringIO())


def _first_trace_answered(request):
    """Each LLM judge answers the first trace it is asked about and is refused on the others (issue 43: a judge
    with no verdict at all fails the run; errors beside each judge's verdicts do not)."""
    from tests.diagnosis.llm.helpers import data_block, judge_of

    goal = str(data_block(request).get("goal") or data_block(request).get("trace", {}).get("goal"))
    first = _first_trace_answered.goals.setdefault(judge_of(request), goal)
    return judge_reply(request) if goal == first else REFUSED


def test_errors_beside_verdicts_finish_with_errors_grouped_by_cause(llm_project, fake_llm, issued_key, teammate):
    _first_trace_answered.goals = {}
    fake_llm.script(default=_first_trace_answered)
    run = _run(llm_project, ["rules", "llm"])
    assert run.status == "succeeded" and run.error_count >= 2
    errored = Feedback.objects.filter(run=run, status="error")
    assert errored.count() == run.error_count

    body = Client().get(f"/api/v1/runs/{run.pk}/", HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}").json()
    summary = body["summary"]
    assert summary["model_call_errors"] == errored.count() < summary["model_calls"]
    assert summary["judges_without_verdict"] == []
    assert summary["errors_label"] == (f"finished with errors ({errored.count()} of {summary['model_calls']} "
                                       "model calls)")
    [group] = summary["errors_by_cause"]  # one line for the cause, not one per step
    assert group["cause"] == "provider_error" and group["count"] == errored.count() and group["traces"] == 1
    assert "not loaded" in group["example"]

    client = Client()
    client.force_login(teammate)
    page = client.get(f"/p/{llm_project.slug}/runs/{run.pk}/").content.decode()
    assert 'data-testid="run-finished-with-errors"' in page and 'data-testid="run-errors-by-cause"' in page
    assert "model calls)" in page and 'data-testid="retry-errors-form"' in page

    # The provider is back: the button re-judges only the errored trace, and it is judged.
    fake_llm.script(default=judge_reply)
    response = client.post(f"/p/{llm_project.slug}/runs/{run.pk}/retry-errors/")
    retry = DiagnosisRun.objects.exclude(pk=run.pk).get(project=llm_project)
    assert response.status_code == 302 and response["Location"].endswith(f"/runs/{retry.pk}/")
    assert retry.total_count == 1 and retry.config["retry_of"] == str(run.pk)
    assert set(retry.judges) == set(run.judges) and retry.model == MODEL


def test_retry_errors_through_the_api_and_the_command(llm_project, fake_llm, issued_key):
    fake_llm.script(default=REFUSED)
    run = _run(llm_project, ["llm"])
    assert run.status == "failed"
    fake_llm.script(default=judge_reply)
    response = Client().post(f"/api/v1/runs/{run.pk}/retry-errors/", HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")
    assert response.status_code == 201, response.content
    retry = diagnosis_run_execute(run=DiagnosisRun.objects.get(pk=response.json()["id"]))  # on_commit: not here
    assert retry.total_count == 2 and retry.status == "succeeded" and retry.error_count == 0

    out = io.StringIO()
    fake_llm.script(default=judge_reply)
    call_command("diagnose", "--project", llm_project.name, "--retry-errors", str(run.pk), "--inline", stdout=out,
                 stderr=io.StringIO())
    assert "2 trace(s)" in out.getvalue() and "succeeded" in out.getvalue()

    # A run with nothing errored has nothing to re-judge: a 400 that says so.
    response = Client().post(f"/api/v1/runs/{retry.pk}/retry-errors/",
                             HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")
    assert response.status_code == 400 and "nothing to re-judge" in response.json()["message"]
