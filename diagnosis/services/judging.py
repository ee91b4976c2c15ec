"""Judging one trace of a run: which judges run (the plan), rule and rubric results (cached by content), the LLM
judges through their hook, evidence verification, and the Feedback rows written idempotently."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict, dataclass, field

from django.db.models import F

from diagnosis import conf
from diagnosis.judges.contract import JudgeResult, TraceView
from diagnosis.judges.contrastive import CONTRASTIVE_JUDGE  # noqa: F401  (re-exported for the pages)
from diagnosis.judges.results import result_from_dict, result_to_dict
from diagnosis.judges.rubric_checks import DETERMINISTIC_KINDS, RUBRICS_VERSION, rubric_check
from diagnosis.judges.rules import RULES
from diagnosis.judges.rules.outliers import stats_key
from diagnosis.judges.rules.verdicts import RULES_VERSION
from diagnosis.models import DiagnosisRun, Feedback, Rubric
from diagnosis.services.cache import judge_cache_get, judge_cache_key, judge_cache_put
from diagnosis.services.evidence import evidence_verify, span_texts
from diagnosis.services.rubrics import rubric_as_dict

logger = logging.getLogger(__name__)

RULE_JUDGES = tuple(RULES)
LLM_JUDGES = ("llm.step", "llm.trace")
RUBRICS_ALIAS = "rubrics"
ERRORS_KEPT = 100


@dataclass
class JudgePlan:
    rules: list[str] = field(default_factory=list)
    rubrics: list[dict] = field(default_factory=list)  # deterministic, evaluated as code
    llm_rubrics: list[dict] = field(default_factory=list)  # handed to the LLM judges
    llm_judges: list[str] = field(default_factory=list)
    model: str = ""

    @property
    def rubric_ids(self) -> set[int]:
        return {r["id"] for r in self.rubrics + self.llm_rubrics}


def run_model(*, run: DiagnosisRun) -> str:
    return run.model or conf.judge_model()


def judge_plan_build(*, run: DiagnosisRun) -> JudgePlan:
    """Resolve the run's judge names and rubric selection into what runs on each trace."""
    names = list(run.judges or [])
    model = run_model(run=run)
    plan = JudgePlan(rules=[n for n in names if n in RULES], model=model)
    if model:
        plan.llm_judges = [n for n in names if n in LLM_JUDGES]
    rubrics = Rubric.objects.filter(project_id=run.project_id)
    wanted_ids = {int(n.split(".", 1)[1]) for n in names if n.startswith("rubric.") and n.split(".", 1)[1].isdigit()}
    selected: list[Rubric] = []
    if RUBRICS_ALIAS in names:
        if run.rubric_ids == "all" or run.rubric_ids is None:
            selected = list(rubrics.filter(enabled=True).order_by("pk"))
        else:
            selected = list(rubrics.filter(pk__in=list(run.rubric_ids)).order_by("pk"))
    if wanted_ids:
        selected += [r for r in rubrics.filter(pk__in=wanted_ids).order_by("pk") if r not in selected]
    for rubric in selected:
        data = rubric_as_dict(rubric)
        if rubric.kind in DETERMINISTIC_KINDS:
            plan.rubrics.append(data)
        elif plan.llm_judges:
            plan.llm_rubrics.append(data)
    return plan


def _error_result(judge: str, exc: BaseException | str, target: str | None = None) -> JudgeResult:
    message = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    return JudgeResult(judge=judge, target_span_id=target, status="error", error=message[:2000])


def _stats_for(trace: TraceView, node_stats: dict) -> dict:
    keys = {stats_key(s.node, s.kind, s.tool_name) for s in trace.spans}
    return {key: node_stats[key] for key in sorted(keys) if key in node_stats}


def deterministic_results(*, trace: TraceView, plan: JudgePlan, node_stats: dict) -> list[JudgeResult]:
    """Rule judges and code rubrics. Cached by content like the LLM judges: an unchanged trace reuses its results."""
    if not plan.rules and not plan.rubrics:
        return []
    stats = _stats_for(trace, node_stats)
    key = judge_cache_key(
        judge="deterministic", prompt_version=f"{RULES_VERSION}+{RUBRICS_VERSION}", model="",
        content={"trace": asdict(trace), "rules": plan.rules, "rubrics": plan.rubrics, "stats": stats},
    )
    cached = judge_cache_get(key=key)
    if cached is not None:
        results = [result_from_dict(item) for item in cached["results"]]
        for result in results:
            result.cache_key = key
            result.details = {**result.details, "cache": "hit"}
        return results
    results: list[JudgeResult] = []
    for name in plan.rules:
        try:
            results += RULES[name](trace, stats)
        except Exception as exc:  # noqa: BLE001 - a broken judge is recorded as an error, never a zero score
            logger.exception("diagnosis.rule_failed judge=%s trace=%s", name, trace.trace_id)
            results.append(_error_result(name, exc))
    for rubric in plan.rubrics:
        try:
            results.append(rubric_check(rubric, trace))
        except Exception as exc:  # noqa: BLE001
            logger.exception("diagnosis.rubric_failed rubric=%s trace=%s", rubric["id"], trace.trace_id)
            results.append(_error_result(f"rubric.{rubric['id']}", exc))
    if not any(r.status == "error" for r in results):
        judge_cache_put(key=key, result={"results": [result_to_dict(r) for r in results]})
    for result in results:
        result.cache_key = key
    return results


