"""The pages over real data (the support desk ingested in-process and judged by rule judges and rubrics): access,
filters, the trace viewer, runs, rubrics, marking a verdict wrong, escaping of hostile content."""

from __future__ import annotations

import json
from datetime import timedelta
from html import escape

import pytest

from clear.errors import ClearError
from diagnosis.models import DiagnosisRun, Feedback, FeedbackCorrection, Rubric
from diagnosis.services import diagnosis_run_start
from diagnosis.services.judging import RULE_JUDGES
from tests.frontend.conftest import EVIL_AGENT, EVIL_TRACE_ID, PAYLOADS, client_for
from traces.models import Span, Trace

pytestmark = pytest.mark.django_db
RULES = list(RULE_JUDGES)


def _trace(project, task_id: str, release: str = "r1") -> Trace:
    return Trace.objects.get(project=project, task_id=task_id, release=release)


def _pages(seeded) -> list[str]:
    project = seeded.project
    trace = _trace(project, "compare-two-invoices")
    rubric = Rubric.objects.filter(project=project).first()
    base = f"/p/{project.slug}"
    return [
        f"{base}/", f"{base}/workflow/", f"{base}/nodes/", f"{base}/traces/", f"{base}/traces/{trace.trace_id}/",
        f"{base}/runs/", f"{base}/runs/new/", f"{base}/runs/{seeded.run.pk}/",
        f"{base}/runs/{seeded.run.pk}/status.json",
        f"{base}/settings/api-keys/", f"{base}/settings/rubrics/", f"{base}/settings/rubrics/{rubric.pk}/",
        f"{base}/settings/judge/", f"{base}/settings/issue-tracker/",
    ]


@pytest.mark.parametrize("who", ["owner", "teammate"])
def test_members_get_every_page(request, seeded, who):
    client = client_for(request.getfixturevalue(who))
    for url in _pages(seeded):
        response = client.get(url)
        assert response.status_code == 200, url
        if not url.endswith(".json"):
            html = response.content.decode()
            assert "<title>" in html and "<main" in html and "<nav" in html and "<header" in html, url


def test_outsiders_get_404_everywhere(seeded, outsider, outsider_project):
    client = client_for(outsider)
    for url in _pages(seeded):
        assert client.get(url).status_code == 404, url
    base = f"/p/{seeded.project.slug}"
    feedback = Feedback.objects.filter(run=seeded.run).first()
    rubric = Rubric.objects.filter(project=seeded.project).first()
    for url in (f"{base}/runs/new/", f"{base}/runs/{seeded.run.pk}/cancel/", f"{base}/settings/rubrics/",
                f"{base}/settings/rubrics/{rubric.pk}/", f"{base}/settings/rubrics/{rubric.pk}/toggle/",
                f"{base}/settings/rubrics/{rubric.pk}/delete/", f"{base}/feedback/{feedback.pk}/mark-wrong/"):
        assert client.post(url, {"name": "x", "kind": "regex", "config": "{}"}).status_code == 404, url
    assert Rubric.objects.filter(pk=rubric.pk, enabled=True).exists()
    assert DiagnosisRun.objects.filter(project=seeded.project).count() == 1
    # Their own project works; another project's objects are not reachable through it either.
    own = f"/p/{outsider_project.slug}"
    assert client.get(f"{own}/traces/").status_code == 200
    assert client.get(f"{own}/runs/{seeded.run.pk}/").status_code == 404
    trace = _trace(seeded.project, "compare-two-invoices")
    assert client.get(f"{own}/traces/{trace.trace_id}/").status_code == 404
    assert client.post(f"{own}/feedback/{feedback.pk}/mark-wrong/").status_code == 404


def test_anonymous_users_are_sent_to_log_in(seeded):
    from django.test import Client

    for url in _pages(seeded):
        response = Client().get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url


# ---- overview ---------------------------------------------------------------------------------------------------


def test_overview_shows_volume_failure_rate_and_judge_cost(seeded, owner):
    DiagnosisRun.objects.filter(pk=seeded.run.pk).update(cost=0.25, input_tokens=1000, output_tokens=200)
    other = diagnosis_run_start(project=seeded.project, enqueue=False, judges=["rules"])
    DiagnosisRun.objects.filter(pk=other.pk).update(cost=1.5)
    html = client_for(owner).get(f"/p/{seeded.project.slug}/").content.decode()
    assert 'data-testid="volume-chart"' in html
    assert "$1.75" in html and "2 runs" in html and "1,200 tokens" in html
    assert 'data-testid="latest-run"' in html
    # 22 traces each on two virtual days: hourly buckets, r1's failures in the first.
    assert "per hour" in html
    assert html.count('class="seg-fail"') == 1


