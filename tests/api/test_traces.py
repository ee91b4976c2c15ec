from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from diagnosis.models import ContinuousMark, DiagnosisRun, Feedback, RunTrace
from tests.api.conftest import counted_insight, make_trace
from traces.models import Score, Span, Trace
from traces.services.lifecycle import traces_retention_enforce

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(issued_key):
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")


def test_trace_detail_lists_spans_with_capped_input(client, project, settings):
    settings.CLEAR_API_SPAN_IO_MAX_CHARS = 50
    trace = make_trace(project, spans=3, span_input={"prompt": "x" * 500})
    body = client.get(f"/api/v1/traces/{trace.trace_id.upper()}/").json()
    assert body["trace_id"] == trace.trace_id and body["span_count"] == 3 and not body["spans_truncated"]
    root, child = body["spans"][0], body["spans"][1]
    assert root["parent"] is None and child["parent"] == root["span_id"]
    assert {"span_id", "parent", "name", "kind", "node", "model", "input_tokens", "output_tokens",
            "status", "input", "output"} <= set(child)
    assert child["kind"] == "LLM" and child["node"] == "planner" and child["input_tokens"] == 10
    assert child["input_truncated"] and isinstance(child["input"], str) and len(child["input"]) == 50
    assert child["output"] == {"a": "answer"} and not child["output_truncated"]


def test_trace_detail_caps_the_span_count(client, project, settings):
    settings.CLEAR_API_TRACE_MAX_SPANS = 2
    trace = make_trace(project, spans=3)
    body = client.get(f"/api/v1/traces/{trace.trace_id}/").json()
    assert len(body["spans"]) == 2 and body["spans_truncated"]


def test_an_outcome_from_the_api_wins_over_later_spans_and_scores(client, project):
    from traces.normalize import SpanRecord
    from traces.services import spans_ingest, trace_finalize

    trace = make_trace(project, outcome="success")
    response = client.post(f"/api/v1/traces/{trace.trace_id}/outcome/", {"outcome": "failure", "score": 0.2},
                           format="json")
    assert response.status_code == 200, response.content
    assert response.json()["outcome"] == "failure" and response.json()["outcome_source"] == "api"
    # A late root span saying success and an outcome score do not override it.
    spans_ingest(project=project, spans=[SpanRecord(
        trace_id=trace.trace_id, span_id="a" * 16, parent_span_id=None, name="answer", kind="AGENT",
        start_time=trace.start_time, outcome="success", score=0.9)])
    Score.objects.create(project=project, trace=trace, name="outcome", value=1.0)
    trace_finalize(trace_pk=trace.pk)
    trace.refresh_from_db()
    assert (trace.outcome, trace.score, trace.outcome_source) == ("failure", 0.2, "api")

    only_score = client.post(f"/api/v1/traces/{trace.trace_id}/outcome/", {"score": 0.75}, format="json").json()
    assert (only_score["outcome"], only_score["score"]) == ("success", 0.75)
    for bad in ({}, {"score": 1.5}, {"outcome": "meh"}):
        response = client.post(f"/api/v1/traces/{trace.trace_id}/outcome/", bad, format="json")
        assert response.status_code == 400 and response.json()["code"] == "invalid", bad


def test_deleting_a_trace_cascades_and_updates_run_counts(client, project, mine):
    kept = make_trace(project)
    run = mine.run
    RunTrace.objects.create(run=run, trace=kept, status=RunTrace.Status.SKIPPED)
    DiagnosisRun.objects.filter(pk=run.pk).update(total_count=2, done_count=1, skipped_count=1, input_tokens=100)
    ContinuousMark.objects.create(trace=mine.trace, run=run, claim="00000000-0000-0000-0000-000000000001")
    gone = mine.trace

    response = client.delete(f"/api/v1/traces/{gone.trace_id}/")
    assert response.status_code == 204
    assert not Trace.objects.filter(pk=gone.pk).exists()
    for model in (Span, Score, Feedback, RunTrace, ContinuousMark):
        assert not model.objects.filter(trace_id=gone.pk).exists(), model
    run.refresh_from_db()
    assert (run.total_count, run.done_count, run.skipped_count) == (1, 0, 1)
    assert run.input_tokens == 100  # spend stays: it was paid
    assert Span.objects.filter(trace=kept).count() == 2
    assert client.get(f"/api/v1/traces/{gone.trace_id}/").status_code == 404
    assert client.delete(f"/api/v1/traces/{gone.trace_id}/").status_code == 404


def test_deleting_the_last_open_trace_of_a_run_finishes_it(project, django_capture_on_commit_callbacks):
    from traces.services.lifecycle import trace_delete

    done, waiting = make_trace(project), make_trace(project)
    run = DiagnosisRun.objects.create(project=project, status=DiagnosisRun.Status.RUNNING, total_count=2,
                                      done_count=1)
    RunTrace.objects.create(run=run, trace=done, status=RunTrace.Status.DONE)
    RunTrace.objects.create(run=run, trace=waiting, status=RunTrace.Status.PENDING)
    with django_capture_on_commit_callbacks(execute=True):
        trace_delete(project=project, trace=waiting)
    run.refresh_from_db()
    assert run.status == DiagnosisRun.Status.SUCCEEDED and (run.total_count, run.done_count) == (1, 1)


def test_retention_deletes_only_traces_older_than_the_period(project, outsider_project, settings):
    from traces.tasks import enforce_retention

    assert settings.CELERY_BEAT_SCHEDULE["traces-retention"]["task"] == enforce_retention.name
    now = timezone.now()
    project.retention_days = 30
    project.save()
    old = make_trace(project, start=now - timedelta(days=40))
    new = make_trace(project, start=now - timedelta(days=5))
    old_elsewhere = make_trace(outsider_project, start=now - timedelta(days=400))  # no retention there
    arrived_late = make_trace(project, start=now - timedelta(days=40))  # an old trace imported today
    Trace.objects.filter(pk__in=[old.pk, new.pk, old_elsewhere.pk]).update(
        first_received_at=now - timedelta(days=40))

    assert traces_retention_enforce(now=now, batch=1) == [{"project": project.slug, "days": 30, "traces": 1}]
    assert set(Trace.objects.values_list("pk", flat=True)) == {new.pk, old_elsewhere.pk, arrived_late.pk}
    assert not Span.objects.filter(trace_id=old.pk).exists()
    enforce_retention.delay()  # eager in tests: the beat task runs the same service
    assert Trace.objects.count() == 3


def test_deleting_a_trace_recounts_the_insights_that_counted_it(client, project):
    from diagnosis.models import InsightEvidence, InsightOccurrence, InsightStatement

    traces = [make_trace(project) for _ in range(3)]
    run, insight = counted_insight(project, traces)

    assert client.delete(f"/api/v1/traces/{traces[0].trace_id}/").status_code == 204
    occurrence = InsightOccurrence.objects.get(insight=insight, run=run)
    assert (occurrence.count, occurrence.trace_count, occurrence.judged) == (1, 1, 2)
    assert occurrence.frequency == pytest.approx(0.5) and occurrence.trace_ids == [traces[1].trace_id]
    insight.refresh_from_db()
    assert (insight.count, insight.trace_count, insight.frequency) == (1, 1, pytest.approx(0.5))
    assert InsightEvidence.objects.filter(insight=insight).count() == 1
    assert not InsightStatement.objects.filter(trace_id=traces[0].pk).exists()
