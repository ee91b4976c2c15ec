"""Turning judge outputs and call outcomes into contract JudgeResults."""

from __future__ import annotations

from diagnosis.judges.contract import Evidence, JudgeIssue, JudgeResult

from .client import CallOutcome

SEVERITIES = ("low", "medium", "high", "critical")


class EvidenceFilter:
    """Keeps evidence that names a span of the trace; counts the rest (quotes are verified by the orchestrator)."""

    def __init__(self, span_ids: set[str]) -> None:
        self.span_ids = span_ids
        self.dropped = 0

    def evidence(self, items: list[dict] | None) -> list[Evidence]:
        kept = []
        for item in items or []:
            span_id = str(item.get("span_id", ""))
            if span_id in self.span_ids:
                kept.append(Evidence(span_id=span_id, quote=str(item.get("quote", ""))))
            else:
                self.dropped += 1
        return kept

    def issues(self, items: list[dict] | None) -> list[JudgeIssue]:
        out = []
        for item in items or []:
            severity = item.get("severity") if item.get("severity") in SEVERITIES else "medium"
            out.append(JudgeIssue(title=str(item.get("title", "")).strip(), detail=str(item.get("detail", "")),
                                  severity=severity, evidence=self.evidence(item.get("evidence"))))
        return out


def split_evenly(total: int, weights: list[float]) -> list[int]:
    """Integer shares of `total` proportional to `weights` (largest remainder; the shares sum to `total`)."""
    if not weights:
        return []
    weight_sum = sum(weights)
    if weight_sum <= 0:
        weights, weight_sum = [1.0] * len(weights), float(len(weights))
    exact = [total * w / weight_sum for w in weights]
    shares = [int(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: exact[i] - shares[i], reverse=True)
    for i in order[: total - sum(shares)]:
        shares[i] += 1
    return shares


def call_details(outcome: CallOutcome) -> dict:
    details = {"calls": outcome.calls, "cache_hit": outcome.cache_hit, "repaired": outcome.repaired}
    if outcome.notes:
        details["notes"] = list(outcome.notes)
    if outcome.cached_usage:
        details["cached_usage"] = outcome.cached_usage
    return details


def failed(judge: str, target: str | None, outcome: CallOutcome, *, model: str, prompt_version: str,
           details: dict | None = None, share: float = 1.0) -> JudgeResult:
    """A result for a call that produced nothing usable: status error/skipped, score None (never 0)."""
    status = outcome.status if outcome.status in ("error", "skipped") else "error"
    return JudgeResult(
        judge=judge, target_span_id=target, status=status, score=None, verdict=None, model=model,
        prompt_version=prompt_version, input_tokens=round(outcome.input_tokens * share),
        output_tokens=round(outcome.output_tokens * share), cost=outcome.cost * share,
        latency_ms=outcome.latency_ms, cache_key=outcome.cache_key, error=outcome.error or "judge failed",
        details={**call_details(outcome), **(details or {}), **error_cause(outcome)},
    )


def error_cause(outcome: CallOutcome) -> dict:
    """{"cause": …} for an error result (grouped by the run), {} otherwise: a skip is not a failure."""
    if outcome.status == "skipped":
        return {}
    return {"cause": outcome.cause or "invalid_output"}


def skipped(judge: str, target: str | None, reason: str, *, model: str, prompt_version: str,
            details: dict | None = None) -> JudgeResult:
    return JudgeResult(judge=judge, target_span_id=target, status="skipped", model=model,
                       prompt_version=prompt_version, error=reason, details=dict(details or {}))
