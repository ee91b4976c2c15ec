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


def row_confident(*, status: str, details: dict | None) -> bool:
    """An attribution names one agent only when it is confident: a learned one under its threshold is stored
    inconclusive with its candidates (details["confident"] false); the other methods carry no threshold."""
    details = details if isinstance(details, dict) else {}
    # An older learned row under its threshold (low_confidence) named a baseline's guess: not an answer either.
    return (status == Attribution.Status.OK and details.get("confident", True) is not False
            and not details.get("low_confidence"))


def _summary(*, failing: int, rows: list[dict], top: int | None) -> dict:
    confident_rows = [r for r in rows if r["confident"]]
    by_agent: dict[str, list[dict]] = defaultdict(list)
    for row in confident_rows:
        by_agent[row["agent"]].append(row)
    agents = []
    for agent, blamed in by_agent.items():
        confidences = [r["confidence"] for r in blamed if r["confidence"] is not None]
        agents.append({"agent": agent, "count": len(blamed),
                       "mean_confidence": sum(confidences) / len(confidences) if confidences else None})
    agents.sort(key=lambda a: (-a["count"], -(a["mean_confidence"] or 0), a["agent"]))
    # The insight names one agent only when most of its confident answers do; otherwise the candidates speak.
    blamed = agents[0]["agent"] if agents and agents[0]["count"] * 2 > len(confident_rows) else None
    candidates: dict[str, dict] = {}
    for row in rows:
        for rank, candidate in enumerate(row["candidates"] if not row["confident"] else
                                         [{"agent": row["agent"], "share": row["confidence"] or 0.0,
                                           "evidence": row["evidence"]}]):
            entry = candidates.setdefault(candidate["agent"], {"agent": candidate["agent"], "traces": 0, "first": 0,
                                                               "share": 0.0, "evidence": Counter()})
            entry["traces"] += 1
            entry["first"] += rank == 0
            entry["share"] += float(candidate.get("share") or 0.0)
            entry["evidence"].update(candidate.get("evidence") or [])
    # Ranked as the confident answers are (most traces first), then by share: a candidate on top of most traces
    # leads one that is top in one trace with a large share.
    ranked = sorted(candidates.values(), key=lambda c: (-c["first"], -c["share"], c["agent"]))
    for entry in ranked:
        entry["mean_share"] = round(entry.pop("share") / max(1, len(rows)), 3)
        entry["evidence"] = [text for text, _ in entry["evidence"].most_common(3)]
    ordered = sorted(rows, key=lambda r: (not r["confident"], r["confidence"] is None, -(r["confidence"] or 0),
                                          r["trace_id"]))
    return {"failing": failing, "attributed": len(rows), "unattributed": max(failing - len(rows), 0),
            "confident": blamed is not None, "blamed": blamed, "confident_count": len(confident_rows),
            "unconfident_count": len(rows) - len(confident_rows), "agents": agents,
            "candidates": ranked[:SUMMARY_TOP_ROWS], "top": ordered[:top]}


def _candidates(details: dict) -> list[dict]:
    found = details.get("candidates") if isinstance(details, dict) else None
    return [{"agent": str(c.get("agent") or ""), "step": c.get("step"), "span_id": str(c.get("span_id") or ""),
             "share": c.get("share") if c.get("share") is not None else c.get("score"),
             "evidence": [str(e) for e in (c.get("evidence") or c.get("reasons") or [])][:4]}
            for c in (found or []) if isinstance(c, dict) and c.get("agent")]