class RunStopped(Exception):
    """The run was cancelled or failed while its LLM judges were working."""


class RunBudget:
    """The LLM judges' budget gate for one trace: the run's recorded spend plus what this trace spent so far.
    Spend is recorded on the run when the trace's Feedback is written, so traces judged concurrently on several
    workers can overshoot by at most their in-flight calls."""

    def __init__(self, run: DiagnosisRun) -> None:
        self.run_id = run.pk
        self.budget_tokens = run.budget_tokens
        self.budget_cost = run.budget_cost
        self.tokens = 0
        self.cost = 0.0
        self.refused = False
        self._lock = threading.Lock()

    def allow(self, tokens_estimate: int) -> bool:
        row = DiagnosisRun.objects.filter(pk=self.run_id).values(
            "status", "input_tokens", "output_tokens", "cost").first()
        if row is None or row["status"] in (DiagnosisRun.Status.CANCELLED, DiagnosisRun.Status.FAILED):
            raise RunStopped()
        with self._lock:
            used_tokens = row["input_tokens"] + row["output_tokens"] + self.tokens
            used_cost = row["cost"] + self.cost
        if self.budget_tokens is not None and used_tokens + max(0, tokens_estimate) > self.budget_tokens:
            self.refused = True
        elif self.budget_cost is not None and used_cost >= self.budget_cost:
            self.refused = True
        return not self.refused

    def spend(self, tokens: int, cost: float) -> None:
        with self._lock:
            self.tokens += int(tokens or 0)
            self.cost += float(cost or 0.0)


def _cache_get(key: str) -> dict | None:
    return judge_cache_get(key=key)


def _cache_put(key: str, result: dict) -> None:
    judge_cache_put(key=key, result=result)


def llm_results(*, run: DiagnosisRun, trace: TraceView, plan: JudgePlan) -> tuple[list[JudgeResult], bool] | None:
    """Call the LLM judges (diagnosis.judges.llm.judge_trace_with_llm, imported only when a run uses them).
    Returns (results, budget_refused), or None when the run was cancelled meanwhile. Judges the budget kept from
    running are left out: they are not failures."""
    if not plan.llm_judges:
        return [], False
    try:
        from diagnosis.judges.llm import BUDGET_EXHAUSTED, LlmJudgeConfig, judge_trace_with_llm
    except ImportError as exc:
        return [JudgeResult(judge=name, target_span_id=None, status="skipped",
                            critique=f"LLM judges are not available in this installation ({exc}).")
                for name in plan.llm_judges], False
    budget = RunBudget(run)
    options = run.config or {}
    try:
        # from_settings: the endpoint, timeout, retries, max_tokens ceiling and structured-output mode (CLEAR_JUDGE_*)
        config = LlmJudgeConfig.from_settings(
            model=plan.model,
            step_judges="llm.step" in plan.llm_judges,
            trace_judge="llm.trace" in plan.llm_judges,
            generated_rubrics=bool(options.get("generated_rubrics", False)),
            cache_get=_cache_get,
            cache_put=_cache_put,
            budget=budget,
        )
        llm_rubrics = [{**r, "text": r["config"].get("criterion", "")} for r in plan.llm_rubrics]
        results = list(judge_trace_with_llm(trace=trace, rubrics=llm_rubrics, config=config))
    except RunStopped:
        return None
    except Exception as exc:  # noqa: BLE001 - recorded as an error per LLM judge; the rule judges still count
        logger.exception("diagnosis.llm_failed run=%s trace=%s", run.pk, trace.trace_id)
        return [_error_result(name, exc) for name in plan.llm_judges], budget.refused
    kept = [r for r in results if not (r.status == "skipped" and r.error == BUDGET_EXHAUSTED)]
    for result in kept:
        result.model = result.model or plan.model
    return kept, budget.refused or len(kept) < len(results)


def budget_exceeded(run: DiagnosisRun) -> bool:
    if run.budget_tokens is not None and run.total_tokens >= run.budget_tokens:
        return True
    return run.budget_cost is not None and run.cost >= run.budget_cost


def _dedupe(results: list[JudgeResult]) -> list[JudgeResult]:
    """One result per (judge, target): a judge that returns two for one target keeps the first."""
    seen, kept = set(), []
    for result in results:
        key = (result.judge, result.target_span_id or None)
        if key not in seen:
            seen.add(key)
            kept.append(result)
    return kept


_STATUSES = set(Feedback.Status.values)
_VERDICTS = set(Feedback.Verdict.values)


