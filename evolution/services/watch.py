"""Closing the loop (issue #11 item 4): after a promotion the release carrying the fix is recorded (`InsightFix`); each
diagnosis run whose insights are built is checked against the fixes still watched. Among the run's judged traces of
that release or of releases Clear first received after the promotion, an insight under CLEAR_INSIGHT_FIXED_BELOW
(over at least CLEAR_INSIGHT_FIXED_MIN_JUDGED traces) is marked fixed through the insights service, so its ticket
closes. When the pattern comes back, the insights build reopens the insight (and the tickets service its ticket);
the check then records the fix as reopened.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from evolution.models import AuditEvent, EvolutionJob, InsightFix, JobState
from evolution.services.jobs import JobStateError

logger = logging.getLogger(__name__)
F = InsightFix.Status


def insight_fix_record(*, job: EvolutionJob, release: str, commit: str = "") -> InsightFix:
    """The promoted job's fix is carried by `release` (the service.version its traces report)."""
    fix, _ = InsightFix.objects.update_or_create(job=job, defaults={
        "project_id": job.project_id, "insight_id": job.insight_id, "release": release[:200], "commit": commit[:40],
        "promoted_at": timezone.now(), "status": F.WATCHING})
    return fix


def evolution_job_mark_merged(*, job: EvolutionJob, user, release: str, commit: str = "") -> InsightFix:
    """A PR_OPENED job's branch was merged and shipped as `release`: watch that release for the insight's pattern."""
    if job.state != JobState.PR_OPENED:
        raise JobStateError(f"Job {job.pk} is {job.state}; only a job whose PR was opened can be marked merged",
                            extra={"state": job.state})
    if not release.strip():
        raise JobStateError("release: name the release (service.version of its traces) that ships the merged fix",
                            code="release_missing")
    with transaction.atomic():
        fix = insight_fix_record(job=job, release=release.strip(),
                                 commit=commit or (job.best_iteration.candidate_commit if job.best_iteration else ""))
        AuditEvent.objects.create(job=job, actor=f"user:{user.pk}" if user else "system", event="merged",
                                  from_state=job.state, to_state=job.state,
                                  data={"release": fix.release, "commit": fix.commit})
    return fix


def _qualifying(*, fix: InsightFix, judged_by_release: dict[str, int], first_received: dict) -> list[str]:
    return [release for release in judged_by_release
            if release == fix.release or (first_received.get(release) and first_received[release] > fix.promoted_at)]


def insight_fixes_check(*, run_id) -> list[dict]:
    """Check every watched fix of the run's project against the run's insights; returns what was decided."""
    from diagnosis.models import DiagnosisRun, Insight, InsightOccurrence
    from diagnosis.services.insights_review import insight_status_set
    from traces.selectors import release_first_received

    run = DiagnosisRun.objects.select_related("project").filter(pk=run_id, insights_status="done").first()
    if run is None:
        return []
    fixes = list(InsightFix.objects.filter(project=run.project, status__in=[F.WATCHING, F.FIXED])
                 .select_related("insight"))
    if not fixes:
        return []
    judged_by_release = dict((run.insights_summary or {}).get("judged_by_release") or {})
    first_received = release_first_received(project=run.project, releases=list(judged_by_release))
    below, min_judged = settings.CLEAR_INSIGHT_FIXED_BELOW, settings.CLEAR_INSIGHT_FIXED_MIN_JUDGED
    decisions = []
    for fix in fixes:
        insight = fix.insight
        while insight.merged_into_id:  # a merged insight's pattern lives on in the one it went into
            insight = Insight.objects.get(pk=insight.merged_into_id)
        releases = _qualifying(fix=fix, judged_by_release=judged_by_release, first_received=first_received)
        judged = sum(judged_by_release[r] for r in releases)
        if not judged:
            continue
        occurrence = InsightOccurrence.objects.filter(insight=insight, run=run).first()
        affected = sum((occurrence.releases or {}).get(r, 0) for r in releases) if occurrence else 0
        evidence = {"run": str(run.pk), "releases": releases, "judged": judged, "affected": affected,
                    "frequency": round(affected / judged, 4), "below": below, "min_judged": min_judged}
        decision = {"fix": fix.pk, "insight": insight.pk, **evidence}
        if fix.status == F.FIXED:
            if insight.status != Insight.Status.FIXED and fix.fixed_run_id != run.pk:
                fix.status, fix.reopened_run, fix.evidence = F.REOPENED, run, evidence
                fix.save(update_fields=["status", "reopened_run", "evidence", "updated_at"])
                decision["decision"] = "reopened"
                logger.info("evolution.fix_reopened fix=%s insight=%s run=%s", fix.pk, insight.pk, run.pk)
            else:
                decision["decision"] = "still_fixed"
        elif judged >= min_judged and affected / judged < below:
            if insight.status != Insight.Status.FIXED:
                insight_status_set(project=run.project, insight=insight, status=Insight.Status.FIXED, note=(
                    f"fixed by evolution job {fix.job_id}: {affected}/{judged} judged traces of release(s) "
                    f"{', '.join(releases)} in run {run.pk} (below {below})"))
            fix.status, fix.fixed_run, fix.evidence = F.FIXED, run, evidence
            fix.save(update_fields=["status", "fixed_run", "evidence", "updated_at"])
            decision["decision"] = "fixed"
            logger.info("evolution.fix_confirmed fix=%s insight=%s run=%s", fix.pk, insight.pk, run.pk)
        else:
            fix.evidence = evidence
            fix.save(update_fields=["evidence", "updated_at"])
            decision["decision"] = "not_yet" if judged < min_judged else "still_occurring"
        decisions.append(decision)
    return decisions
