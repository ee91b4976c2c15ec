"""Seed data for the page tests: the example support desk's traces, ingested in-process, judged by rule judges and
rubrics; and a trace whose content is hostile HTML."""

from __future__ import annotations

import fcntl
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.test import Client

from clear.projects.models import Project
from diagnosis.models import DiagnosisRun
from diagnosis.services import diagnosis_run_execute, diagnosis_run_start, rubric_create
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


@pytest.fixture
def seeded(project, settings) -> Seeded:
    settings.CLEAR_JUDGE_MODEL = ""
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