def _feedback_values(*, run: DiagnosisRun, result: JudgeResult, rubric_ids: set[int], dropped: int) -> dict:
    kind = result.judge.split(".", 1)[0]
    rubric_id = None
    if kind == "rubric":
        tail = result.judge.split(".", 1)[1] if "." in result.judge else ""
        rubric_id = int(tail) if tail.isdigit() and int(tail) in rubric_ids else None
    details = dict(result.details or {})
    if dropped:
        details["dropped_evidence"] = dropped
    return {
        "project_id": run.project_id,
        "judge_kind": kind[:20],
        "rubric_id": rubric_id,
        "model": (result.model or "")[:300],
        "prompt_version": (result.prompt_version or "")[:100],
        "status": result.status if result.status in _STATUSES else "error",
        "score": None if result.score is None else max(0.0, min(1.0, float(result.score))),
        "verdict": result.verdict if result.verdict in _VERDICTS else None,
        "critique": result.critique or "",
        "issues": [asdict(issue) for issue in result.issues],
        "details": details,
        "error": result.error or "",
        "input_tokens": max(0, int(result.input_tokens or 0)),
        "output_tokens": max(0, int(result.output_tokens or 0)),
        "cost": max(0.0, float(result.cost or 0.0)),
        "latency_ms": float(result.latency_ms or 0.0),
        "cache_key": (result.cache_key or "")[:64],
    }


@dataclass
class WriteTotals:
    created: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    dropped: int = 0
    errors: list[dict] = field(default_factory=list)


def feedback_write(*, run: DiagnosisRun, trace_pk: int, trace_id: str, results: list[JudgeResult],
                   dropped: dict[int, int], rubric_ids: set[int]) -> WriteTotals:
    """Insert the results whose (judge, target) this run has no row for yet; only those count towards the run's
    totals. The caller holds the run row's lock, so no other writer of this run interleaves; the unique
    constraints (and ignore_conflicts) are the backstop."""
    totals = WriteTotals()
    existing = set(Feedback.objects.filter(run=run, trace_id=trace_pk).values_list("judge", "target_span_id"))
    rows = []
    for index, result in enumerate(results):
        key = (result.judge[:200], result.target_span_id or None)
        if key in existing:
            continue
        existing.add(key)
        values = _feedback_values(run=run, result=result, rubric_ids=rubric_ids, dropped=dropped.get(index, 0))
        rows.append(Feedback(run=run, trace_id=trace_pk, judge=key[0], target_span_id=key[1], **values))
        totals.created += 1
        totals.input_tokens += values["input_tokens"]
        totals.output_tokens += values["output_tokens"]
        totals.cost += values["cost"]
        totals.dropped += dropped.get(index, 0)
        if values["status"] == "error":
            # The cause (clear/llm_errors.py) lets the run group its errors; a judge that is not a model call has none.
            totals.errors.append({"trace_id": trace_id, "judge": result.judge, "error": values["error"][:500],
                                  "cause": str(values["details"].get("cause") or "judge_error")})
    Feedback.objects.bulk_create(rows, ignore_conflicts=True, batch_size=500)
    return totals


def run_totals_add(*, run: DiagnosisRun, totals: WriteTotals, extra_tokens: int = 0, extra_cost: float = 0.0) -> None:
    """Add a trace's spend to the run; the caller holds the run row's lock (errors is read-modify-write)."""
    updates = {
        "input_tokens": F("input_tokens") + totals.input_tokens + extra_tokens,
        "output_tokens": F("output_tokens") + totals.output_tokens,
        "cost": F("cost") + totals.cost + extra_cost,
        "dropped_evidence": F("dropped_evidence") + totals.dropped,
        "error_count": F("error_count") + len(totals.errors),
    }
    if totals.errors and len(run.errors) < ERRORS_KEPT:
        updates["errors"] = (run.errors + totals.errors)[:ERRORS_KEPT]
    DiagnosisRun.objects.filter(pk=run.pk).update(**updates)


@dataclass
class TraceOutcome:
    results: list[JudgeResult]
    dropped: dict[int, int]  # result index -> evidence quotes dropped
    budget_refused: bool = False  # the budget stopped some LLM judges: the run stops after this trace


def trace_results(*, run: DiagnosisRun, trace: TraceView, plan: JudgePlan,
                  still_running) -> TraceOutcome | None:
    """All judges' results for one trace with unverifiable evidence dropped (per-result counts), or None when the
    run stopped (cancelled, out of budget) before the paid judges could run."""
    results = deterministic_results(trace=trace, plan=plan, node_stats=run.node_stats or {})
    budget_refused = False
    if plan.llm_judges:
        current = still_running()
        if current is None:
            return None
        outcome = llm_results(run=current, trace=trace, plan=plan)
        if outcome is None:
            return None
        llm, budget_refused = outcome
        results += llm
    results = _dedupe(results)
    dropped: dict[int, int] = {}
    texts = span_texts(trace)
    for index, result in enumerate(results):
        count = evidence_verify(trace=trace, results=[result], texts=texts)
        if count:
            dropped[index] = count
    delay = float((run.config or {}).get("trace_delay_seconds") or 0)
    if delay > 0:
        time.sleep(delay)  # a test hook: makes trace tasks slow enough to kill a worker mid-run
    return TraceOutcome(results=results, dropped=dropped, budget_refused=budget_refused)
