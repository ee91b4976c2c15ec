"""What every rule judge returns: one failing result per blamed span, a whole-trace pass, a skip, or a pass for a
recovered not-found; quotes are clipped to what the evidence check can verify."""

from __future__ import annotations

from diagnosis.judges.contract import JudgeIssue, JudgeResult, SpanView
from diagnosis.judges.recovery import Recovery

# 2: tool-call turns in every format are output; recovered not-founds pass. 3: error titles name the tool and the
# error's pattern (a cached result of 2 would bring back titles that lump every error of a tool together).
# 4: outliers need twice the median as well as the z-score, and pass (with the finding) on a succeeding trace.
RULES_VERSION = "rules-4"
_QUOTE_MAX = 200


def rule_fail(judge: str, span_id: str | None, critique: str, issues: list[JudgeIssue], **details) -> JudgeResult:
    return JudgeResult(judge=judge, target_span_id=span_id, status="ok", score=0.0, verdict="fail",
                       critique=critique, issues=issues, prompt_version=RULES_VERSION, details=details)


def rule_pass(judge: str, critique: str) -> JudgeResult:
    return JudgeResult(judge=judge, target_span_id=None, status="ok", score=1.0, verdict="pass", critique=critique,
                       prompt_version=RULES_VERSION)


def rule_noted(judge: str, span_id: str | None, critique: str, issues: list[JudgeIssue], **details) -> JudgeResult:
    """A finding that is no failure by itself: it speaks to the clustering (issues) under a passing verdict."""
    return JudgeResult(judge=judge, target_span_id=span_id, status="ok", score=1.0, verdict="pass",
                       critique=critique, issues=issues, prompt_version=RULES_VERSION, details=details)


def rule_recovered(judge: str, span: SpanView, recovery: Recovery) -> JudgeResult:
    critique = (f"Recovered not-found: {span_label(span)} found nothing (\u201c{recovery.quote}\u201d) and the agent "
                f"went on with {span_label(recovery.next_span)}; the run did not fail.")
    return JudgeResult(judge=judge, target_span_id=span.span_id, status="ok", score=1.0, verdict="pass",
                       critique=critique, prompt_version=RULES_VERSION,
                       details={"recovered_not_found": True, "error": recovery.quote,
                                "next_span_id": recovery.next_span.span_id})


def rule_skip(judge: str, reason: str) -> JudgeResult:
    return JudgeResult(judge=judge, target_span_id=None, status="skipped", critique=reason,
                       prompt_version=RULES_VERSION)


def clip(text: str) -> str:
    text = text.strip()
    return text[:_QUOTE_MAX]


def span_label(span: SpanView) -> str:
    return f"{span.name} ({span.node})" if span.node and span.node not in span.name else span.name
