"""Continuous insights: the day's continuous run keeps the project's insights current (issue 27, item 1; the method
is in diagnosis/insights/METHOD.md, "Continuous refresh").

`continuous_tick` calls `insights_refresh_due` on every beat. A running continuous run whose judged traces changed
since its last refresh (done count, newest feedback) and whose last refresh finished CLEAR_INSIGHT_REFRESH_SECONDS
ago or more is marked queued by a conditional update on `insights_status` (so of two beats one sends) and
`diagnosis.refresh_insights` is sent after commit. The task claims queued → running the same way, so a redelivered
message does nothing. The refresh works over a window: the run's judged traces received in the last
CLEAR_CONTINUOUS_LOOKBACK_HOURS, the newest CLEAR_INSIGHT_WINDOW_TRACES of them.

- Incremental (the usual case): only the feedback judged since the last refresh is read; its statements' vectors come
  from the embedding cache; each joins the insight of its most similar placed statement (insights/incremental.py)
  and the touched insights' figures for this run grow by what joined (recompute.py occurrence_extend): the cost
  follows the new statements and the run's distinct texts, not its traces. No model is called, nothing is created;
  only reopened insights' tickets are synced at once, the others' figures follow at the next re-clustering.
- Full, a re-clustering (the first refresh of a run, then while statements judged since the last one wait: after
  CLEAR_INSIGHT_RECLUSTER_SECONDS at most, at once when they are a tenth of what the last one clustered): the window is clustered and written as a full run's build is
  (services/insights.py `_build`, names asked of the model before the project's lock is taken, never inside the
  transaction), under `RefreshRules`, with sticky membership (insights/sticky.py): what the previous re-clustering
  placed stays, and a new insight needs a statement it did not see.

Hysteresis, so tickets and webhooks do not flap as the window slides: sticky membership (above); a refresh never marks
an insight fixed, never closes a ticket, drops no insight and retires none as absorbed (only a full run's rules do);
a fixed insight reopens
only when two refreshes in a row see it at a frequency of CLEAR_INSIGHT_FIXED_BELOW or more; `insight.created` is
sent when a refresh creates an insight and `insight.regressed` when it reopens one, never for a frequency that
rises and falls with the window. The state lives on the run: insights_finished_at is the last refresh, and
insights_summary["refresh"] the rest.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from clear.projects.models import Project
from diagnosis import conf
from diagnosis.insights.embedding import embedder_get, statement_vectors
from diagnosis.insights.identity import insights_resolved
from diagnosis.insights.incremental import placed_neighbours, statements_assign
from diagnosis.insights.recompute import (
    headline_extend,
    headline_refresh,
    judged_totals,
    occurrence_extend,
    occurrence_recompute,
)
from diagnosis.insights.statements import Draft, statements_collect
from diagnosis.insights.trend import trend_refresh
from diagnosis.models import DiagnosisRun, Feedback, Insight, InsightEvent, InsightStatement, RunTrace
from diagnosis.services.insights import (
    RESEND_SECONDS,
    STALE_SECONDS,
    RefreshRules,
    _build,
    _known,
    insights_run_lock,
    refreshed_run_mark,
)
from diagnosis.services.insights_regressed import insights_regressed_apply
from diagnosis.services.insights_webhooks import insights_built_webhooks_emit

logger = logging.getLogger(__name__)
REOPEN_AFTER = 2  # refreshes in a row that must see a fixed insight at FIXED_BELOW or more before it reopens


def refresh_seconds() -> float:
    return float(getattr(settings, "CLEAR_INSIGHT_REFRESH_SECONDS", 120.0))


def window_traces() -> int:
    return int(getattr(settings, "CLEAR_INSIGHT_WINDOW_TRACES", 5000))


def recluster_seconds() -> float:
    return float(getattr(settings, "CLEAR_INSIGHT_RECLUSTER_SECONDS", 300.0))


def _state(run: DiagnosisRun) -> dict:
    return dict((run.insights_summary or {}).get("refresh") or {})


def _signature(run: DiagnosisRun) -> list:
    newest = Feedback.objects.filter(run=run).aggregate(m=Max("pk"))["m"] or 0
    return [run.done_count, newest]


def _send(run_id) -> None:
    from diagnosis.tasks import refresh_insights

    try:
        refresh_insights.delay(str(run_id))
    except Exception:  # noqa: BLE001 - the next beat asks again once the request is stale
        logger.exception("insights.refresh_enqueue_failed run=%s", run_id)


def insights_refresh_request(*, run_id, now: datetime | None = None, force: bool = False,
                             recluster: bool = False) -> bool:
    """Queue a refresh of a running continuous run when it is due (force: whenever none is queued or running;
    recluster: and make it a re-clustering). Returns True when one was queued."""
    now = now or timezone.now()
    run = DiagnosisRun.objects.filter(pk=run_id, continuous=True, status=DiagnosisRun.Status.RUNNING).first()
    if run is None:
        return False
    busy_since = run.insights_started_at or now
    if run.insights_status == "queued" and now - busy_since < timedelta(seconds=RESEND_SECONDS):
        return False
    if run.insights_status == "running" and now - busy_since < timedelta(seconds=STALE_SECONDS):
        return False
    if not force:
        last = run.insights_finished_at
        if last is not None and now - last < timedelta(seconds=refresh_seconds()):
            return False
        if _signature(run) == _state(run).get("signature"):
            return False
    changes = {}
    if recluster:
        summary = dict(run.insights_summary or {})
        summary["refresh"] = {**_state(run), "recluster_asked": True}
        changes["insights_summary"] = summary
    if not DiagnosisRun.objects.filter(pk=run.pk, insights_status=run.insights_status,
                                       insights_started_at=run.insights_started_at).update(
            insights_status="queued", insights_started_at=now, **changes):
        return False
    transaction.on_commit(lambda: _send(run.pk))
    return True


def insights_refresh_due(*, now: datetime | None = None) -> int:
    """Queue the refreshes that are due (the beat, after claiming traces); returns how many."""
    now = now or timezone.now()
    runs = DiagnosisRun.objects.filter(continuous=True, status=DiagnosisRun.Status.RUNNING)
    return sum(insights_refresh_request(run_id=pk, now=now) for pk in runs.values_list("pk", flat=True))


def insights_refresh_final(*, run_id) -> bool:
    """The day's run just closed: one last refresh for what was judged since the last one (debounce or not). A run
    never refreshed is left to insights_sweep's full build, as before continuous refreshes."""
    if not DiagnosisRun.objects.filter(pk=run_id, continuous=True, insights_status__in=["done", "failed"]).update(
            insights_status="queued", insights_started_at=timezone.now()):
        return False
    transaction.on_commit(lambda: _send(run_id))
    return True


