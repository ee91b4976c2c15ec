import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest
from django.core.cache import caches
from rest_framework.test import APIClient

from clear.projects.services import api_key_create
from clear.webhooks.models import Webhook, WebhookDelivery
from diagnosis.tickets.models import IssueTrackerConnection, Ticket
from diagnosis.models import (
    DiagnosisRun,
    Feedback,
    Insight,
    InsightEvidence,
    InsightOccurrence,
    InsightStatement,
    Rubric,
    RunTrace,
)
from evolution.models import EvolutionJob, EvolutionTarget, ReleaseRollback
from evolution.services.workspace import artifact_store
from traces.models import Score, Span, Trace

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)


def make_trace(project, *, trace_id: str | None = None, start: datetime = T0, release: str = "r1",
               outcome: str | None = None, node: str = "planner", spans: int = 2, task_id: str = "",
               span_input=None) -> Trace:
    trace = Trace.objects.create(
        project=project, trace_id=trace_id or secrets.token_hex(16), name="answer", start_time=start,
        end_time=start + timedelta(seconds=spans), release=release, outcome=outcome,
        outcome_source="root_span" if outcome else "", task_id=task_id, span_count=spans, root_span_id="a" * 16,
    )
    for index in range(spans):
        Span.objects.create(
            project=project, trace=trace, trace_day=trace.first_received_day,
            span_id=f"{index + 10:016x}" if index else "a" * 16,
            parent_span_id="" if index == 0 else "a" * 16, name=f"step {index}",
            kind=Span.Kind.AGENT if index == 0 else Span.Kind.LLM, node=node, model="gpt-test",
            input=span_input if span_input is not None else {"q": f"question {index}"}, output={"a": "answer"},
            status="ok", start_time=start + timedelta(seconds=index), end_time=start + timedelta(seconds=index + 1),
            input_tokens=10, output_tokens=5,
        )
    return trace


@dataclass
class ProjectData:
    """One object of every kind the API exposes, in one project."""

    project: object
    key: object
    trace: Trace
    run: DiagnosisRun
    feedback: Feedback
    rubric: Rubric
    webhook: object
    delivery: WebhookDelivery
    insight: Insight
    statement: InsightStatement
    evidence: InsightEvidence
    ticket: Ticket
    target: EvolutionTarget
    job: EvolutionJob
    artifact: object
    rollback: ReleaseRollback
    marker: str  # in every name and title of this project's objects: another project's reads must not show it

    def client(self) -> APIClient:
        return APIClient(HTTP_AUTHORIZATION=f"Bearer {self.key.secret}")


