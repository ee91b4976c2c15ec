"""Diagnosis runs: choose the traces, then fan out one task per trace with at most N in flight.

Life of a run: `diagnosis_run_start` (traces chosen, rows written, start task enqueued on commit) →
`diagnosis_run_begin` (claims queued → running, computes per-node baselines, dispatches) → `run_trace_process` per
trace (claims the item, judges, writes Feedback get-or-create, marks done, dispatches the next) → the last item to
finish marks the run succeeded. Cancellation and the budget stop the run; open items become "skipped". Every step
is a conditional update, so redelivered tasks find nothing left to do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from diagnosis import conf
from diagnosis.errors import DiagnosisRunFinishedError
from diagnosis.facts import diagnosis_run_finished_publish
from diagnosis.judges.rules.outliers import node_stats_compute
from diagnosis.models import DiagnosisRun, Feedback, RunTrace
from diagnosis.services.judging import (
    budget_exceeded,
    feedback_write,
    judge_plan_build,
    run_totals_add,
    trace_results,
)
from diagnosis.services.contrastive import contrastive_run_judge_safely
from diagnosis.services.run_start import diagnosis_run_start, judges_resolve, run_start_send, trace_sampled
from diagnosis.services.judging_reuse import item_reuse, reusable_item
from diagnosis.services.trace_view import trace_view_build
from traces.models import Span
from traces.selectors import trace_days_for
from traces.services.lifecycle import trace_judged_mark

logger = logging.getLogger(__name__)

Status = DiagnosisRun.Status
ItemStatus = RunTrace.Status
_STATS_SPAN_LIMIT = 200_000
_NEEDS_STATS = {"rule.latency_outlier", "rule.token_outlier"}


def _send_items(item_ids: list[int]) -> None:
    from diagnosis.tasks import judge_trace as judge_trace_task

    for item_id in item_ids:
        try:
            judge_trace_task.delay(str(item_id))
        except Exception:  # noqa: BLE001 - the sweep re-sends items whose message was lost
            logger.exception("diagnosis.enqueue_failed item=%s", item_id)
            return


def tasks_run_inline() -> bool:
    from clear.celery import app

    return bool(app.conf.task_always_eager)


def node_stats_build(*, run: DiagnosisRun) -> dict:
    """Per-node medians and MADs of span duration and tokens over the run's traces (the outlier rules' baseline)."""
    traces = RunTrace.objects.filter(run=run).values("trace_id")
    days = trace_days_for(project=run.project_id, trace_pks=traces)  # only their days' span partitions
    spans = Span.objects.filter(trace_id__in=traces, trace_day__in=days)
    rows = spans.values_list("node", "kind", "tool_name", "start_time", "end_time", "input_tokens", "output_tokens")
    return node_stats_from_rows(rows[:_STATS_SPAN_LIMIT].iterator(chunk_size=5000))


def node_stats_from_rows(rows) -> dict:
    def convert():
        for node, kind, tool, start, end, tokens_in, tokens_out in rows:
            duration = (end - start).total_seconds() * 1000 if end else None
            tokens = None if tokens_in is None and tokens_out is None else (tokens_in or 0) + (tokens_out or 0)
            yield node, kind, tool, duration, tokens

    return node_stats_compute(convert())


def diagnosis_run_begin(*, run_id, progress: Callable[[DiagnosisRun], None] | None = None) -> None:
    """Claim a queued run and start its fan-out; in-process (no broker) when tasks run eagerly."""
    claimed = DiagnosisRun.objects.filter(pk=run_id, status=Status.QUEUED).update(
        status=Status.RUNNING, started_at=timezone.now()
    )
    run = DiagnosisRun.objects.filter(pk=run_id).first()
    if run is None or run.status != Status.RUNNING:
        return
    if (claimed or not run.node_stats) and _NEEDS_STATS & set(run.judges):
        run.node_stats = node_stats_build(run=run)
        DiagnosisRun.objects.filter(pk=run.pk).update(node_stats=run.node_stats)
    if claimed:
        logger.info("diagnosis.run_started run=%s traces=%d", run.pk, run.total_count)
    if progress is not None or tasks_run_inline():
        run_items_execute(run_id=run.pk, progress=progress)
    else:
        diagnosis_run_dispatch(run_id=run.pk)
    run_finish_if_complete(run_id=run.pk)


def diagnosis_run_execute(*, run: DiagnosisRun,
                          progress: Callable[[DiagnosisRun], None] | None = None) -> DiagnosisRun:
    """Run a queued run to the end in this process, one trace after another (`manage.py diagnose --inline`)."""
    diagnosis_run_begin(run_id=run.pk, progress=progress or (lambda _run: None))
    run.refresh_from_db()
    return run


def run_items_execute(*, run_id, progress: Callable[[DiagnosisRun], None] | None) -> None:
    while True:
        item_id = (RunTrace.objects.filter(run_id=run_id, status=ItemStatus.PENDING).order_by("pk")
                   .values_list("pk", flat=True).first())
        if item_id is None:
            return
        taken = RunTrace.objects.filter(pk=item_id, status=ItemStatus.PENDING).update(
            status=ItemStatus.QUEUED, dispatched_at=timezone.now())
        if taken:  # another process may have taken it first
            try:
                run_trace_process(item_id=item_id, dispatch_next=False)
            except Exception as exc:  # noqa: BLE001 - one broken trace must not stop the others
                logger.exception("diagnosis.trace_failed item=%s", item_id)
                run_trace_fail(item_id=item_id, error=f"{type(exc).__name__}: {exc}", dispatch_next=False)
        run = DiagnosisRun.objects.get(pk=run_id)
        if progress is not None:
            progress(run)
        if run.status != Status.RUNNING:
            return


def diagnosis_run_dispatch(*, run_id) -> int:
    """Queue pending traces up to the concurrency cap; returns how many were sent."""
    with transaction.atomic():
        run = DiagnosisRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.status != Status.RUNNING:
            return 0
        cap = max(1, int((run.config or {}).get("concurrency") or conf.judge_concurrency()))
        in_flight = RunTrace.objects.filter(run=run, status__in=RunTrace.IN_FLIGHT).count()
        free = cap - in_flight
        if free <= 0:
            return 0
        ids = list(RunTrace.objects.filter(run=run, status=ItemStatus.PENDING).order_by("pk")
                   .values_list("pk", flat=True)[:free])
        if not ids:
            return 0
        RunTrace.objects.filter(pk__in=ids, status=ItemStatus.PENDING).update(
            status=ItemStatus.QUEUED, dispatched_at=timezone.now())
        transaction.on_commit(lambda: _send_items(ids))
    return len(ids)


def _items_skip(*, run_id, statuses) -> int:
    skipped = RunTrace.objects.filter(run_id=run_id, status__in=statuses).update(
        status=ItemStatus.SKIPPED, finished_at=timezone.now())
    if skipped:
        DiagnosisRun.objects.filter(pk=run_id).update(skipped_count=F("skipped_count") + skipped)
    return skipped


def _run_stop(*, run_id, status: str, message: str = "") -> bool:
    """Move an active run to a final status and skip its traces not yet started; False if it had finished."""
    with transaction.atomic():
        stopped = DiagnosisRun.objects.filter(pk=run_id, status__in=DiagnosisRun.ACTIVE).update(
            status=status, finished_at=timezone.now(), failure_message=message[:5000])
        if stopped:
            _items_skip(run_id=run_id, statuses=(ItemStatus.PENDING, ItemStatus.QUEUED))
            diagnosis_run_finished_publish(run_id=run_id)
    if stopped:
        logger.info("diagnosis.run_stopped run=%s status=%s", run_id, status)
    return bool(stopped)


def diagnosis_run_cancel(*, run: DiagnosisRun) -> DiagnosisRun:
    """Stop a run: traces not started are skipped, running trace tasks notice and stop before writing."""
    if not _run_stop(run_id=run.pk, status=Status.CANCELLED):
        run.refresh_from_db()
        raise DiagnosisRunFinishedError(f"Run {run.pk} has already finished ({run.status}); nothing to cancel")
    run.refresh_from_db()
    return run


def diagnosis_run_fail(*, run_id, error: str) -> None:
    _run_stop(run_id=run_id, status=Status.FAILED, message=error)


def run_finish_if_complete(*, run_id) -> bool:
    """Mark a non-continuous run succeeded once none of its traces is open."""
    if RunTrace.objects.filter(run_id=run_id, status__in=RunTrace.OPEN).exists():
        return False
    # Run-level judges see every judged trace; before the run is marked finished, so its feedback counts with the
    # rest and is there when the insights are built (either path: the build is requested below).
    contrastive_run_judge_safely(run_id=run_id)
    status, message = _final_status(run_id=run_id)
    with transaction.atomic():
        finished = DiagnosisRun.objects.filter(pk=run_id, status=Status.RUNNING, continuous=False).update(
            status=status, finished_at=timezone.now(), failure_message=message)
        if finished:
            diagnosis_run_finished_publish(run_id=run_id)
    if finished:
        logger.info("diagnosis.run_finished run=%s status=%s", run_id, status)
    _insights_request(run_id)
    return bool(finished)


def _final_status(*, run_id) -> tuple[str, str]:
    """Succeeded when every judge that ran produced a verdict (errors beside them are shown as "finished with
    errors"). Failed when there were errors and not one verdict (every model call failed, and no rule judge ran),
    or when a requested judge produced errors and no verdict (issue 43: a run whose LLM judges all failed must fail
    CI, even when the rule judges gave verdicts); the failure message names that judge, and the other judges'
    feedback is kept."""
    run = DiagnosisRun.objects.get(pk=run_id)
    if not run.error_count:
        return Status.SUCCEEDED, ""
    from diagnosis.selectors.runs import run_errors_by_cause, run_judges_without_verdict

    silent = run_judges_without_verdict(run=run)
    retry = "re-judge these traces (diagnose --retry-errors, or Re-judge errored traces on the run page)."
    if Feedback.objects.filter(run_id=run_id, status=Feedback.Status.OK).exists():
        if not silent:
            return Status.SUCCEEDED, ""
        return Status.FAILED, ("; ".join(judge["label"] for judge in silent)
                               + f". The other judges' verdicts are kept. Fix the cause, then {retry}")
    groups = run_errors_by_cause(project=run.project, run=run)
    model_feedback = Feedback.objects.filter(run_id=run_id).exclude(model="")
    calls, errored = model_feedback.count(), model_feedback.filter(status=Feedback.Status.ERROR).count()
    by_cause = ", ".join(f"{group['cause']} {group['count']}" for group in groups)
    what = f"{errored} of {calls} model calls failed" if calls else f"{run.error_count} judge errors"
    return Status.FAILED, f"No judge produced a verdict: {what} ({by_cause}). Fix the cause, then {retry}"


def _insights_request(run_id) -> None:
    """A run that ended (succeeded or out of budget) with no trace still open gets its insights built, once."""
    from diagnosis.services.insights import insights_run_request

    try:
        insights_run_request(run_id=run_id)
    except Exception:  # noqa: BLE001 - insights are derived data; the sweep asks again
        logger.exception("diagnosis.insights_request_failed run=%s", run_id)


def _item_skip(item_id: int, run_id) -> None:
    with transaction.atomic():
        skipped = RunTrace.objects.filter(pk=item_id, status__in=RunTrace.OPEN).update(
            status=ItemStatus.SKIPPED, finished_at=timezone.now())
        if skipped:
            DiagnosisRun.objects.filter(pk=run_id).update(skipped_count=F("skipped_count") + 1)


def run_trace_process(*, item_id: int, dispatch_next: bool = True) -> None:
    """Judge one trace of a run. Safe to run twice (redelivery): Feedback is get-or-create on its unique key and
    only the first completion counts towards progress and spend."""
    started = timezone.now()
    claimed = RunTrace.objects.filter(pk=item_id, status__in=RunTrace.IN_FLIGHT).update(
        status=ItemStatus.RUNNING, started_at=started, attempts=F("attempts") + 1)
    if not claimed:
        # Done or skipped already: a redelivered copy. The first copy may have died after its result committed and
        # before it queued the next traces (a killed worker), so this one does that part: otherwise the run waits for
        # a trace nobody was sent. Dispatching is capped and finishing is conditional, so doing it twice is harmless.
        run_id = RunTrace.objects.filter(pk=item_id).values_list("run_id", flat=True).first()
        if run_id is not None and DiagnosisRun.objects.filter(pk=run_id, status=Status.RUNNING).exists():
            _after_item(run_id=run_id, dispatch_next=dispatch_next)
        return
    item = RunTrace.objects.select_related("trace").get(pk=item_id)
    # Before the spans are read: a resend that lands while the judges work leaves the trace "changed since judged".
    trace_judged_mark(trace_pk=item.trace_id, at=started)
    run = DiagnosisRun.objects.get(pk=item.run_id)

    def still_running() -> DiagnosisRun | None:
        current = DiagnosisRun.objects.get(pk=run.pk)
        if current.status != Status.RUNNING:
            return None
        if budget_exceeded(current):
            _run_stop(run_id=run.pk, status=Status.BUDGET_EXHAUSTED)
            return None
        return current

    if still_running() is None:
        _item_skip(item_id, run.pk)
        _after_item(run_id=run.pk, dispatch_next=dispatch_next)
        return
    plan = judge_plan_build(run=run)
    source = reusable_item(run=run, trace_pk=item.trace_id, plan=plan)  # a continuous run: judged by a full run
    if source is not None and item_reuse(item_id=item_id, run_id=run.pk, source=source, plan=plan):
        _after_item(run_id=run.pk, dispatch_next=dispatch_next)
        return
    trace_view = trace_view_build(trace=item.trace)
    outcome = trace_results(run=run, trace=trace_view, plan=plan, still_running=still_running)
    with transaction.atomic():
        locked = DiagnosisRun.objects.select_for_update().get(pk=run.pk)
        # Cancelled while judging: the user asked to stop, so nothing more is written. Out of budget meanwhile:
        # these results are paid for already, so they are kept.
        if outcome is None or locked.status in (Status.CANCELLED, Status.FAILED):
            outcome = None
        else:
            totals = feedback_write(run=locked, trace_pk=item.trace_id, trace_id=item.trace.trace_id,
                                    results=outcome.results, dropped=outcome.dropped, rubric_ids=plan.rubric_ids)
            done = RunTrace.objects.filter(pk=item_id, status=ItemStatus.RUNNING).update(
                status=ItemStatus.DONE, finished_at=timezone.now())
            config = locked.config or {}
            fake_tokens = int(config.get("fake_tokens_per_trace") or 0) if done else 0
            fake_cost = float(config.get("fake_cost_per_trace") or 0) if done else 0.0
            run_totals_add(run=locked, totals=totals, extra_tokens=fake_tokens, extra_cost=fake_cost)
            if done:
                DiagnosisRun.objects.filter(pk=run.pk).update(done_count=F("done_count") + 1)
    if outcome is None:
        _item_skip(item_id, run.pk)
    elif outcome.budget_refused:
        _run_stop(run_id=run.pk, status=Status.BUDGET_EXHAUSTED)
    _after_item(run_id=run.pk, dispatch_next=dispatch_next)


def run_trace_fail(*, item_id: int, error: str, dispatch_next: bool = True) -> None:
    """Give up on one trace (its task kept crashing): skipped, with the error counted on the run."""
    item = RunTrace.objects.filter(pk=item_id).select_related("trace").first()
    if item is None:
        return
    with transaction.atomic():
        run = DiagnosisRun.objects.select_for_update().get(pk=item.run_id)
        skipped = RunTrace.objects.filter(pk=item_id, status__in=RunTrace.OPEN).update(
            status=ItemStatus.SKIPPED, finished_at=timezone.now())
        if skipped:
            entry = {"trace_id": item.trace.trace_id, "judge": "", "error": error[:500], "cause": "task_failed"}
            DiagnosisRun.objects.filter(pk=run.pk).update(
                skipped_count=F("skipped_count") + 1, error_count=F("error_count") + 1,
                errors=(run.errors + [entry])[:100])
    _after_item(run_id=item.run_id, dispatch_next=dispatch_next)


def _after_item(*, run_id, dispatch_next: bool) -> None:
    if dispatch_next:
        diagnosis_run_dispatch(run_id=run_id)
    run_finish_if_complete(run_id=run_id)


def diagnosis_runs_sweep(*, now: datetime | None = None) -> int:
    """Re-send work whose message was lost (broker down at commit, purged queue); tasks are idempotent, so a
    message that was only slow does no harm. Returns how many messages were sent."""
    now = now or timezone.now()
    stale = now - timedelta(seconds=conf.redispatch_seconds())
    sent = 0
    active = [run_id for run_id, config in DiagnosisRun.objects.filter(status__in=DiagnosisRun.ACTIVE)
              .values_list("pk", "config") if not (config or {}).get("inline")]
    for run_id in DiagnosisRun.objects.filter(pk__in=active, status=Status.QUEUED, created_at__lt=stale) \
            .values_list("pk", flat=True):
        run_start_send(run_id)
        sent += 1
    items = list(RunTrace.objects.filter(run_id__in=active, run__status=Status.RUNNING,
                                         status__in=RunTrace.IN_FLIGHT, dispatched_at__lt=stale)
                 .values_list("pk", flat=True)[:1000])
    if items:
        RunTrace.objects.filter(pk__in=items).update(dispatched_at=now)
        _send_items(items)
        sent += len(items)
    for run_id in DiagnosisRun.objects.filter(pk__in=active, status=Status.RUNNING).values_list("pk", flat=True):
        diagnosis_run_dispatch(run_id=run_id)
        run_finish_if_complete(run_id=run_id)
    return sent


__all__ = [
    "diagnosis_run_begin",
    "diagnosis_run_cancel",
    "diagnosis_run_dispatch",
    "diagnosis_run_execute",
    "diagnosis_run_fail",
    "diagnosis_run_start",
    "diagnosis_runs_sweep",
    "judges_resolve",
    "node_stats_build",
    "run_finish_if_complete",
    "run_trace_fail",
    "run_trace_process",
    "trace_sampled",
]