def test_overview_with_traces_but_no_run_suggests_a_diagnosis(project, owner, settings):
    from tests.diagnosis.support import support_desk_ingest

    support_desk_ingest(project=project, bugs="all", release="r1", task_ids=["refund-status", "order-and-invoice"])
    html = client_for(owner).get(f"/p/{project.slug}/").content.decode()
    assert 'data-testid="next-diagnose"' in html and f"/p/{project.slug}/runs/new/" in html


# ---- traces -----------------------------------------------------------------------------------------------------


def _listed(client, project, query: str = "") -> list[str]:
    response = client.get(f"/p/{project.slug}/traces/{query}")
    assert response.status_code == 200
    return [t.trace_id for t in response.context["page"].items]


def test_trace_filters(seeded, owner):
    project, client = seeded.project, client_for(owner)
    assert len(_listed(client, project)) == 44
    r1 = _listed(client, project, "?release=r1")
    assert set(r1) == set(Trace.objects.filter(project=project, release="r1").values_list("trace_id", flat=True))
    failed = _listed(client, project, "?release=r1&outcome=failure")
    assert set(failed) == set(Trace.objects.filter(project=project, release="r1", outcome="failure")
                              .values_list("trace_id", flat=True))
    assert 0 < len(failed) < 22
    assert _listed(client, project, "?outcome=failure&release=r2") == []
    billing = set(_listed(client, project, "?node=billing_worker"))
    expected = set(Span.objects.filter(project=project, node="billing_worker")
                   .values_list("trace__trace_id", flat=True))
    assert billing == expected and 0 < len(billing) < 44
    assert len(_listed(client, project, "?q=compare-two")) == 2
    trace = _trace(project, "compare-two-invoices")
    assert _listed(client, project, f"?q={trace.trace_id[:10]}") == [trace.trace_id]
    until = trace.start_time + timedelta(minutes=1)
    window = f"?since={trace.start_time:%Y-%m-%dT%H:%M}&until={until:%Y-%m-%dT%H:%M}"
    assert _listed(client, project, window) == [trace.trace_id]
    assert _listed(client, project, "?q=no-such-task") == []
    html = client.get(f"/p/{project.slug}/traces/?q=no-such-task").content.decode()
    assert "No trace matches these filters" in html


def test_bad_filters_are_reported_not_raised(seeded, owner):
    client = client_for(owner)
    response = client.get(f"/p/{seeded.project.slug}/traces/?since=yesterday&outcome=maybe")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Enter a valid date/time" in html and "Select a valid choice" in html
    assert len(response.context["page"].items) == 44  # the filters are ignored, and the page says so
    response = client.get(f"/p/{seeded.project.slug}/traces/?since=2025-01-07T00:00&until=2025-01-06T00:00")
    assert "start must be before its end" in response.content.decode()
    assert client.get(f"/p/{seeded.project.slug}/traces/?cursor=garbage!!").status_code == 200
    assert client.get(f"/p/{seeded.project.slug}/nodes/?release=nope").status_code == 200


def test_trace_viewer_shows_tree_waterfall_and_feedback(seeded, owner):
    project = seeded.project
    trace = _trace(project, "compare-two-invoices")
    response = client_for(owner).get(f"/p/{project.slug}/traces/{trace.trace_id}/")
    html = response.content.decode()
    rows = response.context["rows"]
    assert len(rows) == trace.span_count == 16
    assert html.count('class="span-row') == 16 and html.count('class="wf-bar') == 16
    root = rows[0]
    assert root.span.span_id == trace.root_span_id and root.depth == 0 and root.left == 0 and root.width == 100
    by_id = {r.span.span_id: r for r in rows}
    for row in rows[1:]:
        parent = by_id[row.span.parent_span_id]
        assert row.depth == parent.depth + 1
        assert rows.index(parent) < rows.index(row)  # depth-first: a child comes after its parent
        assert 0 <= row.left <= 100 and row.left + row.width <= 100.5
    # Judge feedback inline: the retry loop on billing_worker, each error span, the evidence quotes marked.
    assert "rule.repeated_tool_call" in html and "invoice_lookup called 5 times" in html
    assert '<mark class="quote">{&quot;invoice_id&quot;: &quot;INV-9011&quot;}</mark>' in html
    worker = Span.objects.get(trace=trace, node="billing_worker", kind="AGENT")
    assert by_id[worker.span_id].failing >= 1
    tools = Span.objects.filter(trace=trace, tool_name="invoice_lookup", status="error")
    assert all(by_id[t.span_id].cited for t in tools)