def insights_refresh_now(*, project: Project) -> bool | None:
    """"Refresh now" on the Insights page: the project's running continuous run, re-clustered as soon as a worker takes
    it. True: queued; False: a refresh is queued or running already; None: no continuous run to refresh."""
    run = DiagnosisRun.objects.filter(project=project, continuous=True, status=DiagnosisRun.Status.RUNNING) \
        .order_by("-created_at").first()
    if run is None:
        return None
    # a re-clustering: the user asks for the list as a full build would make it now
    return insights_refresh_request(run_id=run.pk, force=True, recluster=True)


def _window(run: DiagnosisRun, now: datetime) -> set[int]:
    since = now - timedelta(hours=conf.continuous_lookback_hours())
    rows = RunTrace.objects.filter(run=run, status=RunTrace.Status.DONE, trace__last_received_at__gte=since) \
        .order_by("-trace__last_received_at", "-trace_id").values_list("trace_id", flat=True)
    return set(rows[:window_traces()])


class _Reopen:
    """reopen_allowed for a refresh: a fixed insight reopens on the REOPEN_AFTER-th refresh in a row that sees it at
    CLEAR_INSIGHT_FIXED_BELOW or more; a refresh that does not see it so starts the count again."""

    def __init__(self, streak: dict) -> None:
        self.before = {int(k): int(v) for k, v in (streak or {}).items()}
        self.after: dict[int, int] = {}

    def __call__(self, insight: Insight, frequency: float) -> bool:
        if frequency < float(getattr(settings, "CLEAR_INSIGHT_FIXED_BELOW", 0.02)):
            return False
        seen = self.before.get(insight.pk, 0) + 1
        if seen >= REOPEN_AFTER:
            return True
        self.after[insight.pk] = seen
        return False


