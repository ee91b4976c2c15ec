"""Continuous mode: judge each trace once, soon after it completes.

A trace is complete when its root span has ended and no span arrived for CLEAR_TRACE_QUIET_SECONDS. Each beat
claims complete, unclaimed traces by inserting a ContinuousMark per trace (unique on the trace, so concurrent beats
split the traces and never share one), and adds them to the project's continuous run of the day (UTC): one
DiagnosisRun per project and day, which stays running and grows; the first beat of the next day closes it once its
traces are done. Each beat also asks for the insights refresh that is due (services/insights_refresh.py).

A trace whose content changed after it was judged (a resend that changed a span, a late span: Trace.content_changed_at
after judged_at, "changed since judged") is claimed again once it is quiet: its mark moves to today's run (a
conditional update on the mark, so one beat wins), and it is judged again there; judged earlier today, its item is
reset and its feedback in that run replaced (feedback a person corrected is kept).
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.db import IntegrityError, transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from diagnosis import conf
from diagnosis.judges.contrastive import CONTRASTIVE_JUDGE
from diagnosis.models import ContinuousMark, DiagnosisRun, Feedback, RunTrace
from diagnosis.services.runs import (
    run_items_execute,
    node_stats_from_rows,
    tasks_run_inline,
    diagnosis_run_dispatch,
    judges_resolve,
)
from traces.models import Span, Trace

logger = logging.getLogger(__name__)
_STATS_REFRESH = timedelta(minutes=10)
_STATS_SPAN_LIMIT = 100_000


def complete_traces(*, now: datetime):
    """Traces whose root span ended and that have been quiet long enough, not yet claimed by continuous mode."""
    quiet_before = now - timedelta(seconds=conf.trace_quiet_seconds())
    received_after = now - timedelta(hours=conf.continuous_lookback_hours())
    root_ended = Span.objects.filter(trace=OuterRef("pk"), trace_day=OuterRef("first_received_day"),
                                     span_id=OuterRef("root_span_id"), end_time__isnull=False)
    unclaimed = ~Exists(ContinuousMark.objects.filter(trace=OuterRef("pk")))
    # Changed since judged, after its last claim, and not being judged now (its judging would not see the change).
    changed = (Q(content_changed_at__gt=F("judged_at"))
               & Exists(ContinuousMark.objects.filter(trace=OuterRef("pk"), claimed_at__lt=OuterRef("content_changed_at")))
               & ~Exists(RunTrace.objects.filter(trace=OuterRef("pk"), status__in=RunTrace.OPEN)))
    # A trace a running full run is about to judge waits for it: its verdicts are then taken, not made again
    # (services/judging_reuse.py), and the day's run never describes a release with half of them.
    judging = Exists(RunTrace.objects.filter(trace=OuterRef("pk"), status__in=RunTrace.OPEN, run__continuous=False,
                                             run__status=DiagnosisRun.Status.RUNNING))
    return (Trace.objects.filter(last_received_at__lte=quiet_before, last_received_at__gte=received_after)
            .exclude(root_span_id="").filter(Exists(root_ended)).filter(unclaimed | changed).exclude(judging))


def continuous_run_get(*, project_id, now: datetime) -> DiagnosisRun:
    key = now.astimezone(dt_timezone.utc).date().isoformat()
    run = DiagnosisRun.objects.filter(project_id=project_id, continuous=True, continuous_key=key).first()
    if run is not None:
        return run
    model = conf.judge_model()
    try:
        with transaction.atomic():
            return DiagnosisRun.objects.create(
                project_id=project_id, continuous=True, continuous_key=key, name=f"Continuous {key}",
                status=DiagnosisRun.Status.RUNNING, started_at=now, judges=[
                    # the contrastive judge compares a fixed set of traces: a rolling day has none, so it never runs
                    n for n in judges_resolve(judges=conf.continuous_judges(), model=model)
                    if n != CONTRASTIVE_JUDGE], model=model,
            )
    except IntegrityError:  # another beat created it first
        return DiagnosisRun.objects.get(project_id=project_id, continuous=True, continuous_key=key)


def _refresh_stats(*, run: DiagnosisRun, now: datetime) -> None:
    stamp = (run.config or {}).get("stats_at")
    if stamp and now - datetime.fromisoformat(stamp) < _STATS_REFRESH:
        return
    since = now - timedelta(hours=conf.continuous_lookback_hours())
    rows = (Span.objects.filter(project_id=run.project_id, trace__last_received_at__gte=since)
            .order_by("-start_time")
            .values_list("node", "kind", "tool_name", "start_time", "end_time", "input_tokens", "output_tokens"))
    stats = node_stats_from_rows(rows[:_STATS_SPAN_LIMIT].iterator(chunk_size=5000))
    run.config = {**(run.config or {}), "stats_at": now.isoformat()}
    run.node_stats = stats
    DiagnosisRun.objects.filter(pk=run.pk).update(node_stats=stats, config=run.config)


def continuous_tick(*, now: datetime | None = None) -> int:
    """Claim newly complete traces into today's continuous runs and start judging them; returns how many."""
    now = now or timezone.now()
    if not conf.continuous_enabled():
        # Switched off: past days' runs are still closed, or they would stay "running" for good.
        _close_past_days(now=now)
        return 0
    candidates = complete_traces(now=now)
    claimed_total = 0
    for project_id in list(candidates.values_list("project_id", flat=True).distinct()):
        pks = list(candidates.filter(project_id=project_id).order_by("last_received_at", "pk")
                   .values_list("pk", flat=True)[:conf.continuous_batch()])
        if not pks:
            continue
        run = continuous_run_get(project_id=project_id, now=now)
        claim = uuid.uuid4()
        with transaction.atomic():
            ContinuousMark.objects.bulk_create([ContinuousMark(trace_id=pk, run=run, claim=claim) for pk in pks],
                                               ignore_conflicts=True)
            ContinuousMark.objects.filter(trace_id__in=pks, claimed_at__lt=F("trace__content_changed_at")).update(
                claim=claim, run=run, claimed_at=timezone.now())
            mine = list(ContinuousMark.objects.filter(claim=claim).values_list("trace_id", flat=True))
            _items_add(run=run, trace_pks=mine)
        if not mine:
            continue
        claimed_total += len(mine)
        logger.info("diagnosis.continuous_claimed run=%s traces=%d", run.pk, len(mine))
        if {"rule.latency_outlier", "rule.token_outlier"} & set(run.judges):
            _refresh_stats(run=run, now=now)
        if tasks_run_inline():
            run_items_execute(run_id=run.pk, progress=None)
        else:
            diagnosis_run_dispatch(run_id=run.pk)
    _close_past_days(now=now)
    # Insights follow what has been judged, debounced (services/insights_refresh.py); the judging of this beat's
    # traces finishes later, and a later beat's refresh picks it up.
    from diagnosis.services.insights_refresh import insights_refresh_due  # not at import: naming imports services

    insights_refresh_due(now=now)
    return claimed_total