def test_viewer_opens_at_a_span_with_its_evidence_marked(seeded, owner):
    project = seeded.project
    trace = _trace(project, "compare-two-invoices")
    tool = Span.objects.filter(trace=trace, tool_name="invoice_lookup", status="error").first()
    client = client_for(owner)
    response = client.get(f"/p/{project.slug}/traces/{trace.trace_id}/?span={tool.span_id}")
    html = response.content.decode()
    assert response.context["selected"].span_id == tool.span_id
    assert f'id="row-{tool.span_id}" class="span-row selected' in html
    detail = html[html.index('data-testid="span-detail"'):]
    assert "<mark>" in detail[detail.index('data-testid="span-input"'):]  # the repeated call's arguments
    assert "Cited as evidence by" in detail
    # The run can be chosen; an unknown span or run says so and falls back.
    response = client.get(f"/p/{project.slug}/traces/{trace.trace_id}/?span=ffffffffffffffff&run=nope")
    html = response.content.decode()
    assert "No span ffffffffffffffff in this trace" in html and "left no feedback on this trace" in html
    assert response.context["selected"].span_id == trace.root_span_id
    assert client.get(f"/p/{project.slug}/traces/{'0' * 32}/").status_code == 404


def test_viewer_without_feedback_says_how_to_get_it(seeded, owner):
    trace = _trace(seeded.project, "compare-two-invoices", release="r2")
    html = client_for(owner).get(f"/p/{seeded.project.slug}/traces/{trace.trace_id}/").content.decode()
    assert "No judge has looked at this trace yet" in html


def test_long_content_is_folded(seeded, owner):
    trace = _trace(seeded.project, "compare-two-invoices")
    span = Span.objects.filter(trace=trace, kind="LLM", node="mediator").first()
    html = client_for(owner).get(f"/p/{seeded.project.slug}/traces/{trace.trace_id}/?span={span.span_id}")\
        .content.decode()
    detail = html[html.index('data-testid="span-input"'):]
    assert '<details class="fold"' in detail  # the mediator's long brief


# ---- marking a verdict wrong ----------------------------------------------------------------------------------


def test_marking_a_verdict_wrong_stores_a_correction_and_stops_counting_it(seeded, owner):
    project = seeded.project
    trace = _trace(project, "compare-two-invoices")
    feedback = Feedback.objects.get(run=seeded.run, trace=trace, judge="rule.repeated_tool_call")
    client = client_for(owner)
    url = f"/p/{project.slug}/traces/{trace.trace_id}/?span={feedback.target_span_id}"
    before = client.get(url)
    row = next(r for r in before.context["rows"] if r.span.span_id == feedback.target_span_id)
    failing_before = row.failing
    listed = {t.trace_id: t.failing_feedback for t in client.get(f"/p/{project.slug}/traces/?release=r1")
              .context["page"].items}
    nodes_before = {n.node: n.failing for n in client.get(f"/p/{project.slug}/nodes/").context["rows"]}

    html = client.post(f"/p/{project.slug}/feedback/{feedback.pk}/mark-wrong/",
                       {"note": "five retries of a rate-limited call are expected"}, follow=True).content.decode()
    correction = FeedbackCorrection.objects.get(feedback=feedback)
    assert (correction.note, correction.created_by) == ("five retries of a rate-limited call are expected", owner)
    assert "verdict wrong" in html and 'data-testid="corrected"' in html
    assert "five retries of a rate-limited call are expected" in html

    after = client.get(url)
    row = next(r for r in after.context["rows"] if r.span.span_id == feedback.target_span_id)
    assert row.failing == failing_before - 1
    relisted = {t.trace_id: t.failing_feedback for t in client.get(f"/p/{project.slug}/traces/?release=r1")
                .context["page"].items}
    assert relisted[trace.trace_id] == listed[trace.trace_id] - 1
    nodes_after = {n.node: n.failing for n in client.get(f"/p/{project.slug}/nodes/").context["rows"]}
    assert nodes_after["billing_worker"] <= nodes_before["billing_worker"]
    # Marking it again changes the note, not the count.
    client.post(f"/p/{project.slug}/feedback/{feedback.pk}/mark-wrong/", {"note": "expected"})
    assert FeedbackCorrection.objects.get(feedback=feedback).note == "expected"


