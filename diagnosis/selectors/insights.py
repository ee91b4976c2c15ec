"""Insights (the recurring failure patterns built from a run's statements): lists, ranking, one insight's evidence,
statements, trend and links."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Case, Count, F, FloatField, IntegerField, QuerySet, Value, When

from clear.db import row_by_id
from clear.projects.models import Project
from diagnosis.models import DiagnosisRun, Insight, InsightEvidence, InsightLink, InsightOccurrence, InsightStatement


def insight_list(*, project: Project, level: str | None = None, node: str | None = None,
                 severity: str | list[str] | None = None, status: str | list[str] | None = None,
                 release: str | None = None, run: DiagnosisRun | None = None, review: str | None = None,
                 include_rejected: bool = False, include_other: bool = True,
                 include_merged: bool = False, include_by_design: bool = False, nested: bool = False) -> QuerySet:
    """The project's insights, most recently seen and most frequent first. Rejected insights, insights merged
    into another, by-design behaviour (Insight.by_design: what a step does on every call, no problem) and outlier
    findings alone not associated with failure (problems.py) are hidden unless asked for (or `review="rejected"`);
    "other" buckets (statements that fit no cluster) are listed unless include_other=False (a system bucket holding
one node's bucket again is not: problems.py). release / run: insights
    that occurred in traces of that release / in that run. nested (no level given): one row per problem, a node
    insight a listed system insight holds is left out (insight_nodes_map lists it under that one)."""
    from diagnosis.selectors.problems import nested_in, outlier_alone_unassociated

    insights = Insight.objects.filter(project=project)
    if level:
        insights = insights.filter(level=level)
    if node is not None:
        insights = insights.filter(node=node)
    if severity:
        insights = insights.filter(severity__in=[severity] if isinstance(severity, str) else list(severity))
    if status:
        insights = insights.filter(status__in=[status] if isinstance(status, str) else list(status))
    if review:
        insights = insights.filter(review=review)
    elif not include_rejected:
        insights = insights.exclude(review=Insight.Review.REJECTED)
    if not include_merged:
        insights = insights.filter(merged_into__isnull=True)
    if not include_by_design:
        insights = insights.filter(by_design=False)
    if not include_other:
        insights = insights.filter(is_other=False)
    else:  # an "other" bucket a re-clustering emptied (its statements now in insights) is no row
        from diagnosis.selectors.problems import other_emptied, other_repeating_a_node

        insights = insights.exclude(other_emptied()).exclude(other_repeating_a_node())
    if run is not None:
        insights = insights.filter(occurrences__run=run)
    if release is not None:
        insights = insights.filter(occurrences__releases__has_key=release)
    if review != Insight.Review.REJECTED:
        insights = insights.exclude(outlier_alone_unassociated())
    if nested and not level:
        insights = insights.exclude(nested_in(insights.filter(level=Insight.Level.SYSTEM)))
    return insights.distinct().annotate(not_associated=not_associated_with_failure()).order_by(
        "is_other", "not_associated", "-last_seen", "-frequency", "-count", "pk")


def not_associated_with_failure():
    """1 for an insight whose lift interval includes 1 (it shows in succeeding traces as often as in failing ones),
    or that is by-design behaviour: listed after those associated with failure, or whose association is unknown
    (too few successes to compare). As Insight.failure_association: without a lift the association is unknown."""
    return Case(When(by_design=True, then=Value(1)),
                When(lift__isnull=False, lift_low__isnull=False, lift_low__lte=1, then=Value(1)), default=Value(0),
                output_field=IntegerField())


def insight_list_top(*, project: Project, limit: int = 8) -> list[Insight]:
    """The overview's top insights: open insights of both levels associated with failure or of unknown association
    (one that shows in succeeding traces as often is no top problem; the Insights page still lists it), by
    frequency; one row per problem: a node insight an open system insight holds is under it (`nested_nodes`), not
    a row of its own."""
    from diagnosis.selectors.problems import insight_nodes_map

    top = list(insight_list(project=project, status=Insight.Status.OPEN, include_other=False, nested=True)
               .filter(not_associated=0).order_by("-frequency", "-count", "pk")[:limit])
    nodes = insight_nodes_map(project=project, system_pks=[i.pk for i in top if i.level == Insight.Level.SYSTEM])
    for insight in top:
        insight.nested_nodes = nodes.get(insight.pk, [])
    return top


def insight_list_ranked(*, project: Project, level: str | None = None, node: str | None = None,
                        severity: str | None = None, status: str | None = None,
                        release: str | None = None, include_by_design: bool = False,
                        nested: bool = False) -> QuerySet:
    """insight_list with `rank`: the frequency, with patterns not associated with failure (lift interval including
    1) after those associated or of unknown association, and "other" buckets (statements that fit no pattern) last
    (frequency is at most 1, so the offsets keep the groups apart), so one keyset field orders the list."""
    insights = insight_list(project=project, level=level, node=node, severity=severity, status=status,
                            release=release, include_by_design=include_by_design, nested=nested)
    return insights.annotate(rank=Case(When(is_other=True, then=F("frequency") - 4),
                                       When(by_design=True, then=F("frequency") - 2),
                                       When(lift_low__isnull=False, lift_low__lte=1, then=F("frequency") - 2),
                                       default=F("frequency"), output_field=FloatField()))


def insight_count_by_node(*, project: Project) -> dict[str, int]:
    """{node: listed node-level insights} (rejected, merged-away and "other" buckets aside); one query."""
    rows = (insight_list(project=project, level=Insight.Level.NODE, include_other=False).order_by()
            .values("node").annotate(n=Count("pk", distinct=True)).values_list("node", "n"))
    return dict(rows)


def insight_get(*, project: Project, insight_id) -> Insight:
    from diagnosis.insights.errors import InsightNotFoundError

    insight = row_by_id(Insight.objects.filter(project=project), insight_id)
    if insight is None:
        raise InsightNotFoundError(f"No insight {insight_id} in this project")
    return insight


def insight_evidence_list(*, project: Project, insight, run: DiagnosisRun | None = None) -> QuerySet:
    """Verified citations of the insight (and of insights merged into it), newest run first and, within a run,
    citations from failing traces first (`outcome_rank`: 0 failure, 1 no recorded outcome, 2 success): a quote from
    a run that succeeded shows the pattern, not what made a run fail."""
    evidence = InsightEvidence.objects.filter(insight__project=project, insight=insight)
    if run is not None:
        evidence = evidence.filter(run=run)
    rank = Case(When(trace__outcome="failure", then=Value(0)), When(trace__outcome="success", then=Value(2)),
                default=Value(1), output_field=IntegerField())
    return (evidence.select_related("trace", "run").annotate(outcome_rank=rank)
            .order_by("-run__created_at", "outcome_rank", "trace_id", "span_id", "pk"))


def insight_evidence_of_figures_run(*, project: Project, insight) -> QuerySet:
    """The citations the insight's page and its ticket show: those of the run its figures come from (last_run), so
    the statements, traces and citations they give are of one run; all runs' when that run cited none (figures
    that only an incremental refresh grew)."""
    evidence = insight_evidence_list(project=project, insight=insight)
    if insight.last_run_id is not None:
        of_run = evidence.filter(run_id=insight.last_run_id)
        if of_run.exists():
            return of_run
    return evidence


def insight_statement_list(*, project: Project, insight, run: DiagnosisRun | None = None,
                           include_excluded: bool = False) -> QuerySet:
    """The statements the insight holds (at its level), e.g. to choose the ones to split off."""
    field = "node_insight" if insight.level == Insight.Level.NODE else "system_insight"
    statements = InsightStatement.objects.filter(project=project, **{field: insight})
    if run is not None:
        statements = statements.filter(run=run)
    if not include_excluded:
        statements = statements.filter(excluded=False)
    return statements.select_related("trace").order_by("run_id", "trace_id", "feedback_id", "position")


@dataclass
class InsightTrend:
    by_release: list[dict]  # [{release, count, judged, frequency, run}], see diagnosis/insights/trend.py
    by_run: list[dict]  # [{run, run_name, release, created_at, count, traces, judged, frequency, lift}]


def insight_trend(*, project: Project, insight) -> InsightTrend:
    from diagnosis.insights.trend import trend_by_run

    insight = insight_get(project=project, insight_id=insight.pk)
    return InsightTrend(by_release=list(insight.trend or []), by_run=trend_by_run(insight=insight))


def insight_links(*, project: Project, insight) -> QuerySet:
    """Node-level insights a system insight contains, or system insights a node insight belongs to."""
    links = InsightLink.objects.filter(system__project=project)
    if insight.level == Insight.Level.SYSTEM:
        return links.filter(system=insight).select_related("node").order_by("-shared")
    return links.filter(node=insight).select_related("system").order_by("-shared")


def insight_link_pairs(*, project: Project, system_pks: list[int]) -> list[tuple[int, int]]:
    """(system insight pk, node insight pk) of every link of these system insights; one query."""
    return list(InsightLink.objects.filter(system__project=project, system_id__in=system_pks)
                .values_list("system_id", "node_id"))


def insight_occurrences_of_run(*, project: Project, run: DiagnosisRun) -> QuerySet:
    """Each insight's figures in one run (one row per insight that occurred in it; "other" buckets left out)."""
    return (InsightOccurrence.objects.filter(run=run, insight__project=project, insight__is_other=False)
            .select_related("insight"))


def insight_release_figures(*, insight: Insight, release: str) -> dict:
    """The insight in one release, from its trend by release: {release, count, judged, frequency, run}; zeros when
    no run with insights judged that release."""
    row = next((r for r in insight.trend or [] if r.get("release") == release), None)
    return row or {"release": release, "count": 0, "judged": 0, "frequency": 0.0, "run": None}
