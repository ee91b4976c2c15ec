"""Writing one run's insights: Insight rows (new, updated, reopened), statements with their memberships, per-run
occurrences, verified evidence and system↔node links. The caller holds the project lock inside one transaction."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from django.utils import timezone

from diagnosis.clustering.naming import title_generalize
from diagnosis.insights.embedding import centroid_bytes
from diagnosis.insights.groups import group_severity
from diagnosis.insights.headline import HeadlineRanker, headline_ranker
from diagnosis.insights.identity import Group
from diagnosis.insights.facts import insight_by_design, insight_offline_text
from diagnosis.insights.statements import Draft
from diagnosis.insights.verify import evidence_verified
from diagnosis.models import (
    DiagnosisRun,
    Feedback,
    Insight,
    InsightEvent,
    InsightEvidence,
    InsightLink,
    InsightOccurrence,
    InsightStatement,
)

EVIDENCE_STATEMENTS = 20  # statements per insight and run whose citations are kept as evidence (one per trace first)
EVIDENCE_PER_STATEMENT = 5
LINK_MIN_SHARE = 0.5  # as diagnosis.clustering.cluster_per_node_and_system


@dataclass
class RunData:
    run: DiagnosisRun
    drafts: list[Draft]
    keys: list[str]
    vectors: np.ndarray
    traces: dict  # str(trace pk) -> diagnosis.clustering.TraceInfo, every judged trace of the run
    model_id: str
    recovered: set[int]  # `recovered_feedback(run=run)`, read once per build


@dataclass
class WriteSummary:
    new: list[int] = field(default_factory=list)
    matched: list[int] = field(default_factory=list)
    reopened: list[int] = field(default_factory=list)
    other: int = 0
    evidence: int = 0
    links: int = 0


def other_title(level: str, node: str) -> str:
    return f"Other feedback at {node}" if level == Insight.Level.NODE else "Other system-level feedback"


def _is_latest(insight: Insight, run: DiagnosisRun, *, ranker: HeadlineRanker, judged: set[str]) -> bool:
    """Whether this run's figures become the insight's headline: not when the insight's figures come from a better
    run (headline.py: a full run of the newest release beats a gate's, a filtered or an older release's run), so a
    gate's baseline run finishing last does not take the dashboard back to the baseline."""
    if insight.last_run_id is None or insight.last_run_id == run.pk or insight.last_run is None:
        return True
    return ranker.rank(run, judged) >= ranker.rank(insight.last_run)


def _apply_name(insight: Insight, name, group: Group, data: RunData, new: bool) -> None:
    if new or (name.source == "llm" and insight.naming_source != "llm"):
        insight.title = name.title[:300]
    elif insight.naming_source != "llm":
        # An offline title made before titles were generalised loses its instance values; idempotent, so no churn.
        insight.title = title_generalize(insight.title)[:300]
    if name.source == "llm":
        insight.naming_source = "llm"
        insight.root_cause, insight.recommendation = name.root_cause, name.recommendation
    elif insight.naming_source != "llm":
        text = insight_offline_text(project_id=data.run.project_id, rows=group.rows, drafts=data.drafts,
                                    traces=data.traces)
        insight.root_cause, insight.recommendation = text.root_cause, text.recommendation
    if name.source == "llm" or insight.naming_source != "llm" or not insight.description:
        insight.description = name.description
    if name.source == "llm" or insight.naming_source != "llm":
        insight.naming_note = name.note  # why the model's text was replaced by the computed one, else ""
    insight.terms = list(name.terms)


def recovered_feedback(*, run: DiagnosisRun) -> set[int]:
    """The run's feedback about an error the run recovered from (judges/recovery.py `error_recovery`)."""
    return set(Feedback.objects.filter(run=run, details__recovered=True).values_list("pk", flat=True))


def recovered_traces(rows: list[int], drafts: list[Draft], recovered: set[int]) -> set[str]:
    """The traces (str(pk), as RunData.traces) whose statements among `rows` are all of recovered errors: counted
    in the insight's frequency, and in its lift only as clustering/stats.py `lift_traces` says."""
    if not recovered:
        return set()
    seen, unrecovered = set(), set()
    for r in rows:
        trace = str(drafts[r].trace_pk)
        seen.add(trace)
        if drafts[r].feedback_id not in recovered:
            unrecovered.add(trace)
    return seen - unrecovered


