"""On a real Celery worker: a run that finishes queues `diagnosis.build_insights`, which builds the insights once."""

import time

import pytest

from diagnosis.models import DiagnosisRun, Insight
from diagnosis.services import diagnosis_run_start, rubric_create
from tests.diagnosis.support import support_desk_ingest

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_run_on_the_worker_builds_its_insights(project, settings, celery_worker):
    settings.CLEAR_JUDGE_MODEL = ""
    support_desk_ingest(project=project, bugs="all", release="r1")
    rubric_create(project=project, name="mediator keeps ids", kind="coverage",
                  config={"path": ["$.order_id", "$.tracking_number", "$.invoice_id", "$.articles[*].id"],
                          "sources": {"kind": "TOOL"}, "target": {"node": "mediator", "kind": "LLM"}})
    run = diagnosis_run_start(project=project, release="r1")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.insights_status in ("done", "failed"):
            break
        time.sleep(0.2)
    assert run.status == "succeeded" and run.insights_status == "done", (run.status, run.insights_error)
    assert run.insights_summary["statements"] > 0 and run.insights_summary["new"] > 0
    mediator = Insight.objects.get(project=project, level="node", node="mediator", is_other=False)
    assert mediator.trace_count == 4
    assert DiagnosisRun.objects.get(pk=run.pk).insights_started_at is not None
