"""Starting a diagnosis run: the judges resolved, the filter checked, the traces chosen (one trace filter, then a
deterministic sample), the run and its items written, and its start task sent after commit."""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime

from django.db import transaction

from clear.projects.models import Project
from diagnosis import conf
from diagnosis.errors import DiagnosisRunInvalidError
from diagnosis.judges.contrastive import CONTRASTIVE_JUDGE
from diagnosis.models import DiagnosisRun, Rubric, RunTrace
from diagnosis.services.judging import LLM_JUDGES, RUBRICS_ALIAS, RULE_JUDGES
from traces.models import Trace
from traces.selectors import TraceFilter, trace_list_filtered

logger = logging.getLogger(__name__)


def trace_sampled(*, trace_id: str, rate: float) -> bool:
    """Deterministic sampling: the same traces are in the sample every time for a given rate."""
    if rate >= 1:
        return True
    digest = hashlib.sha256(trace_id.lower().encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


def judges_resolve(*, judges: list[str] | None, model: str) -> list[str]:
    """Expand aliases ("rules", "llm", "rubrics") and validate names; empty means the defaults: every rule judge,
    every selected rubric, the LLM judges when a model is configured, and the run-level contrastive judge (it acts
    only when the run's traces have enough recorded outcomes, and says why it was skipped otherwise)."""
    if not judges:
        return [*RULE_JUDGES, RUBRICS_ALIAS, *(LLM_JUDGES if model else ()), CONTRASTIVE_JUDGE]
    resolved: list[str] = []
    for name in judges:
        name = name.strip()
        if name == "rules":
            expanded = list(RULE_JUDGES)
        elif name == "llm":
            expanded = list(LLM_JUDGES)
        elif name in RULE_JUDGES or name in LLM_JUDGES or name in (RUBRICS_ALIAS, CONTRASTIVE_JUDGE):
            expanded = [name]
        elif name.startswith("rubric.") and name.split(".", 1)[1].isdigit():
            expanded = [name]
        else:
            valid = ", ".join(["rules", "llm", RUBRICS_ALIAS, "rubric.<id>", *RULE_JUDGES, *LLM_JUDGES,
                               CONTRASTIVE_JUDGE])
            raise DiagnosisRunInvalidError(f"Unknown judge {name!r}; use any of: {valid}")
        resolved += [n for n in expanded if n not in resolved]
    if not model and any(n in LLM_JUDGES for n in resolved):
        raise DiagnosisRunInvalidError(
            "The LLM judges need a model: pass one (e.g. --model gpt-4o-mini) or set CLEAR_JUDGE_MODEL."
        )
    return resolved


def _select_traces(*, project: Project, release: str, since: datetime | None, until: datetime | None,
                   tags: list[str], outcome: str, node: str, trace_ids: list[str], sample_rate: float) -> list[int]:
    """The pks of the traces the run judges, in start order: the filter's, sampled (see trace_sampled)."""
    filters = TraceFilter(release=release or None, outcome=outcome, node=node, since=since, until=until,
                          trace_ids=tuple(trace_ids), tags=tuple(tags))
    traces = trace_list_filtered(project=project, filters=filters).order_by("start_time", "pk")
    return [pk for pk, trace_id in traces.values_list("pk", "trace_id")
            if trace_sampled(trace_id=trace_id, rate=sample_rate)]


def _validate_filter(*, project: Project, since, until, outcome: str, sample_rate: float, budget_tokens,
                     budget_cost, rubric_ids, trace_ids: list[str]) -> None:
    if not 0 < sample_rate <= 1:
        raise DiagnosisRunInvalidError(f"sample_rate must be in (0, 1]; got {sample_rate}")
    if outcome and outcome not in Trace.Outcome.values:
        raise DiagnosisRunInvalidError(f"outcome must be one of {', '.join(Trace.Outcome.values)}; got {outcome!r}")
    if since and until and since >= until:
        raise DiagnosisRunInvalidError("since must be before until")
    for name, value in (("budget_tokens", budget_tokens), ("budget_cost", budget_cost)):
        if value is not None and value < 0:
            raise DiagnosisRunInvalidError(f"{name} cannot be negative")
    if rubric_ids != "all":
        if not isinstance(rubric_ids, (list, tuple)) or not all(isinstance(i, int) for i in rubric_ids):
            raise DiagnosisRunInvalidError('rubric_ids must be "all" or a list of rubric ids')
        known = set(Rubric.objects.filter(project=project, pk__in=rubric_ids).values_list("pk", flat=True))
        missing = sorted(set(rubric_ids) - known)
        if missing:
            raise DiagnosisRunInvalidError(f"No rubric with id {missing} in this project")
    if trace_ids:
        known = set(Trace.objects.filter(project=project, trace_id__in=trace_ids).values_list("trace_id", flat=True))
        missing = [t for t in trace_ids if t not in known]
        if missing:
            raise DiagnosisRunInvalidError(f"{len(missing)} trace id(s) not found in this project, e.g. {missing[:5]}",
                                           extra={"missing": missing[:100]})


def _release_empty_error(*, project: Project, release: str) -> DiagnosisRunInvalidError:
    if not trace_list_filtered(project=project, filters=TraceFilter(release=release)).exists():
        return DiagnosisRunInvalidError(
            f"Release {release!r} has no traces in this project, so a run of it would judge nothing. Check the "
            "release name (its traces' service.version) and that its traces were sent to this project.",
            code="release_without_traces", extra={"release": release})
    return DiagnosisRunInvalidError(
        f"No trace of release {release!r} matches the filter and sample rate, so the run would judge nothing; "
        "widen the filter.", code="release_filter_empty", extra={"release": release})


def diagnosis_run_start(
    *,
    project: Project,
    release: str = "",
    since: datetime | None = None,
    until: datetime | None = None,
    tags: list[str] | None = None,
    outcome: str = "",
    node: str = "",
    trace_ids: list[str] | None = None,
    judges: list[str] | None = None,
    model: str = "",
    rubric_ids: list[int] | str = "all",
    budget_tokens: int | None = None,
    budget_cost: float | None = None,
    sample_rate: float = 1.0,
    created_by=None,
    name: str = "",
    config: dict | None = None,
    enqueue: bool = True,
    purpose: str = DiagnosisRun.Purpose.DIAGNOSIS,
) -> DiagnosisRun:
    """Choose the traces, create the run and its items, and enqueue it after commit (`enqueue=False`: the caller
    runs it in-process with diagnosis_run_execute). A release with no trace to judge makes no run:
    DiagnosisRunInvalidError `release_without_traces` (or `release_filter_empty` when the other filters left none)."""
    trace_ids = [t.strip().lower() for t in trace_ids or [] if t.strip()]
    tags = [t for t in tags or [] if t]
    _validate_filter(project=project, since=since, until=until, outcome=outcome, sample_rate=sample_rate,
                     budget_tokens=budget_tokens, budget_cost=budget_cost, rubric_ids=rubric_ids, trace_ids=trace_ids)
    if purpose not in DiagnosisRun.Purpose.values:
        raise DiagnosisRunInvalidError(f"purpose must be one of {', '.join(DiagnosisRun.Purpose.values)}; "
                                       f"got {purpose!r}")
    resolved_model = model or conf.judge_model()
    resolved = judges_resolve(judges=judges, model=resolved_model)
    uses_llm = any(n in LLM_JUDGES for n in resolved)
    config = dict(config or {})
    if not enqueue:
        config["inline"] = True  # run by its caller: the sweep leaves it alone
    llm_rubrics = Rubric.objects.filter(project=project, kind=Rubric.Kind.LLM, enabled=True)
    if rubric_ids != "all":
        llm_rubrics = llm_rubrics.filter(pk__in=list(rubric_ids))
    if RUBRICS_ALIAS in resolved and not uses_llm and llm_rubrics.exists():
        config.setdefault("warnings", []).append(
            f"{llm_rubrics.count()} llm rubric(s) were not evaluated: they need the LLM judges and a model."
        )
    with transaction.atomic():
        pks = _select_traces(project=project, release=release, since=since, until=until, tags=tags, outcome=outcome,
                             node=node, trace_ids=trace_ids, sample_rate=sample_rate)
        if release and not pks:
            # A run of a release that judges nothing would still "succeed" (0/0) and be listed as the latest run;
            # asking for a release that has no traces is almost always a wrong name or traces not sent yet (CI).
            raise _release_empty_error(project=project, release=release)
        run = DiagnosisRun.objects.create(
            project=project, name=name[:200], release=release, since=since, until=until, tags=tags, outcome=outcome,
            node=node, trace_ids=trace_ids, sample_rate=sample_rate, judges=resolved,
            model=resolved_model if uses_llm else model, rubric_ids=list(rubric_ids) if rubric_ids != "all" else "all",
            budget_tokens=budget_tokens, budget_cost=budget_cost, config=config, created_by=created_by,
            total_count=len(pks), purpose=purpose,
        )
        RunTrace.objects.bulk_create([RunTrace(run=run, trace_id=pk) for pk in pks], batch_size=2000)
        if enqueue:
            transaction.on_commit(lambda: run_start_send(run.pk))
    logger.info("diagnosis.run_created run=%s traces=%d judges=%s", run.pk, len(pks), ",".join(resolved))
    return run


def run_start_send(run_id) -> None:
    from diagnosis.tasks import start_diagnosis_run as start_diagnosis_run_task

    try:
        start_diagnosis_run_task.delay(str(run_id))
    except Exception:  # noqa: BLE001 - the sweep re-sends runs left queued
        logger.exception("diagnosis.enqueue_failed run=%s", run_id)


def diagnosis_run_retry_errors(*, run: DiagnosisRun, created_by=None, enqueue: bool = True) -> DiagnosisRun:
    """A new run over the traces of `run` whose judging errored (a model call failed, or the trace's task kept
    crashing), with the same judges, model, rubrics and budget: after a provider outage, only those are paid for
    again."""
    from diagnosis.models import Feedback

    if not run.is_finished:
        raise DiagnosisRunInvalidError(f"Run {run.pk} is still {run.status}; re-judge its errors once it has finished.")
    pks = set(Feedback.objects.filter(run=run, status=Feedback.Status.ERROR).values_list("trace_id", flat=True))
    trace_ids = set(Trace.objects.filter(project=run.project, pk__in=pks).values_list("trace_id", flat=True))
    trace_ids |= {str(e["trace_id"]) for e in run.errors or [] if e.get("cause") == "task_failed" and e.get("trace_id")}
    if not trace_ids:
        raise DiagnosisRunInvalidError(f"Run {run.pk} has no trace whose judging errored: nothing to re-judge.")
    return diagnosis_run_start(
        project=run.project, trace_ids=sorted(trace_ids), judges=list(run.judges), model=run.model,
        rubric_ids=run.rubric_ids if run.rubric_ids == "all" else list(run.rubric_ids or []),
        budget_tokens=run.budget_tokens, budget_cost=run.budget_cost, created_by=created_by,
        name=f"Re-judge the errors of {run.name or str(run.pk)[:8]}"[:200], config={"retry_of": str(run.pk)},
        enqueue=enqueue, purpose=run.purpose)