def insights_write(*, data: RunData, groups: list[Group], names: dict[int, tuple],
                   fingerprints: dict[int, str], reopen_allowed=None) -> WriteSummary:
    """reopen_allowed(insight, frequency) -> bool, when given, may keep a fixed insight fixed although it matched:
    a continuous refresh reopens only what it saw twice in a row (services/insights_refresh.py)."""
    from diagnosis.clustering import issue_stats

    run, drafts = data.run, data.drafts
    seen_at = run.finished_at or timezone.now()
    summary = WriteSummary()
    existing = Insight.objects.select_related("last_run").in_bulk([g.insight_id for g in groups if g.insight_id])
    ranker, judged = headline_ranker(project_id=run.project_id), {t.release for t in data.traces.values()}
    insight_of: list[Insight] = []
    recovered = data.recovered
    for index, group in enumerate(groups):
        rows = group.rows
        stats = issue_stats({str(drafts[r].trace_pk) for r in rows}, data.traces,
                            recovered_trace_ids=recovered_traces(rows, drafts, recovered))
        if group.is_other:
            insight, _ = Insight.objects.get_or_create(
                project_id=run.project_id, level=group.level, node=group.node, is_other=True,
                defaults={"title": other_title(group.level, group.node), "first_seen": seen_at, "first_run": run})
            new = False
            summary.other += len(rows)
            if insight.merged_into_id:  # absorbed once (insights/absorbed.py), it holds statements again
                insight.merged_into = None
        elif group.insight_id is None:
            insight, new = Insight(project_id=run.project_id, level=group.level, node=group.node,
                                   first_seen=seen_at, first_run=run), True
        else:
            insight, new = existing[group.insight_id], False
        latest = new or _is_latest(insight, run, ranker=ranker, judged=judged)
        if index in names:
            cluster, name = names[index]
            if latest:
                _apply_name(insight, name, group, data, new)
                insight.fingerprint = fingerprints.get(index, "")
                insight.centroid = centroid_bytes(cluster.centroid)
                insight.embedding_model = data.model_id[:300]
        if latest:
            insight.severity = group_severity(rows, drafts)
            insight.count, insight.trace_count = len(rows), stats.count
            insight.frequency = stats.frequency
            insight.frequency_low, insight.frequency_high = stats.frequency_ci
            insight.lift = stats.lift
            insight.lift_low, insight.lift_high = stats.lift_ci if stats.lift_ci else (None, None)
            insight.affected_nodes = dict(Counter(drafts[r].node for r in rows if drafts[r].node).most_common())
            insight.by_design = not group.is_other and insight_by_design(project_id=run.project_id, rows=rows,
                                                                         drafts=drafts, traces=data.traces)
            insight.last_run = run
        insight.last_seen = max(filter(None, [insight.last_seen, seen_at]))
        insight.first_seen = min(filter(None, [insight.first_seen, seen_at]))
        reopen = not new and not group.is_other and latest and insight.status == Insight.Status.FIXED \
            and (reopen_allowed is None or reopen_allowed(insight, stats.frequency))
        if reopen:
            insight.status, insight.reopened_at = Insight.Status.OPEN, timezone.now()
            insight.reopen_count += 1
        insight.save()
        if new:
            summary.new.append(insight.pk)
            InsightEvent.objects.create(insight=insight, kind="created", run=run,
                                        data={"statements": len(rows), "traces": stats.count})
        elif not group.is_other:
            summary.matched.append(insight.pk)
        if reopen:
            summary.reopened.append(insight.pk)
            InsightEvent.objects.create(insight=insight, kind="reopened", run=run,
                                        data={"statements": len(rows), "traces": stats.count,
                                              "similarity": round(group.similarity, 4), "via": group.via})
        insight_of.append(insight)
        trace_ids = sorted({drafts[r].trace_id for r in rows})
        releases = Counter(data.traces[str(t)].release for t in {drafts[r].trace_pk for r in rows}
                           if str(t) in data.traces)
        InsightOccurrence.objects.update_or_create(insight=insight, run=run, defaults={
            "count": len(rows), "trace_count": stats.count, "judged": stats.judged, "frequency": stats.frequency,
            "lift": stats.lift, "lift_low": stats.lift_ci[0] if stats.lift_ci else None,
            "lift_high": stats.lift_ci[1] if stats.lift_ci else None, "trace_ids": trace_ids,
            "releases": dict(releases)})
    statements = _statements_write(data=data, groups=groups, insight_of=insight_of)
    summary.evidence = _evidence_write(data=data, groups=groups, insight_of=insight_of, names=names,
                                       statements=statements)
    summary.links = _links_write(run=run, groups=groups, insight_of=insight_of)
    return summary


