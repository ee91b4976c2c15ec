"""No database lock is held while a model thinks (issue 25, item 1): the fake OpenAI-compatible server holds an
insight-naming request open, and a trace posted meanwhile is stored at once; on SQLite (one writer at a time) an
insights build that named clusters inside its transaction made ingestion wait out the busy timeout and answer 500
"database is locked". The same for a continuous run's full refresh (issue 27, item 4: services/insights_refresh.py
re-clusters through the same build). Runs in both passes of scripts/test.sh."""

from __future__ import annotations

import json
import threading
import time

import pytest
from django.db import connection
from django.test import Client

from diagnosis.models import Insight
from diagnosis.services import diagnosis_run_execute, diagnosis_run_start, rubric_create
from diagnosis.services.insights import insights_build
from diagnosis.services.insights_refresh import insights_refresh
from diagnosis.insights.naming import NAMING_SYSTEM  # after diagnosis.services: imported first, naming.py's
# import of diagnosis.services.cache runs diagnosis/services/__init__.py, which imports naming.py half-initialised
from tests.diagnosis.insights.conftest import desk_rubrics  # noqa: F401 - a fixture of `continuous`
from tests.diagnosis.support import support_desk_ingest
from tests.diagnosis.test_insight_refresh import DESK, _run, _tick, continuous, sent  # noqa: F401 - fixtures
from tests.traces.otlp_helpers import agent_run_spans, to_json
from traces.models import Span, Trace

pytestmark = pytest.mark.django_db(transaction=True)  # the build's thread must see the run, and commit on its own

MODEL = "openai/gpt-4o-mini"
WAIT_S = 60.0
# "At once": well under SQLite's busy timeout (30 s, a 500 after it) and the model call's (CLEAR_JUDGE_TIMEOUT_SECONDS,
# 60 s: on Postgres a POST waiting on the project's row lock gets through when the held call times out).
AT_ONCE_S = 15.0


class HeldNamer:
    """Names every cluster; the first naming request is held open until `release` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, request: dict) -> dict:
        assert request["messages"][0]["content"] == NAMING_SYSTEM
        payload = json.loads(request["messages"][1]["content"])
        self.calls += 1
        name = {"title": f"Model named: {payload['medoid'][:50]}", "description": "A recurring problem.",
                "root_cause": "The planner prompt lacks the routing rule.", "recommendation": "Add the rule."}
        return {"content": json.dumps(name), **({"hold": self.release} if self.calls == 1 else {})}


def _until(condition, *, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.fixture
def finished_run(project, settings):
    """A finished run with failing feedback to name: BUGS.md's misroute found by a rule rubric, no model."""
    settings.CLEAR_JUDGE_MODEL = ""
    rubric_create(project=project, name="Refund requests are routed to billing", kind="regex",
                  config={"pattern": r'"intent":\s*"refund"[^}]*"worker":\s*"orders_worker"', "expect": "absent",
                          "spans": {"node": "planner", "kind": "LLM"}})
    support_desk_ingest(project=project, bugs="all", release="r1")
    run = diagnosis_run_execute(run=diagnosis_run_start(project=project, release="r1", enqueue=False))
    assert run.status == "succeeded", run.failure_message
    return run


def _model_at(settings, fake_llm) -> HeldNamer:
    """Names from the fake server from now on (the judging before used rule rubrics only); the first is held."""
    settings.CLEAR_JUDGE_MODEL = MODEL
    settings.CLEAR_JUDGE_API_BASE = fake_llm.api_base
    settings.CLEAR_JUDGE_API_KEY = "test-key"
    namer = HeldNamer()
    fake_llm.script(default=namer)
    return namer


def _while_naming_is_held(work, *, namer: HeldNamer, fake_llm, project, issued_key) -> dict:
    """Run `work` in a thread; while its first naming request is held, POST a trace through OTLP: it must be stored
    at once (200, its spans there). Then let the model answer; returns what `work` returned."""
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["result"] = work()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            outcome["error"] = exc
        finally:
            connection.close()  # this thread's own connection: the test database is dropped after the test

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    try:
        assert _until(lambda: fake_llm.held == 1, seconds=WAIT_S), (fake_llm.call_count, outcome)

        started = time.monotonic()
        body = to_json(agent_run_spans(task_id="while-naming"))
        response = Client(raise_request_exception=False).post(  # a 500 is asserted on, not raised
            "/v1/traces", data=body, content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")
        seconds = time.monotonic() - started
        assert response.status_code == 200, (response.status_code, response.content[:300], seconds)
        assert seconds < AT_ONCE_S, seconds
        trace = Trace.objects.get(project=project, task_id="while-naming")
        assert Span.objects.filter(trace=trace).count() == 4
        assert fake_llm.held == 1 and worker.is_alive()  # the model is still "thinking"
    finally:
        namer.release.set()
        worker.join(timeout=WAIT_S)
    assert not worker.is_alive() and "error" not in outcome, outcome
    return outcome["result"]


def _named_by_the_model(project, summary: dict, namer: HeldNamer) -> None:
    assert summary["naming"]["calls"] >= 1 and summary["naming"]["failed"] == 0
    named = Insight.objects.filter(project=project, is_other=False, naming_source="llm")
    assert named.filter(title__startswith="Model named: ").count() == namer.calls >= 1


def test_a_trace_posted_while_a_naming_request_is_held_is_stored_at_once(finished_run, project, issued_key,
                                                                         settings, fake_llm):
    namer = _model_at(settings, fake_llm)
    summary = _while_naming_is_held(lambda: insights_build(run=finished_run), namer=namer, fake_llm=fake_llm,
                                    project=project, issued_key=issued_key)
    _named_by_the_model(project, summary, namer)


def test_a_trace_posted_while_a_continuous_refresh_names_is_stored_at_once(project, issued_key, settings, fake_llm,
                                                                          continuous, sent,  # noqa: F811
                                                                          django_capture_on_commit_callbacks):
    """Issue 27, item 4: the first refresh of a continuous run is a full re-clustering, named by the model before the
    project's lock is taken; its judging (rule rubrics, CLEAR_JUDGE_MODEL="") calls no model."""
    support_desk_ingest(project=project, bugs="all", task_ids=DESK, seed=0)
    _tick(django_capture_on_commit_callbacks, 31)  # judges the traces and queues the run's first refresh
    run = _run(project)
    assert sent == [run.pk] and run.done_count == len(DESK) and run.insights_status == "queued"
    assert fake_llm.call_count == 0

    namer = _model_at(settings, fake_llm)
    summary = _while_naming_is_held(lambda: insights_refresh(run_id=run.pk), namer=namer, fake_llm=fake_llm,
                                    project=project, issued_key=issued_key)
    assert summary["refresh"]["kind"] == "full" and _run(project).insights_status == "done"
    _named_by_the_model(project, summary, namer)