def _items_add(*, run: DiagnosisRun, trace_pks: list[int]) -> int:
    """Put the claimed traces into the run: new items, or, for a trace judged earlier in this same run, its item
    reset and its feedback there dropped so that it is judged afresh. Returns how many items are new."""
    finished = dict(RunTrace.objects.filter(run=run, trace_id__in=trace_pks).exclude(status__in=RunTrace.OPEN)
                    .values_list("trace_id", "status"))
    RunTrace.objects.bulk_create([RunTrace(run=run, trace_id=pk) for pk in trace_pks], ignore_conflicts=True)
    if finished:
        RunTrace.objects.filter(run=run, trace_id__in=finished).exclude(status__in=RunTrace.OPEN).update(
            status=RunTrace.Status.PENDING, dispatched_at=None, started_at=None, finished_at=None)
        Feedback.objects.filter(run=run, trace_id__in=finished, correction__isnull=True).delete()
        statuses = list(finished.values())
        DiagnosisRun.objects.filter(pk=run.pk).update(
            done_count=F("done_count") - statuses.count(RunTrace.Status.DONE),
            skipped_count=F("skipped_count") - statuses.count(RunTrace.Status.SKIPPED))
    new = len(trace_pks) - len(finished)
    DiagnosisRun.objects.filter(pk=run.pk).update(total_count=F("total_count") + new)
    return new


def _close_past_days(*, now: datetime) -> None:
    today = now.astimezone(dt_timezone.utc).date().isoformat()
    past = DiagnosisRun.objects.filter(continuous=True, status=DiagnosisRun.Status.RUNNING).exclude(
        continuous_key=today)
    for run_id in past.values_list("pk", flat=True):
        if not RunTrace.objects.filter(run_id=run_id, status__in=RunTrace.OPEN).exists():
            if DiagnosisRun.objects.filter(pk=run_id, status=DiagnosisRun.Status.RUNNING).update(
                    status=DiagnosisRun.Status.SUCCEEDED, finished_at=now):
                from diagnosis.services.insights_refresh import insights_refresh_final

                insights_refresh_final(run_id=run_id)
