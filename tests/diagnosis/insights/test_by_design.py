"""Issue 28, item 2 (part): an output property a step shows on every call, in succeeding and failing runs alike, is
by-design behaviour (a "think" scratchpad that returns nothing): never associated with failure, never in the
overview's Top insights, not in the open list unless asked for, no ticket. A step that is empty only sometimes is not, and neither is a tool that errors on
every call: that is a fault.

A constructed project of 24 runs (12 failed, 12 succeeded): `think` (node planner) returns "" on every call and is
called in 10 failing and 2 succeeding runs (failing runs think more, so its lift interval lies above 1, as on
tau-airline); `lookup` (node researcher) returns "" in 4 failing runs and data otherwise; `flaky` (node booker)
errors on every call in every run.
"""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from clear.projects.services import api_key_create
from diagnosis.judges.rules import RULES
from diagnosis.models import Insight
from diagnosis.selectors import insight_list, insight_list_top
from diagnosis.tickets.models import Ticket
from tests.diagnosis.insights.conftest import diagnose
from tests.diagnosis.support import ingest_otlp
from tests.frontend.conftest import client_for

pytestmark = pytest.mark.django_db

T0 = 1_764_547_200_000_000_000
SECOND = 1_000_000_000


def _attrs(**values) -> list[dict]:
    return [{"key": k.replace("__", "."), "value": {"stringValue": v}} for k, v in values.items()]


def _span(trace_id: str, index: int, parent: str, name: str, kind: str, at: int, *, error: bool = False,
          **attributes) -> dict:
    span = {"traceId": trace_id, "spanId": f"{index:016x}", "name": name, "kind": 1,
            "startTimeUnixNano": str(T0 + at * SECOND), "endTimeUnixNano": str(T0 + at * SECOND + SECOND // 2),
            "attributes": _attrs(openinference__span__kind=kind, **attributes),
            "status": {"code": 2, "message": "RuntimeError: booking backend down"} if error else {"code": 0}}
    if parent:
        span["parentSpanId"] = parent
    return span


def _run(n: int, *, failed: bool, thinks: bool, empty_lookup: bool) -> dict:
    trace_id = f"{n + 1:032x}"
    base = (n + 1) * 100
    root = f"{base:016x}"
    spans = [_span(trace_id, base, "", "desk", "AGENT", 0, agent__name="desk", input__value=f"Request {n}",
                   output__value="Done.", clear__outcome="failure" if failed else "success",
                   clear__task__id=f"task-{n}")]
    agents = [("planner", "think", '{"thought": "check the order first"}', "" if thinks else None),
              ("researcher", "lookup", '{"order": "A1"}', "" if empty_lookup else '{"status": "shipped"}'),
              ("booker", "flaky", '{"seat": "12A"}', None)]
    for k, (agent, tool, arguments, output) in enumerate(agents):
        agent_id = base + 1 + 10 * k
        spans.append(_span(trace_id, agent_id, root, agent, "AGENT", 1 + 3 * k, agent__name=agent,
                           output__value=f"{agent} done"))
        if tool == "think" and output is None:
            continue
        calls = 2 if tool == "think" else 1
        for c in range(calls):
            extra = {"output__value": output} if output is not None else {}
            spans.append(_span(trace_id, agent_id + 1 + c, f"{agent_id:016x}", tool, "TOOL", 2 + 3 * k,
                               error=tool == "flaky", tool__name=tool, input__value=arguments.replace("first",
                                                                                                   f"step {c}"),
                               **extra))
    return {"resourceSpans": [{"resource": {"attributes": _attrs(service__name="by-design-agent")},
                               "scopeSpans": [{"scope": {"name": "test"}, "spans": spans}]}]}


@pytest.fixture
def built(project, settings):
    settings.CLEAR_JUDGE_MODEL = ""
    for n in range(24):
        failed = n < 12
        thinks = n < 10 or n in (12, 13)
        body = json.dumps(_run(n, failed=failed, thinks=thinks, empty_lookup=n < 4)).encode()
        ingest_otlp(project=project, body=body, content_type="application/json")
    # Rules only: the contrastive judge's finding on `think` (called more in failing runs) is another matter.
    return diagnose(project, "", judges=sorted(RULES))


def _node_insight(project, node: str, word: str) -> Insight:
    found = [i for i in Insight.objects.filter(project=project, level="node", node=node, is_other=False)
             if word in i.title]
    assert len(found) == 1, [(i.node, i.title) for i in Insight.objects.filter(project=project)]
    return found[0]


def test_an_output_property_on_every_call_is_by_design(project, owner, built):
    think = _node_insight(project, "planner", "empty output")
    assert think.trace_count == 12 and think.lift is not None and think.lift_low > 1  # failing runs think more
    assert think.failure_association == "not_associated"
    assert think not in insight_list_top(project=project, limit=50)
    assert think.by_design
    assert not Ticket.objects.filter(project=project, insight=think).exists()
    page = client_for(owner).get(f"/p/{project.slug}/insights/{think.pk}/").content.decode()
    assert 'data-association="by_design"' in page
    # Not a problem: left out of the open list (page and API) unless asked for.
    assert think not in insight_list(project=project, status="open")
    assert think in insight_list(project=project, status="open", include_by_design=True)
    listed = client_for(owner).get(f"/p/{project.slug}/insights/").content.decode()
    assert f'data-insight="{think.pk}"' not in listed and 'data-testid="insight-filter-by-design"' in listed
    listed = client_for(owner).get(f"/p/{project.slug}/insights/?by_design=1").content.decode()
    assert f'data-insight="{think.pk}"' in listed
    key = api_key_create(project=project, name="by design", created_by=owner)
    api = APIClient(HTTP_AUTHORIZATION=f"Bearer {key.secret}")
    assert think.pk not in {row["id"] for row in api.get("/api/v1/insights/?page_size=100").json()["results"]}
    rows = api.get("/api/v1/insights/?page_size=100&include_by_design=true").json()["results"]
    assert [row["by_design"] for row in rows if row["id"] == think.pk] == [True]
    overview = client_for(owner).get(f"/p/{project.slug}/").content.decode()
    assert f"/insights/{think.pk}/" not in overview

    # Empty only on some calls: not by design.
    lookup = _node_insight(project, "researcher", "empty output")
    assert lookup.trace_count == 4 and not lookup.by_design

    # Errors on every call, in succeeding and failing runs alike: still a fault.
    errors = [i for i in Insight.objects.filter(project=project, level="node", node="booker", is_other=False)]
    assert errors and not any(i.by_design for i in errors)
    assert set(insight_list_top(project=project, limit=50)) & set(errors)
