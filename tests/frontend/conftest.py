"""Seed data for the page tests: the example support desk's traces, ingested in-process, judged by rule judges and
rubrics; and a trace whose content is hostile HTML."""

from __future__ import annotations

import fcntl
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test import Client, override_settings

from clear.projects.models import Project
from clear.projects.services import user_get_or_create
from diagnosis.models import DiagnosisRun
from diagnosis.services import diagnosis_run_execute, diagnosis_run_start, rubric_create
from tests.conftest import project_make
from tests.diagnosis.support import ingest_otlp, support_desk_ingest

REPO_ROOT = Path(__file__).resolve().parents[2]
AXE_PATH = REPO_ROOT / "var" / "node_modules" / "axe-core" / "axe.min.js"


@dataclass
class Seeded:
    project: Project
    run: DiagnosisRun


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def seed_rubrics(project):
    return [
        rubric_create(
            project=project, name="The mediator keeps every fact a tool returned", kind="coverage",
            config={"path": ["$.order_id", "$.tracking_number", "$.invoice_id", "$.articles[*].id"],
                    "sources": {"kind": "TOOL"}, "target": {"node": "mediator", "kind": "LLM"}},
        ),
        rubric_create(
            project=project, name="Refund tickets are not answered from the order records", kind="tool_never",
            config={"tool": "order_lookup", "when": {"goal_regex": r"\brefund"}}, node="orders_worker",
        ),
        # As in the demo: misroute then shows at planner and orders_worker in the same traces, one system insight.
        rubric_create(
            project=project, name="Refund requests are routed to billing", kind="regex",
            config={"pattern": r'"intent":\s*"refund"[^}]*"worker":\s*"orders_worker"', "expect": "absent",
                    "spans": {"node": "planner", "kind": "LLM"}},
        ),
    ]


def seed_project(project, *, judge: bool = True) -> Seeded:
    """Release r1 with the planted bugs and r2 without (another virtual day), rubrics, one inline run over r1."""
    support_desk_ingest(project=project, bugs="all", release="r1", seed=0)
    support_desk_ingest(project=project, bugs="none", release="r2", seed=1)
    seed_rubrics(project)
    run = None
    if judge:
        run = diagnosis_run_start(project=project, release="r1", enqueue=False, name="seed run",
                                  judges=["rules", "rubrics"])
        run = diagnosis_run_execute(run=run)
    return Seeded(project=project, run=run)


# ---- the seeded project, built once per module and worker ------------------------------------------------------
# Seeding (two releases of the support desk ingested, rubrics, a judged run) costs seconds, and a hundred page tests
# only read it or change it inside their own transaction. So each module's seed is made once per xdist worker in an
# outer transaction that stays open while the module's tests run: a test's own transaction (pytest-django's `db`)
# is a savepoint in it, rolled back after the test; the outer one is rolled back when the module is done. A test
# that needs real commits (transactional_db, a live server, a Celery worker) cannot see uncommitted rows: it seeds
# its own, and the outer transaction is rolled back before it runs.


@dataclass
class _SharedSeed:
    connection: BaseDatabaseWrapper
    atomic: transaction.Atomic
    project_pk: int | None = None
    run_pk: int | None = None


_shared_seeds: dict[str, _SharedSeed] = {}  # module name -> its open shared seed on this worker


def _is_transactional(item) -> bool:
    marker = item.get_closest_marker("django_db")
    return bool((marker and (marker.kwargs.get("transaction") or marker.kwargs.get("serialized_rollback")))
                or {"transactional_db", "live_server", "celery_worker"} & set(item.fixturenames))


def _shared_seed_drop(module: str) -> None:
    shared = _shared_seeds.pop(module, None)
    if shared is None:
        return
    # On the connection the seed was opened on: once a test has started Playwright (its sync API runs on greenlets),
    # this context may have another.
    current = connections[DEFAULT_DB_ALIAS]
    connections[DEFAULT_DB_ALIAS] = shared.connection
    try:
        transaction.set_rollback(True)
        shared.atomic.__exit__(None, None, None)
    finally:
        connections[DEFAULT_DB_ALIAS] = current


@pytest.fixture(scope="module")
def _seeded_module(request, django_db_setup, django_db_blocker):
    module = request.module.__name__
    if _is_transactional(request._pyfuncitem):  # the test that asked first (a module-scoped request's test)
        yield None  # commits: it seeds its own
        return
    with django_db_blocker.unblock():
        atomic = transaction.atomic()
        atomic.__enter__()
        shared = _shared_seeds[module] = _SharedSeed(connection=connections[DEFAULT_DB_ALIAS], atomic=atomic)
        try:
            with override_settings(CLEAR_JUDGE_MODEL=""):
                owner = user_get_or_create(email="alice@example.com", password="correct horse battery staple")[0]
                teammate = user_get_or_create(email="bob@example.com", password="correct horse battery staple")[0]
                seed = seed_project(project_make(owner=owner, teammate=teammate))
            shared.project_pk, shared.run_pk = seed.project.pk, seed.run.pk
        except BaseException:
            _shared_seed_drop(module)
            raise
    yield shared
    with django_db_blocker.unblock():
        _shared_seed_drop(module)


@pytest.fixture(autouse=True)
def _shared_seed_released_for_commits(request, django_db_blocker):
    """A test that commits must not run inside a module's open shared seed: roll it back first (the module's later
    tests then seed their own)."""
    if _shared_seeds and _is_transactional(request.node):
        with django_db_blocker.unblock():
            for module in list(_shared_seeds):
                _shared_seed_drop(module)
    yield


