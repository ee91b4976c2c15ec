"""Trace search (filters in the URL, keyset pages) and the trace viewer (span tree, waterfall, span content,
judge feedback with highlighted evidence). Trace content is untrusted: see `frontend.render`."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from clear.errors import ClearError
from diagnosis.models import Feedback
from diagnosis.services import insights_review
from diagnosis.selectors import (
    feedback_correction_map,
    feedback_get,
    feedback_list_for_trace,
    feedback_runs_for_trace,
    rubric_judge_names,
    trace_list_with_failing,
)
from frontend.forms import TraceFilterForm
from frontend.pagination import keyset_page
from frontend.render import render_value
from frontend.views import project_for
from traces.models import Span
from traces.selectors import (
    TraceFilter,
    release_filter_value,
    span_list_for_trace,
    span_node_list,
    trace_expired_get,
    trace_expired_message,
    trace_get,
    trace_release_list,
)

PAGE_SIZE = 50
SPAN_LIMIT = 3000


@login_required
def trace_list(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)
    form = TraceFilterForm(request.GET)
    filters = TraceFilter()
    if form.is_valid():
        data = form.cleaned_data
        filters = TraceFilter(release=release_filter_value(data["release"].strip()), outcome=data["outcome"],
                              node=data["node"].strip(), q=data["q"].strip(), since=data["since"],
                              until=data["until"])
    page = keyset_page(trace_list_with_failing(project=project, filters=filters), field="start_time",
                       cursor=request.GET.get("cursor"), limit=PAGE_SIZE)
    context = {
        "project": project, "nav": "traces", "form": form, "filters": filters, "page": page,
        "releases": trace_release_list(project=project), "nodes": span_node_list(project=project),
    }
    return render(request, "frontend/traces.html", context)


@dataclass
class SpanRow:
    span: Span
    depth: int
    left: float
    width: float
    offset_ms: float
    failing: int = 0
    cited: int = 0
    has_children: bool = False

    @property
    def show_node(self) -> bool:
        """Agent spans name their node unless their name says it already; other spans inherit it."""
        return bool(self.span.node) and self.span.kind == "AGENT" and self.span.node not in self.span.name

    @property
    def indent(self) -> int:
        """The row's .depth-N class level (clear.css indents 14px a level, up to 24)."""
        return min(self.depth, 24)

    @property
    def left_step(self) -> int:
        """The bar's start as a whole percent, for the .x-N class (no style="" under the Content-Security-Policy)."""
        return max(0, min(100, round(self.left)))

    @property
    def width_step(self) -> int:
        """The bar's width as a whole percent, for the .w-N class: its end rounded too, so bars stay aligned."""
        return max(0, min(100, round(self.left + self.width)) - self.left_step)


def _tree_rows(spans: list[Span]) -> list[SpanRow]:
    """Depth-first order under each root (a span whose parent is not in the trace), children by start time; bars
    placed on the trace's own time axis."""
    if not spans:
        return []
    by_id = {s.span_id: s for s in spans}
    children: dict[str, list[Span]] = defaultdict(list)
    roots = []
    for span in spans:
        parent = span.parent_span_id
        if parent and parent in by_id and parent != span.span_id:
            children[parent].append(span)
        else:
            roots.append(span)
    t0 = min(s.start_time for s in spans)
    t1 = max(max(s.end_time or s.start_time, s.start_time) for s in spans)
    total = max((t1 - t0).total_seconds(), 0.001)
    rows, seen = [], set()
    stack = [(root, 0) for root in reversed(roots)]
    while stack:
        span, depth = stack.pop()
        if span.span_id in seen:
            continue
        seen.add(span.span_id)
        start = (span.start_time - t0).total_seconds()
        end = max((span.end_time or span.start_time) - t0, timedelta(0)).total_seconds()
        rows.append(SpanRow(span=span, depth=depth, left=round(100 * start / total, 3),
                            width=round(max(100 * (end - start) / total, 0.25), 3), offset_ms=start * 1000,
                            has_children=bool(children.get(span.span_id))))
        stack += [(child, depth + 1) for child in reversed(children.get(span.span_id, []))]
    for span in spans:  # spans caught in a parent cycle: still shown, at the top level
        if span.span_id not in seen:
            start = (span.start_time - t0).total_seconds()
            rows.append(SpanRow(span=span, depth=0, left=round(100 * start / total, 3), width=0.25,
                                offset_ms=start * 1000))
    return rows


