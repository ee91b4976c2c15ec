"""A continuous run does not judge again what a full run judged already (issue 40, item 2).

Why: the demo's own run judges its 44 traces; the day's continuous run then claims the same traces and judged them
all again, and while it did, its half-finished figures stood for each release (every trend read 0% at first). The
verdicts would be the same: same trace content, same judges, same model, same rubrics.

So when a continuous run takes a trace, it looks for the newest item of a succeeded full run (not continuous) that
judged the trace after its content last changed, with the same model, whose judges include every judge of the
continuous run and whose rubrics include every rubric the continuous run applies (each created before that run
started). When there is one, that run's feedback of those judges is copied into the continuous run (no tokens, no
cost: nothing was spent) and the item is done; otherwise the trace is judged as usual.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from diagnosis.judges.contrastive import CONTRASTIVE_JUDGE
from diagnosis.models import DiagnosisRun, Feedback, Rubric, RunTrace
from diagnosis.services.judging import RUBRICS_ALIAS, JudgePlan
from traces.models import Trace

_LOOKED_AT = 20  # newest full runs' items considered per trace

_COPIED = ("target_span_id", "judge", "judge_kind", "rubric_id", "model", "prompt_version", "status", "score",
           "verdict", "critique", "issues", "details", "error", "latency_ms", "cache_key")


def _rubrics_of(run: DiagnosisRun) -> set[int] | None:
    """The rubric ids a run applied; None: every enabled rubric of the project at the time (the alias)."""
    names = run.judges or []
    ids = {int(n.split(".", 1)[1]) for n in names if n.startswith("rubric.") and n.split(".", 1)[1].isdigit()}
    if RUBRICS_ALIAS in names:
        if run.rubric_ids in (None, "all"):
            return None
        ids |= {int(i) for i in run.rubric_ids}
    return ids


def _covers(source: DiagnosisRun, *, run: DiagnosisRun, plan: JudgePlan) -> bool:
    own = {n for n in run.judges or [] if n != RUBRICS_ALIAS and not n.startswith("rubric.")}
    if not own <= set(source.judges or []) or (source.model or "") != (run.model or ""):
        return False
    wanted = plan.rubric_ids
    if not wanted:
        return True
    applied = _rubrics_of(source)
    if applied is not None and not wanted <= applied:
        return False
    # a rubric made after the full run started was not applied by it
    return not Rubric.objects.filter(pk__in=wanted, created_at__gte=source.created_at).exists()


def reusable_item(*, run: DiagnosisRun, trace_pk: int, plan: JudgePlan) -> RunTrace | None:
    """The full run's item whose verdicts the continuous `run` takes for this trace (module docstring), or None."""
    if not run.continuous:
        return None
    changed = Trace.objects.filter(pk=trace_pk).values_list("content_changed_at", flat=True).first()
    items = (RunTrace.objects.filter(trace_id=trace_pk, status=RunTrace.Status.DONE, run__continuous=False,
                                     run__status=DiagnosisRun.Status.SUCCEEDED, run__project_id=run.project_id)
             .select_related("run").order_by("-finished_at", "-pk"))
    if changed is not None:
        items = items.filter(Q(finished_at__gte=changed))
    for item in items[:_LOOKED_AT]:
        if _covers(item.run, run=run, plan=plan):
            return item
    return None


def item_reuse(*, item_id: int, run_id, source: RunTrace, plan: JudgePlan) -> bool:
    """Copy the source item's feedback into the run and mark the item done; False when the run stopped meanwhile
    or another worker did it (the item is no longer running)."""
    with transaction.atomic():
        run = DiagnosisRun.objects.select_for_update().get(pk=run_id)
        if run.status != DiagnosisRun.Status.RUNNING:
            return False
        judges = (set(run.judges or []) | {f"rubric.{pk}" for pk in plan.rubric_ids}) - {CONTRASTIVE_JUDGE}
        done = RunTrace.objects.filter(pk=item_id, status=RunTrace.Status.RUNNING).update(
            status=RunTrace.Status.DONE, finished_at=timezone.now())
        if not done:
            return False
        rows = Feedback.objects.filter(run_id=source.run_id, trace_id=source.trace_id, judge__in=judges) \
            .values("project_id", *_COPIED)
        Feedback.objects.bulk_create([Feedback(run_id=run_id, trace_id=source.trace_id, **row) for row in rows],
                                     ignore_conflicts=True, batch_size=500)
        DiagnosisRun.objects.filter(pk=run_id).update(done_count=F("done_count") + 1)
    return True



