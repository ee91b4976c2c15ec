"""Reads of attributions, always scoped to a project."""

from __future__ import annotations

from django.db.models import Count, QuerySet

from clear.projects.models import Project
from diagnosis.models import Insight
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


def attribution_get(*, project: Project, trace: Trace, method: str = "heuristic") -> Attribution:
    attribution = Attribution.objects.filter(project=project, trace=trace, method=method).first()
    if attribution is None:
        raise AttributionNotFoundError(f"No {method} attribution for trace {trace.trace_id}")
    return attribution


def attribution_agent_counts(*, project: Project, method: str = "heuristic") -> list[dict]:
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
