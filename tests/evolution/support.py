"""Helpers for the evolution tests: failing traces stored through ingestion, an insight holding them, scripts."""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from diagnosis.models import DiagnosisRun, Feedback, Insight, InsightStatement
from tests.diagnosis.support import ingest_otlp
from traces.models import Trace


def failing_traces_ingest(*, project, tasks: list[tuple[str, int]], outcome: str = "failure",
                          node: str = "router") -> list[Trace]:
    """One trace per (task_id, seed) with the root attributes evolution reads (clear.task.id, clear.seed)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "router-agent", "service.version": "v1"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests.evolution")
    for task_id, seed in tasks:
        with tracer.start_as_current_span("handle_ticket") as root:
            root.set_attribute("clear.task.id", task_id)
            root.set_attribute("clear.seed", seed)
            root.set_attribute("clear.outcome", outcome)
            with tracer.start_as_current_span(f"invoke_agent {node}") as agent:
                agent.set_attribute("gen_ai.operation.name", "invoke_agent")
                agent.set_attribute("gen_ai.agent.name", node)
    body = encode_spans(exporter.get_finished_spans()).SerializeToString()
    trace_ids = ingest_otlp(project=project, body=body, content_type="application/x-protobuf")
    return list(Trace.objects.filter(project=project, trace_id__in=trace_ids))


def insight_for_traces(*, project, traces: list[Trace], title: str, node: str = "router") -> Insight:
    """An insight whose statements cite these traces, as a diagnosis run's clustering would leave it."""
    run = DiagnosisRun.objects.create(project=project, name="evolution fixture", status="succeeded")
    insight = Insight.objects.create(project=project, level=Insight.Level.NODE, node=node, title=title,
                                     description=f"{title} (fixture)", root_cause="", trace_count=len(traces))
    for trace in traces:
        feedback = Feedback.objects.create(run=run, project=project, trace=trace, judge="rule.fixture",
                                           judge_kind="rule", verdict="fail", score=0.0, critique=title)
        InsightStatement.objects.create(project=project, run=run, feedback=feedback, trace=trace, kind="issue",
                                        text=title, node=node, judge="rule.fixture", node_insight=insight)
    return insight


def script_write(path: Path, entries: list[dict], defaults: dict | None = None) -> Path:
    path.write_text(json.dumps({"entries": entries, "defaults": defaults or {}}, indent=2))
    return path


LOCATOR_OUTPUT = {"clusters": [{"id": "c1", "title": "Refunds go to billing", "task_ids": [],
                                "root_cause": "route() checks 'refund' in the billing branch",
                                "evidence": [{"file": "router/agent.py", "line": 6, "quote": "or \"refund\" in text"}],
                                "confidence": 0.9}], "not_reproduced_task_ids": [], "notes": ""}
PLAN_OUTPUT = {"changes": [{"file": "router/agent.py", "symbol": "route",
                            "change": "route refund requests to the refunds queue before billing",
                            "rationale": "refund is a separate queue"}],
               "tests_to_add": [], "per_task_impact": [], "risks": [], "dependency_changes": []}
APPROVE_PLAN = {"verdict": "APPROVE", "issues": []}
APPROVE_CODE = {"verdict": "APPROVE", "issues": [], "mutation_test": {}}
DONE = {"status": "DONE", "summary": "edited router/agent.py", "deviations": []}


def happy_entries(edit: dict, *, iteration="*") -> list[dict]:
    return [
        {"role": "locator", "iteration": iteration, "round": "*", "output": LOCATOR_OUTPUT},
        {"role": "planner", "iteration": iteration, "round": "*", "output": PLAN_OUTPUT},
        {"role": "plan_reviewer", "iteration": iteration, "round": "*", "output": APPROVE_PLAN},
        {"role": "implementer", "iteration": iteration, "round": "*", "output": DONE, "edits": [edit]},
        {"role": "code_reviewer", "iteration": iteration, "round": "*", "output": APPROVE_CODE},
    ]


def prompts(job) -> list[dict]:
    """Every request the scripted backend recorded for a job (its prompts.jsonl, archived as log artifacts)."""
    from evolution.models import Artifact
    from evolution.services.workspace import artifact_read

    lines = []
    for artifact in Artifact.objects.filter(job=job, kind="log", name__endswith="prompts.jsonl").order_by("pk"):
        text = artifact_read(artifact=artifact).decode()
        lines += [json.loads(line) for line in text.splitlines() if line.strip()]
    return lines


# A marker in a file only root may read (the `secret_file` fixture): found in anything a key holder can
# download, it proves a read with the worker's rights.
SECRET = "ROOT-ONLY-SECRET-7d1f"


def target_register(client, body: dict, *, path: str = "/api/v1/evolution/targets/"):
    """POST a registration through the API and run the clone it sends after commit (eagerly, in this process):
    the POST's response (201 `cloning`, or a 400) and the target as GET reads it afterwards (None when refused)."""
    from django.test import TestCase

    with TestCase.captureOnCommitCallbacks(execute=True):
        response = client.post(path, body, format="json")
    if response.status_code != 201:
        return response, None
    return response, client.get(f"{path}{response.json()['id']}/").json()


def form_post(client, url: str, data: dict):
    """POST a web form, running what it sends after commit (a target's clone) eagerly, in this process."""
    from django.test import TestCase

    with TestCase.captureOnCommitCallbacks(execute=True):
        return client.post(url, data)
