"""Reads of attributions, always scoped to a project."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

from django.db.models import Count, Q, QuerySet

from clear.projects.models import Project
from diagnosis.models import Insight, InsightStatement
from traces.models import Trace

from .errors import AttributionNotFoundError
from .models import Attribution


def attribution_list(*, project: Project, method: str | None = None, agent: str | None = None,
                     status: str | None = None) -> QuerySet[Attribution]:
    attributions = Attribution.objects.filter(project=project)
    if method:
        attributions = attributions.filter(method=method)
    if agent:
        attributions = attributions.filter(agent__iexact=agent)
    if status:
        attributions = attributions.filter(status=status)
    return attributions.select_related("trace").order_by("trace__start_time", "trace_id", "method")


def attribution_get(*, project: Project, trace: Trace, method: str = "learned") -> Attribution:
    attribution = Attribution.objects.filter(project=project, trace=trace, method=method).first()
    if attribution is None:
        raise AttributionNotFoundError(f"No {method} attribution for trace {trace.trace_id}")
    return attribution


def attribution_agent_counts(*, project: Project, method: str = "learned") -> list[dict]:
    """How often each node was found responsible: [{"agent", "count"}], most blamed first."""
    return list(Attribution.objects.filter(project=project, method=method, status=Attribution.Status.OK)
                .values("agent").annotate(count=Count("id")).order_by("-count", "agent"))


def attribution_insights(*, project: Project, attribution: Attribution) -> QuerySet[Insight]:
    """The project's insights whose verified evidence cites the attribution's decisive span (none when the
    attribution named no span)."""
    if not attribution.span_id or attribution.project_id != project.pk:
        return Insight.objects.none()
    return (Insight.objects.filter(project=project, evidence__trace_id=attribution.trace_id,
                                   evidence__span_id=attribution.span_id)
            .distinct())


# When a trace was attributed by several methods, the one an insight summary counts: the learned model (trained on
# labelled failures) over the offline heuristic, then the LLM methods.
METHOD_PREFERENCE = ("learned", "heuristic")
SUMMARY_TOP_ROWS = 5


def _method_rank(method: str) -> tuple[int, str]:
    return (METHOD_PREFERENCE.index(method) if method in METHOD_PREFERENCE else len(METHOD_PREFERENCE), method)


def _summary(*, failing: int, rows: list[dict], top: int) -> dict:
    by_agent: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_agent[row["agent"]].append(row)
    agents = []
    for agent, blamed in by_agent.items():
        confidences = [r["confidence"] for r in blamed if r["confidence"] is not None]
        fallbacks = Counter(r["fallback"] for r in blamed if r["low_confidence"] and r["fallback"])
        agents.append({
            "agent": agent, "count": len(blamed),
            "mean_confidence": sum(confidences) / len(confidences) if confidences else None,
            "low_confidence": sum(r["low_confidence"] for r in blamed),
            "fallback": fallbacks.most_common(1)[0][0] if fallbacks else "",
        })
    agents.sort(key=lambda a: (-a["count"], -(a["mean_confidence"] or 0), a["agent"]))
    confident = sorted(rows, key=lambda r: (r["confidence"] is None, -(r["confidence"] or 0), r["trace_id"]))
    return {"failing": failing, "attributed": len(rows), "unattributed": max(failing - len(rows), 0),
            "agents": agents, "top": confident[:top]}


def attribution_summary_map(*, project: Project, insight_ids: Iterable[int],
                            top: int = SUMMARY_TOP_ROWS) -> dict[int, dict]:
    """{insight pk: summary} (see attribution_summary_for_insight) for many insights in two queries: the failing
    traces each insight holds statements of, and those traces' successful attributions, one per trace."""
    insight_ids = list(insight_ids)
    if not insight_ids:
        return {}
    # An insight's members are the traces of its statements (node or system level: a pk only ever matches its
    # own level's column); statements whose feedback was marked wrong make no trace a member.
    statements = InsightStatement.objects.filter(
        Q(node_insight_id__in=insight_ids) | Q(system_insight_id__in=insight_ids), project=project,
        excluded=False, trace__outcome=Trace.Outcome.FAILURE)
    wanted = set(insight_ids)
    members: dict[int, set[int]] = defaultdict(set)
    for node_insight, system_insight, trace in (statements.order_by()
                                                .values_list("node_insight_id", "system_insight_id", "trace_id")
                                                .distinct()):
        for insight_id in (node_insight, system_insight):
            if insight_id in wanted:
                members[insight_id].add(trace)
    chosen: dict[int, dict] = {}
    attributions = (Attribution.objects.filter(project=project, status=Attribution.Status.OK,
                                               trace_id__in=statements.order_by().values("trace_id"))
                    .exclude(agent="")
                    .values("trace_id", "trace__trace_id", "method", "agent", "span_id", "step_index",
                            "confidence", "reason", "details__low_confidence", "details__fallback"))
    for a in attributions:
        current = chosen.get(a["trace_id"])
        if current is not None and _method_rank(current["method"]) <= _method_rank(a["method"]):
            continue
        chosen[a["trace_id"]] = {
            "trace_id": a["trace__trace_id"], "method": a["method"], "agent": a["agent"], "span_id": a["span_id"],
            "step_index": a["step_index"], "confidence": a["confidence"], "reason": a["reason"],
            # SQLite hands JSON booleans back as 0/1
            "low_confidence": bool(a["details__low_confidence"]),
            "fallback": a["details__fallback"] if isinstance(a["details__fallback"], str) else "",
        }
    return {insight_id: _summary(failing=len(members.get(insight_id, ())), top=top,
                                 rows=[chosen[t] for t in members.get(insight_id, ()) if t in chosen])
            for insight_id in insight_ids}


def attribution_summary_for_insight(*, project: Project, insight: Insight, top: int = SUMMARY_TOP_ROWS) -> dict:
    """Where the insight's failing traces went wrong: {"failing": its failing member traces, "attributed": those
    with an attribution (status ok; by the preferred method when several attributed a trace), "agents": [{agent,
    count, mean_confidence, low_confidence (how many), fallback}] most blamed first, "top": the `top` most confident
    rows [{trace_id, method, agent, span_id, step_index, confidence, low_confidence, fallback, reason}],
    "unattributed": failing member traces with no attribution yet}."""
    if insight.project_id != project.pk:
        return _summary(failing=0, rows=[], top=top)
    return attribution_summary_map(project=project, insight_ids=[insight.pk], top=top)[insight.pk]