def attribution_summary_map(*, project: Project, insight_ids: Iterable[int],
                            top: int | None = SUMMARY_TOP_ROWS) -> dict[int, dict]:
    """{insight pk: summary} (see attribution_summary_for_insight) for many insights in two queries: the failing
    traces each insight holds statements of, and those traces' attributions, one per trace."""
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
    # A confident answer (status ok) or an unconfident one that still has candidates (status inconclusive).
    attributions = (Attribution.objects.filter(project=project, trace_id__in=statements.order_by().values("trace_id"),
                                               status__in=(Attribution.Status.OK, Attribution.Status.INCONCLUSIVE))
                    .values("trace_id", "trace__trace_id", "method", "status", "agent", "span_id", "step_index",
                            "confidence", "reason", "details"))
    for a in attributions:
        details = a["details"] if isinstance(a["details"], dict) else {}
        confident = row_confident(status=a["status"], details=details) and bool(a["agent"])
        candidates = _candidates(details)
        if a["status"] == Attribution.Status.INCONCLUSIVE and not candidates:
            continue  # named nothing and no candidates (an LLM method's "no step"): nothing to show
        current = chosen.get(a["trace_id"])
        if current is not None and _method_rank(current["method"]) <= _method_rank(a["method"]):
            continue
        chosen[a["trace_id"]] = {
            "trace_id": a["trace__trace_id"], "method": a["method"], "confident": confident,
            "agent": a["agent"] if confident else "", "span_id": a["span_id"] if confident else "",
            "step_index": a["step_index"] if confident else None, "confidence": a["confidence"],
            "reason": a["reason"], "evidence": [str(e) for e in details.get("evidence") or []][:4],
            "candidates": [] if confident else candidates[:3],
        }
    return {insight_id: _summary(failing=len(members.get(insight_id, ())), top=top,
                                 rows=[chosen[t] for t in members.get(insight_id, ()) if t in chosen])
            for insight_id in insight_ids}


def attribution_summary_for_insight(*, project: Project, insight: Insight,
                                    top: int | None = SUMMARY_TOP_ROWS) -> dict:
    """Where the insight's failing traces went wrong: {"failing": its failing member traces, "attributed": those
    with an attribution (confident, or unconfident with candidates; the preferred method's when several attributed
    a trace), "confident": whether one agent is blamed ("blamed": it, the agent most of the confident answers name;
    null otherwise), "confident_count" / "unconfident_count", "agents": [{agent, count, mean_confidence}] over the
    confident answers, most blamed first, "candidates": [{agent, traces, first, mean_share, evidence}] over every
    answer (an unconfident one's candidates, a confident one's agent), "top": the `top` rows [{trace_id, method,
    confident, agent, span_id, step_index, confidence, reason, evidence, candidates}] confident first,
    "unattributed": failing member traces with no attribution yet}."""
    if insight.project_id != project.pk:
        return _summary(failing=0, rows=[], top=top)
    return attribution_summary_map(project=project, insight_ids=[insight.pk], top=top)[insight.pk]


def attribution_brief_for_insight(*, project: Project, insight: Insight) -> dict:
    """The insight's attribution as the insight detail API shows it beside its figures: {"confident", "blamed" (the
    agent, null when not confident), "step" (when confident: the most confident answer naming that agent, {trace_id,
    step_index, span_id, confidence, evidence}; else null), "candidates" (when not confident: [{agent, traces,
    first, mean_share, evidence}]; else empty), "failing", "attributed", "confident_count", "unconfident_count"}.
    Never one agent without confidence: the candidates speak instead."""
    # every row (top=None), so the blamed agent's best answer is among them whatever the other agents' confidences
    summary = attribution_summary_for_insight(project=project, insight=insight, top=None)
    step = None
    if summary["confident"]:
        # `top` is ordered confident first, most confident first: the blamed agent's best answer
        row = next(r for r in summary["top"] if r["confident"] and r["agent"] == summary["blamed"])
        step = {"trace_id": row["trace_id"], "step_index": row["step_index"], "span_id": row["span_id"],
                "confidence": row["confidence"], "evidence": row["evidence"]}
    return {"confident": summary["confident"], "blamed": summary["blamed"], "step": step,
            "candidates": [] if summary["confident"] else summary["candidates"],
            **{key: summary[key] for key in ("failing", "attributed", "confident_count", "unconfident_count")}}
