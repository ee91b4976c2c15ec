"""Computing attributions for failed traces: one row per (trace, method), recomputed in place."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from django.conf import settings
from django.db import transaction
from django.db.models import Max

from clear.projects.models import Project
from diagnosis.judges.contract import JudgeResult
from diagnosis.judges.llm.config import LlmJudgeConfig
from diagnosis.judges.rules import RULES
from diagnosis.models import Feedback
from diagnosis.services.trace_view import trace_view_build
from traces.models import Trace

from .errors import AttributionInvalidError
from .heuristic import FeedbackSignal, attribute_heuristic
from .learned import example_build, shipped_model
from .llm import METHODS, attribute_with_llm
from .models import Attribution
from .steps import goal_text, trace_steps

HEURISTIC_VERSION = "heuristic-v1"
# A new shipped model (learned_model.json) is a new version: attribution_compute_for_run recomputes older rows.
LEARNED_VERSION = "learned-v3"
LLM_METHODS = tuple(METHODS)
OFFLINE_METHODS = ("learned", "heuristic")
ALL_METHODS = OFFLINE_METHODS + LLM_METHODS
_SEVERITY_RANK = {"low": 0, "medium": 1, "high": 2, "critical": 3}

ProgressCallback = Callable[[int, int], None]


def _max_severity(issues: Iterable[dict]) -> str:
    severities = [str(issue.get("severity") or "medium") for issue in issues if isinstance(issue, dict)]
    return max(severities, key=lambda s: _SEVERITY_RANK.get(s, 1), default="medium")


def _evidence_ids(issues: Iterable[dict]) -> list[str]:
    ids: list[str] = []
    for issue in issues:
        for item in (issue.get("evidence") or []) if isinstance(issue, dict) else []:
            span_id = str(item.get("span_id") or "") if isinstance(item, dict) else ""
            if span_id and span_id not in ids:
                ids.append(span_id)
    return ids


def _signal(*, judge: str, span_id: str | None, verdict: str | None, issues: list[dict],
            details: dict) -> FeedbackSignal:
    cause = (details or {}).get("root_cause")
    cause_span = str(cause.get("span_id") or "") if isinstance(cause, dict) else ""
    return FeedbackSignal(judge=judge, span_id=span_id or None, verdict=verdict, severity=_max_severity(issues),
                          root_cause_span_id=cause_span or None, evidence_span_ids=_evidence_ids(issues))


def rule_signals(results: list[JudgeResult]) -> list[FeedbackSignal]:
    return [_signal(judge=r.judge, span_id=r.target_span_id, verdict=r.verdict,
                    issues=[asdict(issue) for issue in r.issues], details=r.details)
            for r in results if r.status in ("ok", "truncated")]


def feedback_signals(*, project: Project, trace: Trace, view=None) -> tuple[list[FeedbackSignal], str]:
    """The judges' findings on the trace: its stored Feedback (newest first, one per judge and target) or, when it
    has none, the rule judges run here. Returns (signals, "feedback" | "rules")."""
    rows = (Feedback.objects.filter(project=project, trace=trace, status__in=("ok", "truncated"))
            .order_by("-created_at").values("judge", "target_span_id", "verdict", "issues", "details"))
    signals, seen = [], set()
    for row in rows:
        key = (row["judge"], row["target_span_id"])
        if key in seen:
            continue
        seen.add(key)
        signals.append(_signal(judge=row["judge"], span_id=row["target_span_id"], verdict=row["verdict"],
                               issues=row["issues"] or [], details=row["details"] or {}))
    if signals:
        return signals, "feedback"
    view = view or trace_view_build(trace=trace)
    results = [result for rule in RULES.values() for result in rule(view, None)]
    return rule_signals(results), "rules"


def _llm_config(*, model: str | None, api_base: str | None, api_key: str | None,
                config: LlmJudgeConfig | None) -> LlmJudgeConfig:
    if config is not None:
        return config
    model = model or getattr(settings, "CLEAR_JUDGE_MODEL", "") or ""
    if not model:
        raise AttributionInvalidError("The LLM attribution methods need a model: pass --model or set "
                                      "CLEAR_JUDGE_MODEL.")
    return LlmJudgeConfig.from_settings(model=model, api_base=api_base or getattr(settings, "CLEAR_JUDGE_API_BASE",
                                                                                   None) or None,
                                        api_key=api_key or getattr(settings, "CLEAR_JUDGE_API_KEY", None) or None)


def attribution_compute(*, project: Project, trace: Trace, method: str = "learned", model: str | None = None,
                        api_base: str | None = None, api_key: str | None = None,
                        config: LlmJudgeConfig | None = None) -> Attribution:
    """Attribute a failed trace with one method and store the result (replacing that method's previous one).

    LLM methods take a LiteLLM model string (default CLEAR_JUDGE_MODEL) or a full `config`; a method that fails
    (provider error, output still invalid after one repair) stores status "error" with the error, never a guess."""
    if method not in ALL_METHODS:
        raise AttributionInvalidError(f"Unknown attribution method {method!r}: use one of {', '.join(ALL_METHODS)}.")
    if trace.project_id != project.pk:
        raise AttributionInvalidError("The trace belongs to another project.")
    if trace.outcome != Trace.Outcome.FAILURE:
        raise AttributionInvalidError(f"Only failed traces are attributed; trace {trace.trace_id} has outcome "
                                      f"{trace.outcome or 'unknown'}.")
    view = trace_view_build(trace=trace)
    steps = trace_steps(view)
    goal = goal_text(view)
    if method == "learned":
        signals, source = feedback_signals(project=project, trace=trace, view=view)
        model = shipped_model()
        prediction = model.predict(example_build(trace_id=trace.trace_id, group=trace.task_id, steps=steps, goal=goal,
                                                 signals=signals, trace=view))
        # Unconfident, no single agent is named: the row is inconclusive and its details hold the candidates (the
        # top one still answers for `attribution_score`'s all-run figure).
        step = prediction.step if prediction.confident else None
        values = {
            "status": Attribution.Status.OK if step else Attribution.Status.INCONCLUSIVE,
            "agent": (prediction.agent or "")[:300] if step else "", "span_id": step.span_id if step else "",
            "step_index": step.index if step else None, "confidence": prediction.confidence,
            "reason": prediction.reason[:480], "error": "", "model": "", "prompt_version": LEARNED_VERSION,
            "calls": 0, "input_tokens": 0, "output_tokens": 0, "cost": 0.0,
            "details": {"signals_from": source, "signals": len(signals), "steps": len(steps),
                        "confident": prediction.confident, "low_confidence": prediction.low_confidence,
                        "threshold": model.threshold_agent if len({s.agent for s in steps if s.is_actor}) > 1
                        else model.threshold_step,
                        "candidates": prediction.candidates, "evidence": prediction.evidence,
                        "top": {"agent": prediction.agent or "",
                                "step": prediction.step.index if prediction.step else None,
                                "span_id": prediction.step.span_id if prediction.step else ""},
                        "trained_on": model.trained_on},
        }
    elif method == "heuristic":
        signals, source = feedback_signals(project=project, trace=trace, view=view)
        decision = attribute_heuristic(steps=steps, goal=goal, signals=signals)
        step = decision.step
        values = {
            "status": Attribution.Status.OK if step else Attribution.Status.INCONCLUSIVE,
            "agent": step.agent if step else "", "span_id": step.span_id if step else "",
            "step_index": step.index if step else None, "confidence": decision.confidence,
            "reason": decision.reason, "error": "", "model": "", "prompt_version": HEURISTIC_VERSION,
            "calls": 0, "input_tokens": 0, "output_tokens": 0, "cost": 0.0,
            "details": {"signals_from": source, "signals": len(signals), "steps": len(steps),
                        "candidates": decision.candidates},
        }
    else:
        llm_config = _llm_config(model=model, api_base=api_base, api_key=api_key, config=config)
        found = attribute_with_llm(method=method, goal=goal, steps=steps, config=llm_config)
        step = found.step if found.status == "ok" else None
        values = {
            "status": found.status, "agent": found.agent if step else "", "span_id": step.span_id if step else "",
            "step_index": step.index if step else None,
            "confidence": None if found.confidence is None else max(0.0, min(1.0, found.confidence)),
            "reason": " ".join(found.reason.split())[:480], "error": found.error, "model": llm_config.model[:300],
            "prompt_version": found.prompt_version, "calls": found.calls, "input_tokens": found.input_tokens,
            "output_tokens": found.output_tokens, "cost": found.cost, "details": {**found.details, "steps": len(steps)},
        }
    with transaction.atomic():
        attribution, _ = Attribution.objects.update_or_create(trace=trace, method=method,
                                                              defaults={"project": project, **values})
    return attribution


@dataclass
class AttributionBatch:
    method: str
    computed: int = 0
    already_present: int = 0
    errors: int = 0  # attributions stored with status "error"
    attributions: list[Attribution] = field(default_factory=list)


def attribution_compute_for_project(*, project: Project, method: str = "learned", model: str | None = None,
                                    api_base: str | None = None, api_key: str | None = None,
                                    config: LlmJudgeConfig | None = None, recompute: bool = False,
                                    trace_ids: Iterable[str] | None = None,
                                    progress: ProgressCallback | None = None) -> AttributionBatch:
    """Attribute every failed trace of the project (or those of `trace_ids`) that has no attribution by `method`
    yet (all of them with `recompute`)."""
    if method not in ALL_METHODS:
        raise AttributionInvalidError(f"Unknown attribution method {method!r}: use one of {', '.join(ALL_METHODS)}.")
    if method not in OFFLINE_METHODS:
        config = _llm_config(model=model, api_base=api_base, api_key=api_key, config=config)
    traces = Trace.objects.filter(project=project, outcome=Trace.Outcome.FAILURE).order_by("start_time", "pk")
    if trace_ids is not None:
        wanted = {str(t) for t in trace_ids}
        traces = traces.filter(trace_id__in=wanted | {t.lower() for t in wanted})
    batch = AttributionBatch(method=method)
    existing = {a.trace_id: a for a in Attribution.objects.filter(project=project, method=method)}
    traces = list(traces)
    for done, trace in enumerate(traces, start=1):
        if not recompute and trace.pk in existing:
            batch.already_present += 1
            batch.attributions.append(existing[trace.pk])
        else:
            attribution = attribution_compute(project=project, trace=trace, method=method, config=config)
            batch.computed += 1
            batch.errors += attribution.status == Attribution.Status.ERROR
            batch.attributions.append(attribution)
        if progress:
            progress(done, len(traces))
    return batch


def attribution_compute_for_run(*, run_id) -> AttributionBatch | None:
    """After a run's insights are built: the learned attribution of the run's failed traces, for those that have none
    yet or whose attribution is older than the run's feedback on them (new evidence); offline, no model calls. The
    insight page and the ticket list read these. None when the run is gone."""
    from diagnosis.models import DiagnosisRun

    run = DiagnosisRun.objects.filter(pk=run_id).select_related("project").first()
    if run is None:
        return None
    judged = dict(Feedback.objects.filter(run=run, trace__outcome=Trace.Outcome.FAILURE)
                  .values_list("trace_id").annotate(last=Max("created_at")).values_list("trace_id", "last"))
    attributed = {pk: (updated, version) for pk, updated, version in
                  Attribution.objects.filter(project=run.project, method="learned", trace_id__in=list(judged))
                  .values_list("trace_id", "updated_at", "prompt_version")}
    # Stale: none yet, older than the run's feedback, or made by an earlier version of the method.
    stale = [pk for pk, last in judged.items()
             if pk not in attributed or attributed[pk][0] < last or attributed[pk][1] != LEARNED_VERSION]
    batch = AttributionBatch(method="learned")
    for trace in Trace.objects.filter(pk__in=stale).order_by("start_time", "pk"):
        batch.attributions.append(attribution_compute(project=run.project, trace=trace, method="learned"))
        batch.computed += 1
    batch.already_present = len(judged) - len(stale)
    return batch


def attribution_compute_for_insight(*, project: Project, insight_id: int) -> AttributionBatch | None:
    """The learned attribution (offline) of the insight's failing traces that have none yet: what the insight page's
    "Attribute them" button asks a worker for. None when the insight is not the project's."""
    from diagnosis.models import Insight, InsightStatement

    insight = Insight.objects.filter(project=project, pk=insight_id).first()
    if insight is None:
        return None
    field = "node_insight" if insight.level == Insight.Level.NODE else "system_insight"
    trace_ids = set(InsightStatement.objects.filter(project=project, excluded=False, **{field: insight},
                                                    trace__outcome=Trace.Outcome.FAILURE)
                    .values_list("trace__trace_id", flat=True))
    return attribution_compute_for_project(project=project, method="learned", trace_ids=trace_ids)


def attribution_request_for_insight(*, project: Project, insight_id: int) -> None:
    """Queue attribution_compute_for_insight for a worker, after the request's transaction commits."""
    from django.db import transaction

    from diagnosis.tasks import attribute_insight

    transaction.on_commit(lambda: attribute_insight.delay(project.pk, insight_id))