def make_project_data(project, user) -> ProjectData:
    marker = f"mark{secrets.token_hex(6)}"
    key = api_key_create(project=project, name="api tests", created_by=user)
    trace = make_trace(project)
    Score.objects.create(project=project, trace=trace, name="quality", value=0.3)
    run = DiagnosisRun.objects.create(project=project, status=DiagnosisRun.Status.SUCCEEDED, judges=["rules"],
                                      total_count=1, done_count=1, insights_status="done",
                                      insights_summary={"judged": 1})
    RunTrace.objects.create(run=run, trace=trace, status=RunTrace.Status.DONE)
    feedback = Feedback.objects.create(run=run, project=project, trace=trace, judge="rule.span_error",
                                       judge_kind="rule", verdict=Feedback.Verdict.FAIL, target_span_id="a" * 16)
    rubric = Rubric.objects.create(project=project, name=f"never refund {marker}", kind=Rubric.Kind.TOOL_NEVER,
                                   config={"tool": "refund"})
    # Written past webhook_create's check, like a webhook saved before URLs were checked: a ping (the schemathesis
    # tests send some) is refused at delivery and connects nowhere.
    webhook = Webhook.objects.create(project=project, url="http://127.0.0.1:9/hook", events=["diagnosis_run.finished"],
                                     secret="whsec_" + secrets.token_urlsafe(32), description=marker)
    delivery = WebhookDelivery.objects.create(webhook=webhook, project=project, event="diagnosis_run.finished",
                                              payload={"event": "diagnosis_run.finished", "data": marker})
    insight = Insight.objects.create(project=project, level=Insight.Level.NODE, node="planner",
                                     title=f"skips the lookup {marker}", count=1, trace_count=1, frequency=1.0,
                                     last_seen=T0)
    statement = InsightStatement.objects.create(project=project, run=run, feedback=feedback, trace=trace,
                                                kind="issue", text="skipped the lookup", node="planner",
                                                judge="rule.span_error", node_insight=insight)
    evidence = InsightEvidence.objects.create(insight=insight, run=run, trace=trace, span_id="a" * 16,
                                              feedback=feedback, statement=statement, statement_text=statement.text,
                                              quote="answer")
    InsightOccurrence.objects.create(insight=insight, run=run, count=1, trace_count=1, judged=1, frequency=1.0,
                                     trace_ids=[trace.trace_id], releases={"r1": 1})
    ticket = Ticket.objects.create(project=project, insight=insight, fingerprint=marker, title=f"ticket {marker}",
                                   level="node", node="planner", severity="medium")
    IssueTrackerConnection.objects.create(project=project, repository=f"acme/{marker}", token="ghp_" + marker)
    target = EvolutionTarget.objects.create(project=project, name=f"agent {marker}", source="/nonexistent/agent",
                                            config={"editable_paths": ["agent/**"],
                                                    "trial_command": "python run.py --task {task_id} --out {out}",
                                                    "grader_command": "python grade.py --out {out}"})
    job = EvolutionJob.objects.create(project=project, target=target, insight=insight, ticket=ticket,
                                      backend_name="scripted", backend_config={"script": {"entries": []}})
    artifact = artifact_store(job=job, kind="plan", name="plan.json", content={"plan": marker})
    rollback = ReleaseRollback.objects.create(target=target, actor=marker, status=ReleaseRollback.Status.FAILED,
                                              detail=f"refused {marker}")
    return ProjectData(project=project, key=key, trace=trace, run=run, feedback=feedback, rubric=rubric,
                       webhook=webhook, delivery=delivery, insight=insight, statement=statement, evidence=evidence,
                       ticket=ticket, target=target, job=job, artifact=artifact, rollback=rollback,
                       marker=marker)


@pytest.fixture(autouse=True)
def _evolution_dir(tmp_path, settings):
    settings.CLEAR_EVOLUTION_DIR = tmp_path / "evolution"  # where the evolution artifacts above are stored


@pytest.fixture(autouse=True)
def _fresh_rate_limits():
    caches["api_throttle"].clear()
    yield
    caches["api_throttle"].clear()


@pytest.fixture
def mine(project, owner):
    return make_project_data(project, owner)


@pytest.fixture
def theirs(outsider_project, outsider):
    return make_project_data(outsider_project, outsider)


def counted_insight(project, traces: list[Trace]):
    """A finished run over `traces` whose insight counted the first two of them (statements, evidence, occurrence):
    2 of 3 judged traces. Returns (run, insight)."""
    run = DiagnosisRun.objects.create(project=project, status=DiagnosisRun.Status.SUCCEEDED, total_count=3,
                                      done_count=3)
    insight = Insight.objects.create(project=project, level=Insight.Level.NODE, node="planner",
                                     title="plans skip the lookup", count=2, trace_count=2, frequency=2 / 3)
    for trace in traces:
        RunTrace.objects.create(run=run, trace=trace, status=RunTrace.Status.DONE)
    for trace in traces[:2]:
        feedback = Feedback.objects.create(run=run, project=project, trace=trace, judge="llm.step",
                                           judge_kind="llm", verdict=Feedback.Verdict.FAIL, target_span_id="a" * 16)
        statement = InsightStatement.objects.create(
            project=project, run=run, feedback=feedback, trace=trace, kind="issue", text="skipped the lookup",
            node="planner", judge="llm.step", node_insight=insight)
        InsightEvidence.objects.create(insight=insight, run=run, trace=trace, span_id="a" * 16, feedback=feedback,
                                       statement=statement, statement_text=statement.text)
    InsightOccurrence.objects.create(insight=insight, run=run, count=2, trace_count=2, judged=3, frequency=2 / 3,
                                     trace_ids=sorted(t.trace_id for t in traces[:2]))
    return run, insight