def test_mark_wrong_errors_are_messages(seeded, owner, monkeypatch):
    from diagnosis.services import insights_review

    def feedback_mark_wrong(*, project, feedback, note, user):
        raise ClearError("This verdict cannot be corrected")

    monkeypatch.setattr(insights_review, "feedback_mark_wrong", feedback_mark_wrong)
    feedback = Feedback.objects.filter(run=seeded.run, verdict="fail").first()
    before = Feedback.objects.filter(pk=feedback.pk).values().get()
    client = client_for(owner)
    assert client.get(f"/p/{seeded.project.slug}/feedback/{feedback.pk}/mark-wrong/").status_code == 405
    response = client.post(f"/p/{seeded.project.slug}/feedback/{feedback.pk}/mark-wrong/", follow=True)
    assert "This verdict cannot be corrected" in response.content.decode()
    assert response.redirect_chain[-1][0].endswith(f"#row-{feedback.target_span_id}")
    assert Feedback.objects.filter(pk=feedback.pk).values().get() == before
    assert not FeedbackCorrection.objects.exists()


# ---- diagnosis runs ----------------------------------------------------------------------------------------------


def test_start_a_run_from_the_form(seeded, owner, django_capture_on_commit_callbacks):
    client = client_for(owner)
    url = f"/p/{seeded.project.slug}/runs/new/"
    form = client.get(url).content.decode()
    for judge in ("rule.span_error", "rule.repeated_tool_call", "rubrics", "llm.trace", "contrastive"):
        assert f'value="{judge}"' in form
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(url, {"release": "r2", "outcome": "", "sample_rate": "0.5", "judges": RULES,
                                     "budget_tokens": "1000", "name": "half of r2"})
    assert response.status_code == 302
    run = DiagnosisRun.objects.get(project=seeded.project, name="half of r2")
    assert response["Location"] == f"/p/{seeded.project.slug}/runs/{run.pk}/"
    assert (run.release, run.sample_rate, run.budget_tokens, run.created_by) == ("r2", 0.5, 1000, owner)
    assert run.status == "succeeded" and 0 < run.total_count < 22  # eager Celery ran it during the request
    status = client.get(f"/p/{seeded.project.slug}/runs/{run.pk}/status.json").json()
    assert status["percent"] == 100 and status["finished"] and status["done"] == run.total_count
    html = client.get(response["Location"]).content.decode()
    assert "half of r2" in html and 'aria-valuenow="100"' in html


def test_the_contrastive_judge_runs_from_the_form(seeded, owner, django_capture_on_commit_callbacks):
    client = client_for(owner)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/p/{seeded.project.slug}/runs/new/",
                               {"release": "", "sample_rate": "1", "judges": ["contrastive"], "name": "contrast"})
    assert response.status_code == 302
    run = DiagnosisRun.objects.get(project=seeded.project, name="contrast")
    assert run.status == "succeeded" and run.judges == ["contrastive"]
    # r1's 11 failures against r1's and r2's 33 successes (11 against 11 alone is too few for FDR 0.1).
    findings = Feedback.objects.filter(run=run, judge="contrastive", verdict="fail")
    assert findings.exists() and all("fails" in json.dumps(f.issues) for f in findings), list(findings.values("issues"))


