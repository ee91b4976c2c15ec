"""Reads of traces and spans, always scoped to a project."""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Min, Q, QuerySet, Sum

from clear.projects.models import Project
from traces.models import Span, Trace


def trace_list(*, project: Project, release: str | None = None, outcome: str | None = None) -> QuerySet[Trace]:
    traces = Trace.objects.filter(project=project)
    if release:
        traces = traces.filter(release=release)
    if outcome:
        traces = traces.filter(outcome=outcome)
    return traces.order_by("-start_time", "-pk")


def trace_get(*, project: Project, trace_id: str) -> Trace | None:
    return Trace.objects.filter(project=project, trace_id=trace_id.lower()).first()


def span_list_for_trace(*, project: Project, trace: Trace) -> QuerySet[Span]:
    return Span.objects.filter(project=project, trace=trace).order_by("start_time", "pk")


@dataclass(frozen=True)
class ReleaseStats:
    release: str
    traces: int
    failures: int

    @property
    def failure_rate(self) -> float | None:
        return self.failures / self.traces if self.traces else None


@dataclass(frozen=True)
class ProjectTraceStats:
    traces: int
    failures: int
    successes: int
    spans: int
    input_tokens: int
    output_tokens: int
    releases: list[ReleaseStats]

    @property
    def failure_rate(self) -> float | None:
        judged = self.failures + self.successes
        return self.failures / judged if judged else None


def trace_stats(*, project: Project) -> ProjectTraceStats:
    totals = Trace.objects.filter(project=project).aggregate(
        traces=Count("pk"),
        failures=Count("pk", filter=Q(outcome=Trace.Outcome.FAILURE)),
        successes=Count("pk", filter=Q(outcome=Trace.Outcome.SUCCESS)),
        spans=Sum("span_count"),
        input_tokens=Sum("input_tokens"),
        output_tokens=Sum("output_tokens"),
    )
    releases = [
        ReleaseStats(release=row["release"] or "(none)", traces=row["traces"], failures=row["failures"])
        for row in Trace.objects.filter(project=project).values("release").annotate(
            traces=Count("pk"), failures=Count("pk", filter=Q(outcome=Trace.Outcome.FAILURE))
        ).order_by("release")
    ]
    return ProjectTraceStats(
        traces=totals["traces"] or 0, failures=totals["failures"] or 0, successes=totals["successes"] or 0,
        spans=totals["spans"] or 0, input_tokens=totals["input_tokens"] or 0,
        output_tokens=totals["output_tokens"] or 0, releases=releases,
    )


def release_first_received(*, project: Project, releases: list[str]) -> dict[str, datetime]:
    """When Clear first received a trace of each release ({release: datetime}); releases with no trace are absent."""
    rows = (Trace.objects.filter(project=project, release__in=releases).values("release")
            .annotate(first=Min("first_received_at")))
    return {row["release"]: row["first"] for row in rows}