def insights_refresh(*, run_id) -> dict | None:
    """Claim a queued refresh and do it; None when another worker has it or did it."""
    now = timezone.now()
    if not DiagnosisRun.objects.filter(pk=run_id, continuous=True, insights_status="queued").update(
            insights_status="running", insights_started_at=now):
        return None
    run = DiagnosisRun.objects.get(pk=run_id)
    state = _state(run)
    state["signature"] = _signature(run)  # before reading: what arrives meanwhile makes the next refresh due
    started = time.monotonic()
    try:
        window = _window(run, now)
        newest = state["signature"][1]
        full_at = datetime.fromisoformat(state["full_at"]) if state.get("full_at") else None
        streak = state.get("reopen_streak")  # one refresh counts once, whether incremental, full or both
        asked = bool(state.pop("recluster_asked", False))
        if full_at is not None:
            _incremental(run=run, state=state, window=window, upto=newest, now=now)
        due = asked or _recluster_due(state, now, full_at)
        if full_at is None or due:
            _full(run=run, state=state, window=window, upto=newest, now=now, streak=streak)
    except Exception as exc:
        DiagnosisRun.objects.filter(pk=run_id).update(insights_status="failed", insights_finished_at=timezone.now(),
                                                      insights_error=f"{type(exc).__name__}: {exc}"[:5000])
        raise
    # After an incremental refresh only the tickets of reopened insights change at once; the others' figures follow at
    # the next re-clustering (ticket content reads each insight's evidence and traces: the most costly part).
    tickets_of = state.pop("tickets_of", None)
    state.update(at=timezone.now().isoformat(), window=len(window), seconds=round(time.monotonic() - started, 3),
                 count=int(state.get("count", 0)) + 1)
    summary = {**(state.pop("built", None) or run.insights_summary or {}), "refresh": state}
    # Written after the refresh's transaction: its time and cleared error went in with the insights (refreshed_run_mark,
    # the run's row locked before the project's as the run's judging locks them); the summary is computed after it.
    DiagnosisRun.objects.filter(pk=run_id).update(insights_summary=summary, insights_status="done",
                                                  insights_finished_at=timezone.now(), insights_error="")
    trend_refresh(project_id=run.project_id, current_run_id=run.pk)
    insights_regressed_apply(run=run)
    from diagnosis.tickets.services import ticket_sync_after_insights  # tickets follow (never raises, never closes)

    ticket_sync_after_insights(run_id=run_id, insight_ids=tickets_of)
    logger.info("insights.refreshed run=%s kind=%s window=%d new_statements=%d joined=%d pending=%d seconds=%.2f",
                run_id, state.get("kind"), len(window), state.get("new_statements", 0), state.get("joined", 0),
                state.get("pending", 0), state["seconds"])
    return summary


RECLUSTER_SHARE = 0.1  # statements since the last re-clustering, as a share of what it saw, that make one due now


def _recluster_due(state: dict, now: datetime, full_at: datetime | None) -> bool:
    """Statements wait for a re-clustering at most CLEAR_INSIGHT_RECLUSTER_SECONDS, and not at all once they are a
    tenth of what the last one clustered: a young window (the day's first traces, a new project) is cheap to
    re-cluster, and its new kinds of failure should not wait; a large one costs in proportion and waits."""
    provisional = int(state.get("provisional") or 0)
    if not provisional or full_at is None:
        return False
    if now - full_at >= timedelta(seconds=recluster_seconds()):
        return True
    return provisional >= RECLUSTER_SHARE * int(state.get("confirmed_statements") or 0)


def _prior(run: DiagnosisRun, state: dict) -> dict:
    """Where the previous re-clustering put each statement of the run (insights/sticky.py); the statements joined
    by incremental refreshes since are not in it."""
    upto = state.get("confirmed_upto")
    if not upto:
        return {}
    rows = InsightStatement.objects.filter(run=run, pk__lte=upto).values_list(
        "feedback_id", "position", "node_insight_id", "system_insight_id")
    return {f"{feedback}:{position}": (node, system) for feedback, position, node, system in rows}


def _full(*, run: DiagnosisRun, state: dict, window: set[int], upto: int, now: datetime, streak) -> None:
    reopen = _Reopen(streak)
    built = _build(run, rebuild=True, refresh=RefreshRules(window=window, upto=upto, reopen_allowed=reopen,
                                                           prior=_prior(run, state)))
    confirmed = InsightStatement.objects.filter(run=run).aggregate(m=Max("pk"))["m"] or 0
    state.pop("tickets_of", None)
    state.update(kind="full", full_at=now.isoformat(), pending=0, provisional=0, confirmed_upto=confirmed,
                 confirmed_statements=int(built.get("statements") or 0),
                 feedback_max=upto, reopen_streak=reopen.after,
                 built={k: v for k, v in built.items() if k != "refresh"},
                 created=state.get("created", 0) + built.get("new", 0), full_count=state.get("full_count", 0) + 1)