def test_run_form_errors_are_messages(seeded, owner, settings):
    settings.CLEAR_JUDGE_MODEL = ""
    client = client_for(owner)
    url = f"/p/{seeded.project.slug}/runs/new/"
    response = client.post(url, {"sample_rate": "1", "judges": ["llm.trace"]})
    assert response.status_code == 400
    assert "The LLM judges need a model" in response.content.decode()
    response = client.post(url, {"sample_rate": "1"})
    assert response.status_code == 400 and "Pick at least one judge" in response.content.decode()
    response = client.post(url, {"sample_rate": "7", "judges": RULES})
    assert response.status_code == 400 and "Sample rate" in response.content.decode()
    response = client.post(url, {"sample_rate": "1", "judges": RULES, "since": "2025-01-07T00:00",
                                 "until": "2025-01-06T00:00"})
    assert response.status_code == 400 and "since must be before until" in response.content.decode()
    assert DiagnosisRun.objects.filter(project=seeded.project).count() == 1


def test_a_run_that_matches_nothing_says_so(seeded, owner):
    response = client_for(owner).post(f"/p/{seeded.project.slug}/runs/new/",
                                      {"sample_rate": "1", "judges": RULES, "since": "2030-01-01T00:00"},
                                      follow=True)
    assert "No trace matched the filter" in response.content.decode()


def test_cancel_a_run(seeded, owner):
    run = diagnosis_run_start(project=seeded.project, enqueue=False, judges=["rules"])
    client = client_for(owner)
    html = client.get(f"/p/{seeded.project.slug}/runs/{run.pk}/").content.decode()
    assert 'data-testid="cancel-form"' in html and "data-poll=" in html
    html = client.post(f"/p/{seeded.project.slug}/runs/{run.pk}/cancel/", follow=True).content.decode()
    run.refresh_from_db()
    assert run.status == "cancelled" and run.skipped_count == run.total_count
    assert "Run cancelled" in html
    html = client.post(f"/p/{seeded.project.slug}/runs/{run.pk}/cancel/", follow=True).content.decode()
    assert "already finished" in html


def test_run_page_lists_failing_verdicts_and_errors(seeded, owner):
    DiagnosisRun.objects.filter(pk=seeded.run.pk).update(
        error_count=1, errors=[{"trace_id": "ab" * 16, "judge": "rule.loop", "error": "<b>boom</b>"}])
    html = client_for(owner).get(f"/p/{seeded.project.slug}/runs/{seeded.run.pk}/").content.decode()
    assert 'data-testid="failing-by-judge"' in html and "rule.repeated_tool_call" in html
    assert "&lt;b&gt;boom&lt;/b&gt;" in html and "<b>boom</b>" not in html
    assert html.count("open →") == Feedback.objects.filter(run=seeded.run, verdict="fail").count()


# ---- rubrics and judge settings ------------------------------------------------------------------------------


def test_rubric_create_edit_toggle_delete(seeded, owner):
    client = client_for(owner)
    base = f"/p/{seeded.project.slug}/settings/rubrics/"
    response = client.post(base, {"name": "No apologies", "kind": "regex", "node": "writer", "enabled": "on",
                                  "config": '{"pattern": "sorry", "expect": "absent", "ignore_case": true}'})
    assert response.status_code == 302
    rubric = Rubric.objects.get(project=seeded.project, name="No apologies")
    assert (rubric.node, rubric.enabled, rubric.config["expect"]) == ("writer", True, "absent")
    response = client.post(f"{base}{rubric.pk}/", {"name": "No apologies, ever", "kind": "regex", "node": "",
                                                   "config": '{"pattern": "sorry|apolog"}'})
    assert response.status_code == 302
    rubric.refresh_from_db()
    assert (rubric.name, rubric.node, rubric.enabled, rubric.config["pattern"]) == (
        "No apologies, ever", "", False, "sorry|apolog")
    client.post(f"{base}{rubric.pk}/toggle/")
    rubric.refresh_from_db()
    assert rubric.enabled
    html = client.post(f"{base}{rubric.pk}/delete/", follow=True).content.decode()
    assert not Rubric.objects.filter(pk=rubric.pk).exists() and "deleted" in html


