"""Issue 40, point 3: a run's page names each rubric judge by the rubric's name, not `rubric.<id>`, and renders the
contrastive findings' `code` spans as code instead of showing their backticks."""

from __future__ import annotations

import re

import pytest

from diagnosis.models import Rubric
from diagnosis.services import diagnosis_run_execute, diagnosis_run_start
from tests.frontend.conftest import client_for
from tests.frontend.test_truthful_job_page import _section

pytestmark = pytest.mark.django_db


def _run_page(project, user, run) -> str:
    response = client_for(user).get(f"/p/{project.slug}/runs/{run.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def test_the_run_page_names_rubrics_by_their_names(seeded, owner):
    project = seeded.project
    rubrics = {r.judge_name: r.name for r in Rubric.objects.filter(project=project)}
    html = _run_page(project, owner, seeded.run)
    by_judge, failing = _section(html, "failing-by-judge"), _section(html, "run-failing")
    # The seed run's r1 carries the misroute and the mediator race, which two of its rubrics catch.
    assert "Refund requests are routed to billing" in by_judge, by_judge
    assert "The mediator keeps every fact a tool returned" in by_judge, by_judge
    assert "Refund requests are routed to billing" in failing
    for text in (by_judge, failing):
        assert not re.search(r"rubric\.\d", text), text
    # The judge id stays at hand, as the tooltip, for `clearctl`/API filters that take it.
    routing = next(judge for judge, name in rubrics.items() if name == "Refund requests are routed to billing")
    assert f'title="{routing}"' in html


def test_the_contrastive_findings_render_code_spans(seeded, owner):
    project = seeded.project
    run = diagnosis_run_execute(run=diagnosis_run_start(project=project, enqueue=False, name="contrast",
                                                        judges=["contrastive"]))
    assert run.status == "succeeded", run.failure_message
    report = run.config["contrastive"]
    statements = [f["statement"] for f in report["findings"] or report["suggestive"]]
    assert any("`" in s for s in statements), statements  # the case the page has to render
    html = _run_page(project, owner, run)
    table = re.search(r'data-testid="contrastive-(?:findings|suggestive)".*?</table>', html, re.S).group(0)
    assert "`" not in table, table
    assert "<code>" in table
    code = re.search(r"`([^`]+)`", next(s for s in statements if "`" in s)).group(1)
    assert f"<code>{code}</code>" in table, table


def test_the_trace_page_names_rubrics_by_their_names(seeded, owner):
    """The review of issue 40: the trace page still listed `rubric.<id>` in its failing verdicts and evidence."""
    from diagnosis.models import Feedback

    project = seeded.project
    row = (Feedback.objects.filter(run=seeded.run, judge__startswith="rubric.", verdict=Feedback.Verdict.FAIL)
           .select_related("trace").first())
    assert row is not None
    name = Rubric.objects.get(project=project, pk=int(row.judge.split(".", 1)[1])).name
    response = client_for(owner).get(f"/p/{project.slug}/traces/{row.trace.trace_id}/?run={seeded.run.pk}")
    assert response.status_code == 200
    html = response.content.decode()
    assert name in html
    assert not re.search(r">rubric\.\d+<", html), re.search(r".{80}>rubric\.\d+<.{20}", html, re.S)
