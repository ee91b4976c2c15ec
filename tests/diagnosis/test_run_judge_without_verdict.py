"""Issue 43.4: a requested judge that produced no verdict fails the run for CI, even when other judges gave
verdicts: `diagnose` and `clearctl runs start --wait` exit non-zero, the run page and the API name the judge, and
the other judges' feedback is kept. A reply that echoes the prompt is never a verdict nor a statement."""

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from diagnosis.insights.statements import statements_collect
from diagnosis.models import Feedback
from tests.diagnosis.llm.helpers import data_block, judge_of, judge_reply
from tests.diagnosis.test_run_status_honest import MODEL, REFUSED, _run, llm_project  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db

ECHO_ISSUE = {"title": "short label of one problem", "detail": "what went wrong and why it matters",
              "severity": "medium", "evidence": []}


def _step_echoes(request):
    if judge_of(request) != "llm.step":
        return judge_reply(request)
    steps = [{"span_id": s["span_id"], "critique": "The step looked up the order.", "score": 0.25,
              "verdict": "fail", "issues": [ECHO_ISSUE]} for s in data_block(request)["steps"]]
    return json.dumps({"steps": steps})


def test_a_judge_whose_every_call_echoes_fails_the_run_and_makes_no_statement(llm_project, fake_llm, issued_key,
                                                                              teammate):
    fake_llm.script(default=_step_echoes)
    run = _run(llm_project, ["rules", "llm"])

    assert run.status == "failed"
    assert run.failure_message.startswith("llm.step produced no verdict: ")
    assert "invalid_output:echo" in run.failure_message and "llm.trace" not in run.failure_message
    assert "The other judges' verdicts are kept" in run.failure_message
    # the other judges' verdicts are kept
    assert Feedback.objects.filter(run=run, judge="llm.trace", status="ok").count() == 2
    assert Feedback.objects.filter(run=run, judge_kind="rule", status="ok").exists()
    assert not Feedback.objects.filter(run=run, judge="llm.step").exclude(status="error").exists()
    # no statement anywhere copies the prompt
    texts = [draft.text.lower() for draft in statements_collect(run=run)]
    assert texts and not [t for t in texts if "short label" in t or "what went wrong and why" in t]

    body = Client().get(f"/api/v1/runs/{run.pk}/", HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}").json()
    assert body["status"] == "failed"
    [silent] = body["summary"]["judges_without_verdict"]
    assert silent["judge"] == "llm.step" and silent["errors"] == silent["calls"] > 0
    assert silent["causes"] == [{"cause": "invalid_output:echo", "count": silent["errors"]}]

    client = Client()
    client.force_login(teammate)
    page = client.get(f"/p/{llm_project.slug}/runs/{run.pk}/").content.decode()
    assert 'data-testid="judges-without-verdict"' in page and "llm.step produced no verdict" in page


def test_diagnose_exits_non_zero_when_the_llm_judges_give_nothing_beside_rule_verdicts(llm_project, fake_llm):
    fake_llm.script(default=REFUSED)
    with pytest.raises(CommandError, match="llm.step produced no verdict: .* model calls failed") as raised:
        call_command("diagnose", "--project", llm_project.name, "--judges", "rules,llm", "--model", MODEL,
                     "--inline", stdout=io.StringIO(), stderr=io.StringIO())
    assert "llm.trace produced no verdict" in str(raised.value)
    assert "provider_error" in str(raised.value)


def test_clearctl_wait_exits_non_zero_for_such_a_run(llm_project, fake_llm, issued_key, monkeypatch):
    from clear import cli

    fake_llm.script(default=REFUSED)
    run = _run(llm_project, ["rules", "llm"])
    assert run.status == "failed"
    body = Client().get(f"/api/v1/runs/{run.pk}/", HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}").json()
    assert cli._run_exit_code(body) == 1
    assert {j["judge"] for j in body["summary"]["judges_without_verdict"]} == {"llm.step", "llm.trace"}