def _counts(feedback: Feedback) -> bool:
    """A failing verdict nobody marked wrong."""
    return feedback.verdict == Feedback.Verdict.FAIL and not getattr(feedback, "corrected", None)


def _issue_list(feedback: Feedback, names: dict[str, str]) -> list[dict]:
    """A feedback's issues as plain dicts for the template, each evidence with its span's name."""
    issues = []
    for issue in feedback.issues or []:
        if not isinstance(issue, dict):
            continue
        evidence = [{"span_id": str(e.get("span_id", "")), "quote": str(e.get("quote") or ""),
                     "span_name": names.get(str(e.get("span_id", "")), ""),
                     "in_trace": str(e.get("span_id", "")) in names}
                    for e in issue.get("evidence") or [] if isinstance(e, dict)]
        issues.append({"title": str(issue.get("title", "")), "detail": str(issue.get("detail", "")),
                       "severity": str(issue.get("severity", "")), "evidence": evidence})
    return issues


def _viewer_url(slug: str, trace_id: str, *, span_id: str | None = None, run_id=None) -> str:
    params = {}
    if run_id:
        params["run"] = str(run_id)
    if span_id:
        params["span"] = span_id
    url = reverse("frontend:trace", kwargs={"slug": slug, "trace_id": trace_id})
    return url + ("?" + urlencode(params) if params else "") + (f"#row-{span_id}" if span_id else "")