def test_rubric_errors_come_from_the_service(seeded, owner):
    client = client_for(owner)
    base = f"/p/{seeded.project.slug}/settings/rubrics/"
    cases = [
        ({"name": "x", "kind": "regex", "config": "{not json"}, "not valid JSON"),
        ({"name": "x", "kind": "regex", "config": '{"pattern": "("}'}, "Rubric &#x27;x&#x27;: pattern"),
        ({"name": "x", "kind": "tool_never", "config": '{"tool": "a", "colour": "red"}'}, "Unknown keys"),
        ({"name": "The mediator keeps every fact a tool returned", "kind": "tool_never",
          "config": '{"tool": "a"}'}, "already has a rubric named"),
        ({"name": "x", "kind": "llm", "config": "{}"}, "needs &quot;criterion&quot;"),
    ]
    before = Rubric.objects.filter(project=seeded.project).count()
    for data, message in cases:
        response = client.post(base, data)
        assert response.status_code == 400, data
        assert message in response.content.decode(), (data, response.content.decode()[-3000:])
    assert Rubric.objects.filter(project=seeded.project).count() == before
    rubric = Rubric.objects.filter(project=seeded.project).first()
    response = client.post(f"{base}{rubric.pk}/", {"name": rubric.name, "kind": "coverage", "config": "{}"})
    assert response.status_code == 400 and "path must be" in response.content.decode()


def test_rubric_examples_are_valid_configs():
    from diagnosis.judges.rubric_config import rubric_config_validate
    from frontend.views_settings import RUBRIC_EXAMPLES

    assert set(RUBRIC_EXAMPLES) == set(Rubric.Kind.values)
    for kind, config in RUBRIC_EXAMPLES.items():
        rubric_config_validate(kind, config)


def test_judge_model_page_shows_the_effective_settings_never_the_key(project, owner, settings):
    settings.CLEAR_JUDGE_MODEL = "openai/gpt-4o-mini"
    settings.CLEAR_JUDGE_API_BASE = "http://127.0.0.1:9999/v1"
    settings.CLEAR_JUDGE_API_KEY = "sk-very-secret"
    html = client_for(owner).get(f"/p/{project.slug}/settings/judge/").content.decode()
    assert "openai/gpt-4o-mini" in html and "http://127.0.0.1:9999/v1" in html
    assert "sk-very-secret" not in html and "set (not shown)" in html


# ---- hostile content --------------------------------------------------------------------------------------------


def test_hostile_content_is_escaped_on_every_page(project, owner, evil_trace):
    client = client_for(owner)
    trace = Trace.objects.get(project=project, trace_id=EVIL_TRACE_ID)
    base = f"/p/{project.slug}"
    urls = [f"{base}/", f"{base}/traces/", f"{base}/workflow/", f"{base}/nodes/", f"{base}/runs/",
            f"{base}/runs/{evil_trace.pk}/", f"{base}/traces/?node={EVIL_AGENT}"]
    urls += [f"{base}/traces/{trace.trace_id}/?span={s}" for s in trace.spans.values_list("span_id", flat=True)]
    seen_escaped = set()
    for url in urls:
        html = client.get(url).content.decode()
        for name, payload in PAYLOADS.items():
            assert payload not in html, (url, name)
            if escape(payload, quote=False) in html or escape(payload) in html:
                seen_escaped.add(name)
        assert EVIL_AGENT not in html, url
        assert "<script>window" not in html and "onerror=\"window" not in html, url
    assert seen_escaped == set(PAYLOADS)
    # The node name went into the SVG graph as text.
    assert escape(EVIL_AGENT) in client.get(f"{base}/workflow/").content.decode()


def test_forms_need_the_csrf_token(seeded, owner):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    base = f"/p/{seeded.project.slug}"
    rubric = Rubric.objects.filter(project=seeded.project).first()
    feedback = Feedback.objects.filter(run=seeded.run).first()
    for url in (f"{base}/runs/new/", f"{base}/runs/{seeded.run.pk}/cancel/", f"{base}/settings/rubrics/",
                f"{base}/settings/rubrics/{rubric.pk}/delete/", f"{base}/feedback/{feedback.pk}/mark-wrong/",
                f"{base}/settings/api-keys/create/"):
        assert client.post(url, {"name": "x"}).status_code == 403, url
    assert Rubric.objects.filter(pk=rubric.pk).exists()
    html = client.get(f"{base}/settings/rubrics/").content.decode()
    assert html.count('name="csrfmiddlewaretoken"') >= 1 + 2 * Rubric.objects.filter(project=seeded.project).count()


def test_a_queued_run_says_it_waits_for_a_worker(seeded, owner):
    run = diagnosis_run_start(project=seeded.project, enqueue=False, judges=RULES)
    html = client_for(owner).get(f"/p/{seeded.project.slug}/runs/{run.pk}/").content.decode()
    assert 'data-testid="queued-hint"' in html and "worker_probe" in html
