"""People's decisions on insights, kept across later runs: confirm / reject (review), status (open, acknowledged,
fixed, ignored), merge, split, and feedback marked wrong. Every decision is an InsightEvent.

Why they survive: a run's clusters are matched to the stored insights whatever their review or status (a rejected
pattern matches its rejected insight again and stays hidden); a merged-away insight keeps its centroid and resolves
to its target; a split family divides the statements of any cluster matched to one of its members by nearest
centroid; a corrected feedback's (trace, judge, target) gives no statements any more (diagnosis/insights/).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from django.db import transaction
from django.utils import timezone

from clear.projects.models import Project
from diagnosis.insights.embedding import centroid_bytes, centroid_of, vectors_for
from diagnosis.insights.errors import (
    InsightInvalidError,
    InsightMergeInvalidError,
    InsightNotFoundError,
    InsightSplitInvalidError,
    InsightStatementNotFoundError,
)
from diagnosis.insights.recompute import (
    centroid_recompute,
    headline_refresh,
    links_recompute,
    occurrence_recompute,
    statements_of,
)
from diagnosis.insights.trend import trend_refresh
from diagnosis.models import (
    DiagnosisRun,
    Feedback,
    FeedbackCorrection,
    Insight,
    InsightEvent,
    InsightEvidence,
    InsightLink,
    InsightOccurrence,
    InsightStatement,
)


def _own(project: Project, insight: Insight) -> Insight:
    if insight is None or insight.project_id != project.pk:
        raise InsightNotFoundError(f"No insight {getattr(insight, 'pk', None)} in this project")
    return insight


def _locked(project: Project, insight: Insight) -> Insight:
    Project.objects.select_for_update().filter(pk=project.pk).first()
    return Insight.objects.get(pk=_own(project, insight).pk)


def _review(*, project: Project, insight: Insight, review: str, user, note: str) -> Insight:
    with transaction.atomic():
        insight = _locked(project, insight)
        if insight.is_other:
            raise InsightInvalidError("The \"other\" bucket holds statements that fit no insight; review those "
                                      "insights, or split statements off it, instead")
        previous = insight.review
        insight.review, insight.reviewed_by, insight.reviewed_at = review, user, timezone.now()
        insight.review_note = note or ""
        insight.save(update_fields=["review", "reviewed_by", "reviewed_at", "review_note", "updated_at"])
        InsightEvent.objects.create(insight=insight, kind=review, user=user, data={"previous": previous, "note": note})
    return insight


def insight_confirm(*, project: Project, insight: Insight, user=None, note: str = "") -> Insight:
    """A person confirms the pattern is real."""
    return _review(project=project, insight=insight, review=Insight.Review.CONFIRMED, user=user, note=note)


def insight_reject(*, project: Project, insight: Insight, user=None, note: str = "") -> Insight:
    """A person says the pattern is not a real problem: hidden from default lists, and later runs that find it
    again update it without showing it."""
    return _review(project=project, insight=insight, review=Insight.Review.REJECTED, user=user, note=note)


def insight_status_set(*, project: Project, insight: Insight, status: str, user=None, note: str = "") -> Insight:
    """open / acknowledged / fixed / ignored. A fixed insight whose pattern comes back in a later run is reopened."""
    if status not in Insight.Status.values:
        raise InsightInvalidError(f"status must be one of {', '.join(Insight.Status.values)}; got {status!r}")
    with transaction.atomic():
        insight = _locked(project, insight)
        previous = insight.status
        insight.status = status
        insight.save(update_fields=["status", "updated_at"])
        InsightEvent.objects.create(insight=insight, kind="status", user=user,
                                    data={"previous": previous, "status": status, "note": note})
        from diagnosis.tickets.services import ticket_sync_from_insight  # its ticket follows (reopened too)

        ticket_sync_from_insight(insight=insight)
    return insight


def _runs_of(statements) -> list[DiagnosisRun]:
    return list(DiagnosisRun.objects.filter(pk__in=statements.values("run_id")).order_by("created_at"))


def _refresh(insight: Insight, runs: list[DiagnosisRun]) -> None:
    for run in runs:
        occurrence_recompute(insight=insight, run=run)
    headline_refresh(insight=insight)


def insight_merge(*, project: Project, source: Insight, target: Insight, user=None) -> Insight:
    """Fold `source` into `target` (same level and node): statements, evidence, occurrences and links move, the
    target's centroid becomes the count-weighted mean. `source` stays as a merged-away record (hidden) whose
    centroid keeps resolving its pattern to `target` in later runs."""
    with transaction.atomic():
        source, target = _locked(project, source), _locked(project, target)
        if source.pk == target.pk:
            raise InsightMergeInvalidError("An insight cannot be merged into itself")
        if source.level != target.level or source.node != target.node:
            raise InsightMergeInvalidError(
                f"Only insights of one level and node merge: {source.level}/{source.node or '-'} vs "
                f"{target.level}/{target.node or '-'}")
        if source.is_other or target.is_other:
            raise InsightMergeInvalidError("The \"other\" bucket cannot be merged; split statements off it instead")
        if source.merged_into_id or target.merged_into_id:
            raise InsightMergeInvalidError("One of the insights was merged into another already")
        field = "node_insight" if source.level == Insight.Level.NODE else "system_insight"
        moved = InsightStatement.objects.filter(**{field: source})
        runs = _runs_of(moved)
        weights = (source.count or 1, target.count or 1)
        moved.update(**{field: target})
        InsightEvidence.objects.filter(insight=source).update(insight=target)
        InsightOccurrence.objects.filter(insight=source).delete()
        for link in InsightLink.objects.filter(node=source):
            InsightLink.objects.update_or_create(system_id=link.system_id, node=target,
                                                 defaults={"shared": link.shared, "share": link.share,
                                                           "run_id": link.run_id})
        for link in InsightLink.objects.filter(system=source):
            InsightLink.objects.update_or_create(system=target, node_id=link.node_id,
                                                 defaults={"shared": link.shared, "share": link.share,
                                                           "run_id": link.run_id})
        InsightLink.objects.filter(node=source).delete()
        InsightLink.objects.filter(system=source).delete()
        a, b = centroid_of(source.centroid), centroid_of(target.centroid)
        if a is not None and b is not None and a.shape == b.shape:
            target.centroid = centroid_bytes(weights[0] * a + weights[1] * b)
        target.first_seen = min(filter(None, [source.first_seen, target.first_seen]), default=None)
        target.last_seen = max(filter(None, [source.last_seen, target.last_seen]), default=None)
        _refresh(target, runs)
        target.save()
        source.merged_into = target
        source.save(update_fields=["merged_into", "updated_at"])
        InsightEvent.objects.create(insight=source, kind="merged", user=user, data={"into": target.pk})
        InsightEvent.objects.create(insight=target, kind="merged", user=user, data={"from": source.pk})
        trend_refresh(project_id=project.pk)
    return target


def insight_split(*, project: Project, insight: Insight, statement_ids: list[int], user=None,
                  title: str = "") -> Insight:
    """Move the given statements (InsightStatement ids held by `insight` at its level) to a new insight of the same
    level and node. Both get centroids from their statements; in later runs the statements of any cluster matched
    to either are divided between them by nearest centroid."""
    from diagnosis.clustering import distinctive_terms, fingerprint
    from diagnosis.insights.groups import clip

    ids = sorted({int(i) for i in statement_ids or []})
    with transaction.atomic():
        insight = _locked(project, insight)
        if insight.merged_into_id:
            raise InsightSplitInvalidError("This insight was merged into another; split that one")
        if not ids:
            raise InsightSplitInvalidError("Choose the statements to split off (statement_ids)")
        held = statements_of(insight)
        moved = held.filter(pk__in=ids)
        found = set(moved.values_list("pk", flat=True))
        if len(found) != len(ids):
            missing = sorted(set(ids) - found)
            raise InsightStatementNotFoundError(f"{len(missing)} statement(s) are not held by insight {insight.pk}",
                                                extra={"missing": missing[:100]})
        if held.exclude(pk__in=ids).count() == 0 and not insight.is_other:
            raise InsightSplitInvalidError("Splitting off every statement would leave the insight empty")
        field = "node_insight" if insight.level == Insight.Level.NODE else "system_insight"
        runs = _runs_of(moved)
        rows = list(moved.values_list("pk", "text", "vector_key"))
        vectors = vectors_for(keys=[k for _, _, k in rows], texts=[t for _, t, _ in rows])
        mean = vectors.astype(np.float64).mean(axis=0)
        centroid = mean / (np.linalg.norm(mean) or 1.0)
        medoid = rows[int(np.argmax(vectors @ centroid))][1]
        kept = Counter(held.exclude(pk__in=ids).values_list("text", flat=True))
        terms_new, terms_kept = distinctive_terms([list(Counter(t for _, t, _ in rows).items()), list(kept.items())])
        new = Insight.objects.create(
            project=project, level=insight.level, node=insight.node, title=(title or clip(medoid))[:300],
            description=f"Split from insight {insight.pk} by a person. Typical: \u201c{medoid}\u201d",
            terms=terms_new, severity=insight.severity, split_from=None if insight.is_other else insight,
            fingerprint=fingerprint(terms_new, insight.node, insight.level), centroid=centroid_bytes(centroid),
            embedding_model=insight.embedding_model, first_seen=insight.first_seen, last_seen=insight.last_seen,
            first_run=insight.first_run, last_run=insight.last_run,
        )
        moved_ids = [pk for pk, _, _ in rows]
        InsightStatement.objects.filter(pk__in=moved_ids).update(**{field: new})
        InsightEvidence.objects.filter(insight=insight, statement_id__in=moved_ids).update(insight=new)
        _refresh(new, runs)
        _refresh(insight, runs)
        if not insight.is_other:
            insight.terms = terms_kept
            insight.fingerprint = fingerprint(terms_kept, insight.node, insight.level)
            centroid_recompute(insight=insight)
        new.save()
        insight.save()
        if insight.level == Insight.Level.NODE:
            links_recompute(node_insight=new)
            if not insight.is_other:
                links_recompute(node_insight=insight)
        else:
            nodes = InsightStatement.objects.filter(pk__in=moved_ids).exclude(node_insight=None)
            for node_insight in Insight.objects.filter(pk__in=nodes.values("node_insight_id")):
                links_recompute(node_insight=node_insight)
        InsightEvent.objects.create(insight=insight, kind="split", user=user,
                                    data={"into": new.pk, "statements": len(moved_ids)})
        InsightEvent.objects.create(insight=new, kind="created", user=user,
                                    data={"split_from": insight.pk, "statements": len(moved_ids)})
        trend_refresh(project_id=project.pk)
    return new


def feedback_mark_wrong(*, project: Project, feedback: Feedback, note: str, user) -> FeedbackCorrection:
    """Record that a judge's feedback is wrong. Its statements, and those of the same judge on the same trace and
    target in later runs, are excluded from clustering from the next build on (`build_insights --force`
    rebuilds a run now)."""
    if feedback is None or feedback.project_id != project.pk:
        raise InsightNotFoundError(f"No feedback {getattr(feedback, 'pk', None)} in this project")
    with transaction.atomic():
        correction, _ = FeedbackCorrection.objects.update_or_create(
            feedback=feedback, defaults={"project": project, "note": note or "", "created_by": user})
        same = Feedback.objects.filter(project=project, trace_id=feedback.trace_id, judge=feedback.judge,
                                       target_span_id=feedback.target_span_id)
        InsightStatement.objects.filter(feedback__in=same).update(excluded=True)
    return correction