def _incremental(*, run: DiagnosisRun, state: dict, window: set[int], upto: int, now: datetime) -> None:
    """The statements of the feedback judged since the last refresh, joined to existing insights (module docstring).
    The cost follows the new statements: their vectors (cached), their nearest placed statements, the touched
    insights' occurrences."""
    # The window is applied here, not in the query: a list of every trace of the window costs more than the
    # feedback judged since the last refresh.
    drafts = [d for d in statements_collect(run=run, feedback_after=int(state.get("feedback_max") or 0),
                                            feedback_upto=upto) if d.trace_pk in window]
    embedder = embedder_get()
    vectors, keys, _ = statement_vectors([d.text for d in drafts], embedder)
    assigned = []
    if drafts:
        live = insights_resolved(_known(project_id=run.project_id, model_id=embedder.model_id))
        neighbours = placed_neighbours(run=run, live=live, cache=embedder.cache)
        assigned = statements_assign(drafts=drafts, vectors=vectors, neighbours=neighbours)
    joined = [(d, keys[i], a) for i, (d, a) in enumerate(zip(drafts, assigned)) if a.joined]
    added: dict[int, list[Draft]] = {}
    for d, _, a in joined:
        for insight_id in {a.node_insight, a.system_insight} - {None}:
            added.setdefault(insight_id, []).append(d)
    reopen = _Reopen(state.get("reopen_streak"))
    reopened: list[int] = []
    totals = judged_totals(run=run, window=window) if added else None
    with transaction.atomic():
        insights_run_lock(run_id=run.pk)
        Project.objects.select_for_update().filter(pk=run.project_id).first()  # one writer of insights per project
        InsightStatement.objects.bulk_create([
            InsightStatement(
                project_id=run.project_id, run=run, feedback_id=d.feedback_id, trace_id=d.trace_pk,
                position=d.position, kind=d.kind, text=d.text, node=d.node[:300], span_id=d.span_id[:16],
                judge=d.judge[:200], severity=d.severity, evidence=d.evidence, vector_key=key,
                node_insight_id=a.node_insight, system_insight_id=a.system_insight)
            for d, key, a in joined], batch_size=2000)
        touched = set(added)
        for insight in Insight.objects.filter(pk__in=touched).select_related("last_run"):
            rows = added[insight.pk]
            occurrence = occurrence_extend(insight=insight, run=run, added=[(d.trace_id, d.release) for d in rows],
                                           totals=totals)
            if occurrence is None:  # the insight had no statement of this run yet
                occurrence = occurrence_recompute(insight=insight, run=run, judged=totals.by_pk)
            if occurrence is None or not headline_extend(insight=insight, occurrence=occurrence,
                                                         nodes=[d.node for d in rows]):
                headline_refresh(insight=insight)
            insight.last_seen = max(filter(None, [insight.last_seen, now]))
            if insight.status == Insight.Status.FIXED and occurrence is not None \
                    and reopen(insight, occurrence.frequency):
                insight.status, insight.reopened_at = Insight.Status.OPEN, timezone.now()
                insight.reopen_count += 1
                reopened.append(insight.pk)
                InsightEvent.objects.create(insight=insight, kind="reopened", run=run,
                                            data={"traces": occurrence.trace_count, "via": "refresh"})
            insight.save()
        insights_built_webhooks_emit(run=run, created=[], matched=[], reopened=reopened)
        refreshed_run_mark(run_id=run.pk)
        trend_refresh(project_id=run.project_id, current_run_id=run.pk)  # with the figures it extended
    pending = int(state.get("pending") or 0) + sum(1 for _, a in zip(drafts, assigned) if not a.joined)
    state.update(kind="incremental", feedback_max=upto, new_statements=len(drafts), joined=len(joined),
                 pending=pending, provisional=int(state.get("provisional") or 0) + len(drafts),
                 reopen_streak=reopen.after, reopened=len(reopened),
                 tickets_of=sorted(reopened))