@login_required
def trace_detail(request: HttpRequest, slug: str, trace_id: str) -> HttpResponse:
    project = project_for(request, slug)
    trace = trace_get(project=project, trace_id=trace_id)
    if trace is None:
        expired = trace_expired_get(project=project, trace_id=trace_id) if len(trace_id) <= 32 else None
        if expired is not None:  # retention removed it: say so (evidence and ticket links still point here)
            return render(request, "frontend/error.html", {
                "project": project, "status": 410, "title": "Trace expired", "path": request.path,
                "explanation": trace_expired_message(expired=expired)}, status=410)
        raise Http404("No such trace in this project")
    spans = list(span_list_for_trace(project=project, trace=trace)[:SPAN_LIMIT + 1])
    truncated = len(spans) > SPAN_LIMIT
    spans = spans[:SPAN_LIMIT]
    rows = _tree_rows(spans)

    runs = feedback_runs_for_trace(project=project, trace=trace)
    wanted_run = request.GET.get("run", "")
    run = next((r for r in runs if str(r["run_id"]) == wanted_run), None)
    if wanted_run and run is None:
        messages.warning(request, "That diagnosis run left no feedback on this trace; showing the latest one.")
    run = run or (runs[0] if runs else None)
    feedback = feedback_list_for_trace(project=project, trace=trace, run_id=run["run_id"]) if run else []

    names = {row.span.span_id: row.span.name for row in rows}
    corrections = feedback_correction_map(project=project, feedback=feedback)
    for item in feedback:
        item.issue_list = _issue_list(item, names)
        item.evidence_count = sum(len(issue["evidence"]) for issue in item.issue_list)
        item.corrected = corrections.get((item.trace_id, item.judge, item.target_span_id))
    by_span: dict[str | None, list[Feedback]] = defaultdict(list)
    quotes: dict[str, list[str]] = defaultdict(list)
    citing: dict[str, list[Feedback]] = defaultdict(list)
    for item in feedback:
        by_span[item.target_span_id].append(item)
        for issue in item.issues or []:
            evidence_list = (issue.get("evidence") or []) if isinstance(issue, dict) else []
            for evidence in evidence_list:
                if isinstance(evidence, dict) and evidence.get("span_id"):
                    if evidence.get("quote"):
                        quotes[evidence["span_id"]].append(str(evidence["quote"]))
                    if _counts(item) and item not in citing[evidence["span_id"]]:
                        citing[evidence["span_id"]].append(item)
    for row in rows:
        row.failing = sum(1 for f in by_span.get(row.span.span_id, []) if _counts(f))
        row.cited = len(citing.get(row.span.span_id, []))

    span_ids = {row.span.span_id for row in rows}
    wanted_span = request.GET.get("span", "").strip().lower()
    if wanted_span and wanted_span not in span_ids:
        among = " (among the spans shown)" if truncated else ""
        messages.warning(request, f"No span {wanted_span} in this trace{among}; showing the root span.")
        wanted_span = ""
    selected_row = next((r for r in rows if r.span.span_id == wanted_span), None) if wanted_span else None
    if selected_row is None and rows:
        selected_row = next((r for r in rows if r.span.span_id == trace.root_span_id), rows[0])
    selected = selected_row.span if selected_row else None
    detail = {}
    if selected is not None:
        span_quotes = quotes.get(selected.span_id, [])
        input_html, input_marked = render_value(selected.input, span_quotes)
        output_html, output_marked = render_value(selected.output, span_quotes)
        status_html, status_marked = render_value(selected.status_message, span_quotes) \
            if selected.status_message else ("", False)
        detail = {
            "row": selected_row, "input": input_html, "output": output_html, "status_message": status_html,
            "marked": input_marked or output_marked or status_marked, "quotes": span_quotes,
            "exceptions": render_value(selected.exceptions, span_quotes)[0] if selected.exceptions else "",
            "events": render_value(selected.events)[0] if selected.events else "",
            "attributes": render_value(selected.attributes)[0] if selected.attributes else "",
            "feedback": by_span.get(selected.span_id, []), "cited_by": citing.get(selected.span_id, []),
            "repairs": (selected.metadata or {}).get("clear.repairs") or [] if isinstance(selected.metadata, dict)
            else [],
        }
    failing = [f for f in feedback if f.verdict in (Feedback.Verdict.FAIL, Feedback.Verdict.UNCERTAIN)]
    failing.sort(key=lambda f: bool(f.corrected))  # the ones still standing first
    passed = sorted({f.judge for f in feedback if f.verdict == Feedback.Verdict.PASS}
                    - {f.judge for f in failing})
    context = {
        "project": project, "nav": "traces", "trace": trace, "rows": rows, "truncated": truncated,
        "span_limit": SPAN_LIMIT, "runs": runs, "run": run, "feedback": feedback,
        "failing": failing, "passed": passed, "selected": selected, "detail": detail,
        "judge_names": rubric_judge_names(project=project),
        "duration_ms": ((trace.end_time - trace.start_time).total_seconds() * 1000
                        if trace.end_time and trace.start_time else None),
    }
    return render(request, "frontend/trace.html", context)


@login_required
@require_POST
def feedback_mark_wrong(request: HttpRequest, slug: str, feedback_id: int) -> HttpResponse:
    project = project_for(request, slug)
    feedback = feedback_get(project=project, feedback_id=feedback_id)
    if feedback is None:
        raise Http404("No such feedback in this project")
    note = request.POST.get("note", "").strip()[:2000]
    try:
        insights_review.feedback_mark_wrong(project=project, feedback=feedback, note=note, user=request.user)
    except ClearError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Marked the {feedback.judge} verdict wrong: it no longer counts against the "
                                  "span, and insights leave it out from their next build.")
    return redirect(_viewer_url(project.slug, feedback.trace.trace_id, span_id=feedback.target_span_id,
                                run_id=feedback.run_id))