def _shared_seed(request) -> _SharedSeed | None:
    shared = _shared_seeds.get(request.module.__name__)
    return shared if shared is not None and "seeded" in request.fixturenames else None


@pytest.fixture
def project(request, owner, teammate):
    """The module's shared seeded project for a test that asks for `seeded`, else a fresh one (tests/conftest.py)."""
    shared = _shared_seed(request)
    if shared is not None:
        return Project.objects.get(pk=shared.project_pk)
    if request.module.__name__ in _shared_seeds:  # beside the module's seeded project (project names are unique)
        return project_make(owner=owner, teammate=teammate, name="Alice's unseeded agent")
    return project_make(owner=owner, teammate=teammate)


@pytest.fixture
def seeded(request, _seeded_module, project, settings) -> Seeded:
    settings.CLEAR_JUDGE_MODEL = ""
    shared = _shared_seed(request)
    if shared is not None and shared.project_pk == project.pk:
        return Seeded(project=project, run=DiagnosisRun.objects.get(pk=shared.run_pk))
    return seed_project(project)


# ---- hostile content --------------------------------------------------------------------------------------------

PAYLOADS = {
    "script": '<script>window.__pwned = 1; document.title = "pwned";</script>',
    "img": '<img src="x" onerror="window.__pwned = 2; document.title = \'pwned\'">',
    "js_link": '[click me](javascript:window.__pwned=3) <a href="javascript:window.__pwned=4">click</a>',
    "markdown_html": ('**bold** <iframe srcdoc="<script>parent.__pwned=5</script>"></iframe> '
                      '<svg onload="window.__pwned=6"></svg>'),
}
EVIL_TRACE_ID = "e" * 31 + "1"
EVIL_AGENT = '<img src=x onerror="window.__pwned=7">'


def _attr(key: str, value: str) -> dict:
    return {"key": key, "value": {"stringValue": value}}


def evil_otlp_body(*, trace_id: str = EVIL_TRACE_ID) -> bytes:
    start = 1_736_000_000_000_000_000
    root, child, tool = "a" * 15 + "1", "a" * 15 + "2", "a" * 15 + "3"
    spans = [
        {"traceId": trace_id, "spanId": root, "name": "invoke_agent " + PAYLOADS["script"], "kind": 1,
         "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 3_000_000_000),
         "attributes": [_attr("gen_ai.operation.name", "invoke_agent"), _attr("gen_ai.agent.name", "desk"),
                        _attr("input.value", PAYLOADS["script"] + "\n" + PAYLOADS["markdown_html"]),
                        _attr("output.value", PAYLOADS["js_link"]), _attr("clear.outcome", "failure"),
                        _attr("clear.task_id", "<b>task</b>" + PAYLOADS["img"])]},
        {"traceId": trace_id, "spanId": child, "parentSpanId": root, "name": "invoke_agent evil", "kind": 1,
         "startTimeUnixNano": str(start + 100_000_000), "endTimeUnixNano": str(start + 2_000_000_000),
         "attributes": [_attr("gen_ai.operation.name", "invoke_agent"), _attr("gen_ai.agent.name", EVIL_AGENT),
                        _attr("input.value", json.dumps({"html": PAYLOADS["img"], "md": PAYLOADS["markdown_html"]})),
                        _attr("output.value", PAYLOADS["img"])]},
        {"traceId": trace_id, "spanId": tool, "parentSpanId": child, "name": "execute_tool " + PAYLOADS["img"],
         "kind": 1, "startTimeUnixNano": str(start + 200_000_000), "endTimeUnixNano": str(start + 900_000_000),
         "attributes": [_attr("gen_ai.operation.name", "execute_tool"), _attr("gen_ai.tool.name", "lookup"),
                        _attr("input.value", PAYLOADS["js_link"]),
                        _attr("output.value", "Error: " + PAYLOADS["script"])],
         "status": {"code": 2, "message": "ValueError: " + PAYLOADS["img"] + " " + PAYLOADS["script"]}},
    ]
    document = {"resourceSpans": [{"resource": {"attributes": [_attr("service.name", "evil-agent")]},
                                   "scopeSpans": [{"scope": {"name": "test"}, "spans": spans}]}]}
    return json.dumps(document).encode()


@pytest.fixture
def evil_trace(project, settings):
    settings.CLEAR_JUDGE_MODEL = ""
    ingest_otlp(project=project, body=evil_otlp_body(), content_type="application/json")
    run = diagnosis_run_execute(run=diagnosis_run_start(project=project, enqueue=False, judges=["rules"]))
    return run


# ---- axe-core, served from var/ ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def axe_path() -> Path:
    """axe-core installed locally with npm (once): the browser gets it from disk, never from a CDN."""
    if AXE_PATH.exists():
        return AXE_PATH
    (REPO_ROOT / "var").mkdir(exist_ok=True)
    # pytest-xdist workers may all get here at once: one installs, the others wait for it.
    with open(REPO_ROOT / "var" / "axe-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not AXE_PATH.exists():
            result = subprocess.run(["npm", "install", "--prefix", str(REPO_ROOT / "var"), "--no-save",
                                     "--no-audit", "--no-fund", "axe-core@4"], capture_output=True, text=True,
                                    timeout=300)
            if result.returncode != 0 or not AXE_PATH.exists():
                pytest.fail(f"could not install axe-core with npm:\n{result.stdout}\n{result.stderr}")
    return AXE_PATH