def _statements_write(*, data: RunData, groups: list[Group], insight_of: list[Insight]) -> list[InsightStatement]:
    node_of: dict[int, int] = {}
    system_of: dict[int, int] = {}
    for group, insight in zip(groups, insight_of):
        target = node_of if group.level == Insight.Level.NODE else system_of
        for r in group.rows:
            target[r] = insight.pk
    rows = [
        InsightStatement(
            project_id=data.run.project_id, run=data.run, feedback_id=d.feedback_id, trace_id=d.trace_pk,
            position=d.position, kind=d.kind, text=d.text, node=d.node[:300], span_id=d.span_id[:16],
            judge=d.judge[:200], severity=d.severity, evidence=d.evidence, vector_key=data.keys[i],
            node_insight_id=node_of.get(i), system_insight_id=system_of.get(i),
        )
        for i, d in enumerate(data.drafts)
    ]
    return InsightStatement.objects.bulk_create(rows, batch_size=2000)


def _outcome_rank(info) -> int:
    """0 for a trace whose recorded outcome is failure, 1 unknown, 2 success."""
    failed = info.failed if info is not None else None
    return 0 if failed is True else 2 if failed is False else 1


def _evidence_write(*, data: RunData, groups: list[Group], insight_of: list[Insight], names: dict[int, tuple],
                    statements: list[InsightStatement]) -> int:
    chosen: list[tuple[Insight, int]] = []
    for index, (group, insight) in enumerate(zip(groups, insight_of)):
        cluster = names[index][0] if index in names else None
        by_key = {data.drafts[r].key: r for r in group.rows}
        ordered = [by_key[k] for k in (cluster.example_ids if cluster else []) if k in by_key]
        head = set(ordered)
        ordered += [r for r in group.rows if r not in head]
        # Failing runs first: a quote from a run that succeeded shows the pattern, not what made a run fail.
        ordered.sort(key=lambda r: _outcome_rank(data.traces.get(str(data.drafts[r].trace_pk))))
        picked, traces = [], set()
        for r in ordered:  # one statement per trace first, failing runs first, then examples first
            if data.drafts[r].trace_pk not in traces and data.drafts[r].evidence:
                picked.append(r)
                traces.add(data.drafts[r].trace_pk)
            if len(picked) >= EVIDENCE_STATEMENTS:
                break
        taken = set(picked)
        picked += [r for r in ordered if r not in taken and data.drafts[r].evidence][:EVIDENCE_STATEMENTS]
        chosen += [(insight, r) for r in picked[:EVIDENCE_STATEMENTS]]
    wanted = {(data.drafts[r].trace_pk, e["span_id"]) for _, r in chosen
              for e in data.drafts[r].evidence[:EVIDENCE_PER_STATEMENT]}
    verified = evidence_verified(project_id=data.run.project_id, pairs=wanted)
    rows = []
    for insight, r in chosen:
        draft = data.drafts[r]
        for e in draft.evidence[:EVIDENCE_PER_STATEMENT]:
            if verified.check(draft.trace_pk, e["span_id"], e["quote"]):
                rows.append(InsightEvidence(
                    insight=insight, run=data.run, trace_id=draft.trace_pk, span_id=e["span_id"][:16],
                    feedback_id=draft.feedback_id, statement=statements[r], statement_text=draft.text,
                    quote=e["quote"]))
    InsightEvidence.objects.bulk_create(rows, batch_size=1000)
    return len(rows)


def _links_write(*, run: DiagnosisRun, groups: list[Group], insight_of: list[Insight]) -> int:
    system_of: dict[int, Insight] = {}
    for group, insight in zip(groups, insight_of):
        if group.level == Insight.Level.SYSTEM and not group.is_other:
            for r in group.rows:
                system_of[r] = insight
    count = 0
    for group, insight in zip(groups, insight_of):
        if group.level != Insight.Level.NODE or group.is_other:
            continue
        hits = Counter(system_of[r].pk for r in group.rows if r in system_of)
        for system_pk, shared in hits.items():
            share = shared / len(group.rows)
            if share >= LINK_MIN_SHARE:
                InsightLink.objects.update_or_create(system_id=system_pk, node=insight,
                                                     defaults={"shared": shared, "share": share, "run": run})
                count += 1
    return count
