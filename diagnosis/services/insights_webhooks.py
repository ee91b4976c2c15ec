"""The `insight.created` / `insight.regressed` webhook bodies of an insights build, built here (diagnosis owns the
data) and handed to clear.webhooks inside the build's transaction: a build that fails sends nothing."""

from collections.abc import Iterator

from django.conf import settings

from clear.webhooks.events import webhook_events_emit_safely
from diagnosis.models import DiagnosisRun, Insight, InsightOccurrence


def _insight_body(insight: Insight) -> dict:
    return {
        "id": insight.pk, "level": insight.level, "node": insight.node, "title": insight.title,
        "description": insight.description, "severity": insight.severity, "status": insight.status,
        "review": insight.review, "count": insight.count, "trace_count": insight.trace_count,
        "frequency": insight.frequency, "first_seen": insight.first_seen, "last_seen": insight.last_seen,
        "reopen_count": insight.reopen_count, "regressed": bool(insight.regressed_in_release),
        "regressed_in_release": insight.regressed_in_release or None, "url": f"/api/v1/insights/{insight.pk}/",
    }


def insight_webhook_body(insight: Insight) -> dict:
    return _insight_body(insight)


def _occurrence_body(occurrence: InsightOccurrence) -> dict:
    return {"run": str(occurrence.run_id), "count": occurrence.count, "trace_count": occurrence.trace_count,
            "judged": occurrence.judged, "frequency": occurrence.frequency}


def insights_built_webhooks_emit(*, run: DiagnosisRun, created: list[int], matched: list[int],
                                 reopened: list[int]) -> None:
    """`insight.created` for each new insight of the build, `insight.regressed` for each insight reopened by it or
    whose frequency rose by CLEAR_INSIGHT_REGRESSION_DELTA or more since the last earlier run it occurred in.
    Rejected and ignored insights (people said they are not problems), node insights a system insight holds and
    outlier findings alone not associated with failure send nothing. Never raises."""
    webhook_events_emit_safely(
        project_id=run.project_id, context=f"event=insight.* run={run.pk}",
        events=lambda: _events(run=run, created=created, matched=matched, reopened=reopened))


def _not_a_problem_of_its_own():
    """One problem, one webhook: a node insight a system insight holds is told through that one (its body's
    nodes are on the insight's page), and outlier findings alone not associated with failure are no problem."""
    from diagnosis.selectors.problems import nested_in, outlier_alone_unassociated

    systems = Insight.objects.filter(level=Insight.Level.SYSTEM, is_other=False, merged_into__isnull=True).exclude(
        review=Insight.Review.REJECTED).exclude(status=Insight.Status.IGNORED)
    return nested_in(systems) | outlier_alone_unassociated()


def _events(*, run: DiagnosisRun, created: list[int], matched: list[int], reopened: list[int]
            ) -> Iterator[tuple[str, dict]]:
    threshold = settings.CLEAR_INSIGHT_REGRESSION_DELTA
    wanted = set(created) | set(matched) | set(reopened)
    insights = (Insight.objects.filter(pk__in=wanted, project_id=run.project_id, is_other=False)
                .exclude(review=Insight.Review.REJECTED).exclude(status=Insight.Status.IGNORED)
                .exclude(_not_a_problem_of_its_own()).in_bulk())
    current = {o.insight_id: o for o in InsightOccurrence.objects.filter(run=run, insight_id__in=insights)}
    run_body = {"id": str(run.pk), "name": run.name, "release": run.release, "url": f"/api/v1/runs/{run.pk}/"}
    for insight_id in created:
        insight = insights.get(insight_id)
        if insight is not None:
            yield "insight.created", {
                "insight": _insight_body(insight), "run": run_body,
                "occurrence": _occurrence_body(current[insight_id]) if insight_id in current else None}
    for insight_id in sorted((set(matched) | set(reopened)) - set(created)):
        insight, now = insights.get(insight_id), current.get(insight_id)
        if insight is None or now is None:
            continue
        previous = (InsightOccurrence.objects.filter(insight_id=insight_id, run__created_at__lt=run.created_at)
                    .exclude(run=run).order_by("-run__created_at").first())
        if insight_id in reopened:
            reason = "reopened"
        elif previous is not None and now.frequency - previous.frequency >= threshold:
            reason = "frequency"
        else:
            continue
        yield "insight.regressed", {
            "reason": reason, "insight": _insight_body(insight), "run": run_body,
            "occurrence": _occurrence_body(now),
            "previous": _occurrence_body(previous) if previous is not None else None, "threshold": threshold}
