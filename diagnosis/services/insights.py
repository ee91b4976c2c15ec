"""Building insights from a finished diagnosis run (issue #6; method in diagnosis/insights/METHOD.md).

Runs that are not full (a CI gate's, sampled or filtered) keep their groups on the run and never write the project's
insights (diagnosis/insights/detached.py); full runs also retire insights another absorbed (insights/absorbed.py).

`insights_run_request` is called when a run reaches succeeded / budget_exhausted: it marks the run queued and sends
`diagnosis.build_insights` after commit (runs executed in-process are built by their caller). `insights_build` claims
the run with a conditional update on `insights_status` (so a redelivered task does nothing), then: statements from
the run's problem feedback → vectors (database cache) → clusters per node and system-wide → the model's names into
the judge cache, with no transaction open → identity against the project's insights under the project row's lock →
names (from the cache only) → rows. `insights_sweep` re-sends builds whose message was lost or whose worker died.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from clear.projects.models import Project
from diagnosis.facts import insights_built_publish
from diagnosis.insights.absorbed import insights_absorbed_retire
from diagnosis.insights.detached import groups_detached
from diagnosis.insights.embedding import centroid_of, embedder_get, statement_vectors
from diagnosis.insights.groups import group_pattern, groups_fingerprints, groups_name, pattern_fingerprint
from diagnosis.insights.held import groups_held, groups_title_pool, held_places
from diagnosis.insights.identity import Known, groups_assign, identity_threshold, insights_resolved
from diagnosis.insights.naming import NamingUsage, llm_namer_build, naming_model
from diagnosis.insights.persist import RunData, insights_write
from diagnosis.insights.recompute import judged_traces
from diagnosis.insights.statements import statements_collect
from diagnosis.insights.sticky import Prior, groups_sticky
from diagnosis.insights.trend import trend_refresh
from diagnosis.models import (
    DiagnosisRun,
    Insight,
    InsightEvidence,
    InsightOccurrence,
    InsightStatement,
)
from diagnosis.services.insights_regressed import insights_regressed_apply
from diagnosis.services.insights_webhooks import insights_built_webhooks_emit

logger = logging.getLogger(__name__)

FINISHED = (DiagnosisRun.Status.SUCCEEDED, DiagnosisRun.Status.BUDGET_EXHAUSTED)
STALE_SECONDS = 1800  # a build "running" this long lost its worker: it may be claimed again
RESEND_SECONDS = 900  # a build "queued" this long lost its message: it is sent again
SWEEP_LOOKBACK_HOURS = 48  # finished runs older than this are not built automatically (manage.py build_insights)


def _send(run_id) -> None:
    from diagnosis.tasks import build_insights as build_insights_task

    try:
        build_insights_task.delay(str(run_id))
    except Exception:  # noqa: BLE001 - insights_sweep re-sends builds left queued
        logger.exception("insights.enqueue_failed run=%s", run_id)


def insights_run_request(*, run_id) -> bool:
    """Queue the insights build of a finished run, once. Runs executed in-process (diagnose --inline) are left to
    their caller. Returns True when a build was queued."""
    run = DiagnosisRun.objects.filter(pk=run_id, status__in=FINISHED, insights_status="").only("config").first()
    if run is None or (run.config or {}).get("inline"):
        return False
    if not DiagnosisRun.objects.filter(pk=run_id, insights_status="").update(insights_status="queued",
                                                                           insights_started_at=timezone.now()):
        return False
    transaction.on_commit(lambda: _send(run_id))
    return True


def _claim(*, run_id, force: bool) -> bool:
    now = timezone.now()
    stale = Q(insights_status="running", insights_started_at__lt=now - timedelta(seconds=STALE_SECONDS))
    claimable = Q(insights_status__in=["", "queued"]) | stale
    if force:
        claimable |= Q(insights_status__in=["done", "failed"])
    return bool(DiagnosisRun.objects.filter(claimable, pk=run_id, status__in=FINISHED).update(
        insights_status="running", insights_started_at=now, insights_error=""))


def _known(*, project_id: int, model_id: str) -> list[Known]:
    rows = Insight.objects.filter(project_id=project_id, is_other=False, embedding_model=model_id[:300]) \
        .exclude(centroid=None).values_list("pk", "level", "node", "centroid", "fingerprint", "merged_into_id",
                                            "split_from_id")
    return [Known(pk, level, node, centroid_of(raw), fp, merged, split)
            for pk, level, node, raw, fp, merged, split in rows if raw]


def _wanted(groups: list) -> set[str]:
    """The ids of the groups to offer to the model: not an "other" bucket, not an insight the model named already."""
    llm_named = set(Insight.objects.filter(pk__in=[g.insight_id for g in groups if g.insight_id],
                                           naming_source="llm").values_list("pk", flat=True))
    return {f"g{i}" for i, g in enumerate(groups) if not g.is_other and g.insight_id not in llm_named}


def _forget_run(run: DiagnosisRun) -> None:
    InsightEvidence.objects.filter(run=run).delete()
    InsightStatement.objects.filter(run=run).delete()
    InsightOccurrence.objects.filter(run=run).delete()


def _drop_orphans(run: DiagnosisRun) -> int:
    """After a rebuild: insights this run created that nothing holds any more (no occurrence, never reviewed)."""
    orphans = Insight.objects.filter(first_run=run, is_other=False, review=Insight.Review.UNREVIEWED,
                                     status=Insight.Status.OPEN, occurrences__isnull=True, merged_from__isnull=True,
                                     split_into__isnull=True, split_from__isnull=True)
    return orphans.delete()[0]


def _duplicates_merge(*, run: DiagnosisRun, written) -> None:
    """Two open insights of one level, node and title are one problem (insights/held.py): the newer is merged into
    the older, so ids stay. A rename by the model, or a database from before this rule, can leave such a pair."""
    from diagnosis.services.insights_review import insight_merge

    seen: dict[tuple, Insight] = {}
    merged = set()
    for insight in Insight.objects.filter(project_id=run.project_id, is_other=False, merged_into__isnull=True,
                                          status__in=[Insight.Status.OPEN, Insight.Status.ACKNOWLEDGED]) \
            .select_related("project").order_by("pk"):
        key = (insight.level, insight.node, insight.title)
        if key not in seen:
            seen[key] = insight
            continue
        insight_merge(project=insight.project, source=insight, target=seen[key])
        merged.add(insight.pk)
    if merged:
        logger.info("insights.duplicates_merged run=%s merged=%s", run.pk, sorted(merged))
        written.new = [i for i in written.new if i not in merged]
        written.matched = [i for i in written.matched if i not in merged]
        written.reopened = [i for i in written.reopened if i not in merged]


def insights_build(*, run: DiagnosisRun, force: bool = False) -> dict | None:
    """Build or update the project's insights from one finished run. Returns the run's insights summary, or None
    when the run is not finished or another build has it (or did it: pass force=True to rebuild)."""
    if not _claim(run_id=run.pk, force=force):
        return None
    current = DiagnosisRun.objects.get(pk=run.pk)
    try:
        # A continuous run's refreshes (services/insights_refresh.py) wrote statements already: replace them.
        summary = _build(current, rebuild=force or current.continuous) if current.writes_insights \
            else _build_detached(current)
    except Exception as exc:
        DiagnosisRun.objects.filter(pk=run.pk).update(insights_status="failed", insights_finished_at=timezone.now(),
                                                      insights_error=f"{type(exc).__name__}: {exc}"[:5000])
        raise
    if not current.writes_insights:
        # Nothing stored changed, so no ticket, webhook or watched fix has anything to follow.
        run.refresh_from_db()
        return summary
    from diagnosis.tickets.services import ticket_sync_after_insights  # tickets follow the insights (never raises)

    ticket_sync_after_insights(run_id=run.pk)
    # After the tickets: subscribers (promoted fixes confirmed or reopened) see the tickets as the build left them.
    insights_built_publish(run=run)
    run.refresh_from_db()
    return summary


def insights_build_by_id(*, run_id) -> dict | None:
    run = DiagnosisRun.objects.filter(pk=run_id).first()
    return insights_build(run=run) if run is not None else None


@dataclass
class RefreshRules:
    """How a continuous refresh's full build differs from a full run's (services/insights_refresh.py): over a window
    of the run's traces; a fixed insight reopens only when reopen_allowed says so; no `insight.regressed` for a
    frequency rise, no orphan dropped, nothing retired as absorbed (a sliding window proves no absence)."""

    window: set[int] | None
    upto: int | None  # the newest feedback read: the next incremental refresh starts after it
    reopen_allowed: object
    prior: Prior | None = None  # where the previous re-clustering put the run's statements (insights/sticky.py)


@dataclass
class _Clustered:
    drafts: list
    keys: list[str]
    vectors: object
    embedded: int
    model_id: str
    clusters: list
    rows_of: dict
    other_rows: dict
    fingerprints: dict
    traces: dict
    recovered: set[int]  # the run's feedback about errors it recovered from (persist.py `recovered_feedback`)

    @property
    def medoids(self) -> dict[str, str]:
        return {c.id: c.medoid_id for c in self.clusters}

    def grouped(self, project_id: int, refresh: RefreshRules | None = None,
                run: DiagnosisRun | None = None) -> tuple[list, set[str]]:
        """run: a run that writes insights, whose would-be new groups of held statements go to the insights that
        hold them (insights/held.py)."""
        known = _known(project_id=project_id, model_id=self.model_id)
        by_id = {c.id: c for c in self.clusters}
        patterns = {cid: pattern_fingerprint(pattern=shared, node=by_id[cid].node, level=by_id[cid].level)
                    for cid, rows in self.rows_of.items() if (shared := group_pattern(rows, self.drafts))}
        groups = groups_assign(clusters=self.clusters, fingerprints=self.fingerprints, rows_of=self.rows_of,
                               vectors=self.vectors, known=known, other_rows=self.other_rows, patterns=patterns)
        if refresh is not None and refresh.prior:
            groups = groups_sticky(groups=groups, keys=[d.key for d in self.drafts],
                                   nodes=[d.node for d in self.drafts], prior=refresh.prior,
                                   live=insights_resolved(known))
        if run is not None:
            groups = groups_held(groups=groups, held=held_places(run=run, drafts=self.drafts, keys=self.keys))
        return groups, _wanted(groups)


def _cluster(run: DiagnosisRun, window: set[int] | None = None, upto: int | None = None) -> _Clustered:
    from diagnosis.clustering import Statement, cluster_per_node_and_system, fingerprint, name_clusters
    from diagnosis.clustering.promote import other_errors_promote
    from diagnosis.insights.persist import recovered_feedback

    drafts = statements_collect(run=run, trace_pks=window, feedback_upto=upto)
    embedder = embedder_get()
    vectors, keys, embedded = statement_vectors([d.text for d in drafts], embedder)
    statements = [Statement(id=d.key, text=d.text, node=d.node, trace_id=str(d.trace_pk), span_id=d.span_id or None,
                            severity=d.severity, source=d.judge, tool=d.tool, pattern=d.pattern) for d in drafts]
    clusters, rows_of, other_rows, raw_fingerprints = [], {}, {}, {}
    recovered: set[int] = set()
    traces = {k: v for k, v in judged_traces(run).items() if window is None or int(k) in window}
    if drafts:
        clustering = cluster_per_node_and_system(
            statements, vectors, started={d.key: d.started for d in drafts if d.started is not None})
        # A recurring tool error associated with failure (or unknown without successes) is never "other", an error
        # recovered in every run it occurs in is, unless associated (clustering/promote.py, issue 41).
        recovered = recovered_feedback(run=run)
        other_errors_promote(clustering, statements, vectors, traces,
                             recovered={d.key for d in drafts if d.feedback_id in recovered})
        index_of = {d.key: i for i, d in enumerate(drafts)}
        texts = {d.key: d.text for d in drafts}
        scopes = [*clustering.node_results.items(), ("", clustering.system_result)]
        for node, result in scopes:
            level = Insight.Level.NODE if node else Insight.Level.SYSTEM
            other_rows[(level, node)] = [index_of[k] for k in result.other]
            names = name_clusters(result.clusters, texts)
            for cluster in result.clusters:
                clusters.append(cluster)
                rows_of[cluster.id] = [index_of[k] for k in cluster.member_ids]
                raw_fingerprints[cluster.id] = fingerprint(names[cluster.id].terms, cluster.node, cluster.level)
    return _Clustered(drafts=drafts, keys=keys, vectors=vectors, embedded=embedded, model_id=embedder.model_id,
                      clusters=clusters, rows_of=rows_of, other_rows=other_rows, fingerprints=raw_fingerprints,
                      traces=traces, recovered=recovered)


def _judged_by_release(traces: dict) -> dict[str, int]:
    judged: dict[str, int] = {}
    for info in traces.values():
        judged[info.release] = judged.get(info.release, 0) + 1
    return judged


def _build_detached(run: DiagnosisRun) -> dict:
    """A run that is not full: its groups and figures go on the run, nothing into the project's insights
    (diagnosis/insights/detached.py). Offline names only: its titles show nowhere but a comparison."""
    started = time.monotonic()
    c = _cluster(run)
    groups, _ = c.grouped(run.project_id)
    names = groups_name(groups=groups, drafts=c.drafts, vectors=c.vectors, llm=None, medoids=c.medoids)
    fingerprints = groups_fingerprints(groups=groups, names=names, drafts=c.drafts)
    rows = groups_detached(groups=groups, names=names, drafts=c.drafts, traces=c.traces, fingerprints=fingerprints)
    named = [g for g in rows if not g["is_other"]]
    summary = {
        "judged": len(c.traces), "judged_by_release": _judged_by_release(c.traces), "statements": len(c.drafts),
        "embedded": c.embedded, "embedding_model": c.model_id, "identity_threshold": identity_threshold(),
        "clusters": len(c.clusters), "insights": len(named), "new": sum(1 for g in named if g["insight_id"] is None),
        "matched": sum(1 for g in named if g["insight_id"] is not None), "reopened": 0,
        "other_statements": sum(g["count"] for g in rows if g["is_other"]), "detached": True, "groups": rows,
        "seconds": round(time.monotonic() - started, 2),
    }
    DiagnosisRun.objects.filter(pk=run.pk).update(insights_summary=summary, insights_status="done",
                                                  insights_finished_at=timezone.now())
    logger.info("insights.detached run=%s scope=%s statements=%d groups=%d", run.pk, run.scope_label,
                len(c.drafts), len(rows))
    return summary


def insights_run_lock(*, run_id) -> None:
    """In a transaction that writes a run's insights, before the project's lock: the run's row, in the order the run's
    judging takes them (services/runs.py: the run's row, then the project's through a feedback's foreign key), so that
    the run is written in the same transaction (a refresh: refreshed_run_mark) without a deadlock."""
    DiagnosisRun.objects.select_for_update().filter(pk=run_id).first()


def refreshed_run_mark(*, run_id) -> None:
    """The list changed now: committed with the insights the refresh wrote (issue 44: the Insights page read between
    the two commits listed the new insights under "List not built yet"). The run's summary and status follow after
    the commit."""
    DiagnosisRun.objects.filter(pk=run_id).update(insights_finished_at=timezone.now(), insights_error="")


def _build(run: DiagnosisRun, *, rebuild: bool, refresh: RefreshRules | None = None) -> dict:
    started = time.monotonic()
    c = _cluster(run, refresh.window, refresh.upto) if refresh else _cluster(run)
    drafts, vectors, traces, medoids = c.drafts, c.vectors, c.traces, c.medoids
    usage = NamingUsage()
    model = naming_model(run_model=run.model)

    def grouped() -> tuple[list, set[str]]:
        return c.grouped(run.project_id, refresh, run)

    if model:
        # The model is asked before the project's lock is taken, with no transaction open: a name can take minutes,
        # and on SQLite any write transaction holds the database's one write lock, so ingestion and every task
        # would wait on the model (issue 25). The names land in the judge cache, where the locked pass below reads
        # them without calling; a group that another build changed in between keeps its offline name until the next.
        groups, wanted = grouped()
        groups_name(groups=groups, drafts=drafts, vectors=vectors, medoids=medoids,
                    llm=llm_namer_build(model=model, usage=usage, wanted=wanted,
                                            project_id=run.project_id))
    with transaction.atomic():
        insights_run_lock(run_id=run.pk)
        Project.objects.select_for_update().filter(pk=run.project_id).first()  # one writer of insights per project
        if rebuild:
            _forget_run(run)
        groups, wanted = grouped()
        namer = llm_namer_build(model=model, usage=NamingUsage(), wanted=wanted, cache_only=True,
                                project_id=run.project_id)
        names = groups_name(groups=groups, drafts=drafts, vectors=vectors, llm=namer, medoids=medoids)
        groups, names = groups_title_pool(project_id=run.project_id, groups=groups, names=names)
        fingerprints = groups_fingerprints(groups=groups, names=names, drafts=drafts)
        data = RunData(run=run, drafts=drafts, keys=c.keys, vectors=vectors, traces=traces, model_id=c.model_id,
                       recovered=c.recovered)
        written = insights_write(data=data, groups=groups, names=names, fingerprints=fingerprints,
                                 reopen_allowed=refresh.reopen_allowed if refresh else None)
        _duplicates_merge(run=run, written=written)
        insights_built_webhooks_emit(run=run, created=written.new, matched=[] if refresh else written.matched,
                                     reopened=written.reopened)
        dropped = _drop_orphans(run) if rebuild and not refresh else 0
        absorbed = insights_absorbed_retire(run=run) if not refresh else []
        summary = {
            "judged": len(traces), "judged_by_release": _judged_by_release(traces), "statements": len(drafts),
            "embedded": c.embedded, "embedding_model": c.model_id, "identity_threshold": identity_threshold(),
            "clusters": len(c.clusters), "insights": len(written.new) + len(written.matched), "new": len(written.new),
            "matched": len(written.matched), "reopened": len(written.reopened), "other_statements": written.other,
            "evidence": written.evidence, "links": written.links, "dropped": dropped,
            "absorbed": absorbed,
            "naming": {"model": model, "calls": usage.calls,
                       "cached": usage.cached, "failed": usage.failed, "replaced": usage.replaced,
                       "input_tokens": usage.input_tokens,
                       "output_tokens": usage.output_tokens, "errors": usage.errors},
            "seconds": round(time.monotonic() - started, 2),
        }
        if refresh is not None:  # the rest of the run's state is written after the commit (insights_refresh.py)
            refreshed_run_mark(run_id=run.pk)
            # The new insights' trend goes in with them: a page read after this commit shows them with it.
            trend_refresh(project_id=run.project_id, current_run_id=run.pk,
                          current_judged=summary["judged_by_release"])
        else:
            DiagnosisRun.objects.filter(pk=run.pk).update(insights_summary=summary)
            trend_refresh(project_id=run.project_id, current_run_id=run.pk)
            insights_regressed_apply(run=run)
            DiagnosisRun.objects.filter(pk=run.pk).update(insights_status="done", insights_finished_at=timezone.now())
    logger.info("insights.built run=%s statements=%d new=%d matched=%d reopened=%d seconds=%.1f", run.pk,
                len(drafts), len(written.new), len(written.matched), len(written.reopened), summary["seconds"])
    return summary


def insights_sweep(*, now: datetime | None = None) -> int:
    """Send again the builds of recently finished runs that were never queued, whose message was lost, or whose
    worker died; returns how many were sent."""
    now = now or timezone.now()
    recent = DiagnosisRun.objects.filter(status__in=FINISHED,
                                         finished_at__gte=now - timedelta(hours=SWEEP_LOOKBACK_HOURS))
    sent = 0
    for run_id, config in recent.filter(insights_status="").values_list("pk", "config"):
        if not (config or {}).get("inline") and insights_run_request(run_id=run_id):
            sent += 1
    lost = recent.filter(Q(insights_status="queued", insights_started_at__lt=now - timedelta(seconds=RESEND_SECONDS))
                         | Q(insights_status="running",
                             insights_started_at__lt=now - timedelta(seconds=STALE_SECONDS)))
    for run_id, status, started_at in lost.values_list("pk", "insights_status", "insights_started_at"):
        # Re-queued under a conditional update: of two sweeps, one sends.
        if DiagnosisRun.objects.filter(pk=run_id, insights_status=status, insights_started_at=started_at).update(
                insights_status="queued", insights_started_at=now):
            _send(run_id)
            sent += 1
    return sent
