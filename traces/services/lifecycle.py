"""The end of a trace's life: an outcome set by the API, and deletion (API, UI, retention).

Deleting a trace removes its spans, scores and everything other apps derived from it (database cascade). The apps
that counted it take it out of their counts in the same transaction, through their deletion hooks (traces/hooks.py;
diagnosis: its runs' counts and their insights), and react later to the `trace.deleted` fact. Every deletion goes
through `traces_delete`.

Retention is not a user's deletion. A project keeps traces for its `retention_days`, or when that is empty for
CLEAR_RETENTION_DAYS (empty: forever, so an upgrade never deletes data; 0 on a project: forever for that project).
Expired traces go in batches; the hooks are told (`expired=True`) so that what was measured on them stays as it was
(diagnosis: runs' counts, insights' figures and tickets are frozen), and each leaves an ExpiredTrace row so that a
link to it says it expired instead of "no such trace". The daily beat task enforces it; `manage.py
enforce_retention --dry-run` says how many traces would go.

On Postgres the spans of a day past the longest retention of any project go first, by dropping that day's partition
(traces/services/partitions.py), so the batches that follow delete trace rows, not millions of span rows one by one;
a project with a shorter retention has its spans deleted with its traces, in the batches.
"""

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from clear.errors import ClearError
from clear.projects.models import Project
from traces.facts import traces_deleted_publish
from traces.hooks import trace_delete_hooks
from traces.models import ExpiredTrace, Trace
from traces.selectors.retention import retention_days_effective, span_partitions_expired, traces_expired
from traces.services.partitions import span_partitions_drop

logger = logging.getLogger(__name__)

RETENTION_BATCH = 500


def trace_judged_mark(*, trace_pk: int, at: datetime) -> None:
    """Diagnosis started judging the trace at `at` (the time it read the spans): a resend that changes the trace
    later makes it "changed since judged"."""
    Trace.objects.filter(pk=trace_pk).update(judged_at=at)


def traces_content_changed(*, trace_pks: set[int], at: datetime) -> None:
    """Stored content of these traces changed (a resend, a late span): only those judged already are marked, so
    the clean write path pays nothing; the caller skips the call when none was judged."""
    if trace_pks:
        Trace.objects.filter(pk__in=trace_pks, judged_at__isnull=False).update(content_changed_at=at)


class TraceOutcomeInvalidError(ClearError):
    code = "outcome_invalid"


def trace_outcome_set(*, trace: Trace, outcome: str | None = None, score: float | None = None) -> Trace:
    """Record the caller's verdict on a trace. It replaces the outcome and score taken from the root span or a
    score (source "api"), and later spans or scores no longer change it (ingest and finalize respect "api")."""
    if outcome is None and score is None:
        raise TraceOutcomeInvalidError("Send an outcome (success or failure), a score from 0 to 1, or both.")
    if outcome is not None and outcome not in Trace.Outcome.values:
        raise TraceOutcomeInvalidError(f"The outcome is success or failure, not {outcome!r}.")
    if score is not None and not 0 <= score <= 1:
        raise TraceOutcomeInvalidError(f"The score is a number from 0 to 1, not {score}.")
    if outcome is None:
        outcome = Trace.Outcome.SUCCESS if score >= 0.5 else Trace.Outcome.FAILURE  # as an outcome score reads
    with transaction.atomic():
        # Finalisation holds this row's lock while it derives the outcome; wait for it instead of racing it.
        locked = Trace.objects.select_for_update().get(pk=trace.pk)
        locked.outcome, locked.score, locked.outcome_source = outcome, score, "api"
        locked.save(update_fields=["outcome", "score", "outcome_source"])
    return locked


def trace_delete(*, project: Project, trace: Trace) -> None:
    """Delete one trace of `project` and everything derived from it (the API and the UI call this)."""
    traces_delete(project=project, trace_pks=[trace.pk])


def traces_delete(*, project: Project, trace_pks: list[int], expired_days: int | None = None) -> int:
    """Delete traces of `project` by primary key, with their derived data, in one transaction; returns how many.

    The apps that counted the traces are told synchronously before and after the cascade (traces/hooks.py) and
    asynchronously by the `trace.deleted` fact, published in this transaction. `expired_days`: the traces expired
    under that retention (module docstring): the hooks are told, and each trace leaves an ExpiredTrace row."""
    with transaction.atomic():
        rows = list(Trace.objects.select_for_update().filter(project=project, pk__in=trace_pks)
                    .order_by("pk").values_list("pk", "trace_id"))
        pks = [pk for pk, _ in rows]
        if not pks:
            return 0
        expired = expired_days is not None
        afters = [(name, after) for name, hook in trace_delete_hooks()
                  if (after := hook(project=project, trace_pks=pks, expired=expired)) is not None]
        if expired:
            now = timezone.now()
            ExpiredTrace.objects.bulk_create(
                [ExpiredTrace(project=project, trace_id=trace_id, expired_at=now, retention_days=expired_days)
                 for _, trace_id in rows], ignore_conflicts=True)
        Trace.objects.filter(pk__in=pks).delete()
        hooks_data = {name: data for name, after in afters if (data := after())}
        traces_deleted_publish(project_id=project.pk, trace_pks=pks, hooks_data=hooks_data)
    logger.info("traces.deleted project=%s traces=%d hooks=%s", project.pk, len(pks), sorted(hooks_data))
    return len(pks)


def traces_retention_enforce(*, now: datetime | None = None, batch: int = RETENTION_BATCH, dry_run: bool = False,
                             projects: list[Project] | None = None) -> list[dict]:
    """Delete every project's expired traces, `batch` traces per transaction (or, with dry_run, only count them);
    returns one {"project", "days", "traces"} per project with a retention."""
    now = now or timezone.now()
    report = []
    if projects is None and not dry_run:
        expired_days = span_partitions_expired(now=now)
        if expired_days:
            # Every trace of those days is expired for its project: the loop below deletes their rows.
            span_partitions_drop(days=expired_days)
    for project in projects if projects is not None else Project.objects.order_by("slug"):
        old = traces_expired(project=project, now=now)
        if old is None:
            continue
        days = retention_days_effective(project=project)
        if dry_run:
            report.append({"project": project.slug, "days": days, "traces": old.count()})
            continue
        deleted = 0
        while True:
            pks = list(old.order_by("pk").values_list("pk", flat=True)[:batch])
            if not pks:
                break
            deleted += traces_delete(project=project, trace_pks=pks, expired_days=days)
        logger.info("traces.retention project=%s days=%d expired=%d", project.pk, days, deleted)
        report.append({"project": project.slug, "days": days, "traces": deleted})
    return report
