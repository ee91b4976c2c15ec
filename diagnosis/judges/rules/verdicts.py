"""What every rule judge returns: one failing result per blamed span, a whole-trace pass, a skip, or a pass for a
recovered not-found; quotes are clipped to what the evidence check can verify. A tool call's findings blame the step
that decided it (judges/decision.py), and one step may issue several failing calls: `merge_by_target` makes them one
result per step (a judge leaves one Feedback per target), identical issues one issue citing every call."""

from __future__ import annotations

from diagnosis.judges.contract import JudgeIssue, JudgeResult, SpanView
from diagnosis.judges.recovery import Recovery

# 2: tool-call turns in every format are output; recovered not-founds pass. 3: error titles name the tool and the
# error's pattern (a cached result of 2 would bring back titles that lump every error of a tool together).
# 4: outliers need twice the median as well as the z-score, and pass (with the finding) on a succeeding trace.
# 5: a tool call's error or repetition targets the step that decided the call, with the call and reply as evidence;
# an error the run recovered from keeps its issue, at low severity, under a passing verdict (rule_recovered_error).
# 6: a recovered error carries its call's node as the judges see it (details["node"]).
RULES_VERSION = "rules-6"
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


def rule_recovered_error(result: JudgeResult, span: SpanView, trace) -> JudgeResult:
    """`result` (an error rule's failing result about the failed call `span`) as it stands, or, when the run later
    reached what the call sought (recovery.py `error_recovery`), the same issues at low severity under a passing
    verdict flagged details["recovered"]: the insights keep it in the error's own insight and count it apart."""
    from diagnosis.judges.recovery import error_recovery

    recovery = error_recovery(span, trace)
    if recovery is None:
        return result
    how = "corrected the call" if recovery.how == "corrected" else "found what it sought"
    issues = [JudgeIssue(title=i.title, detail=i.detail, severity="low", evidence=list(i.evidence))
              for i in result.issues]
    # The failed call is the target, whoever decided it: one Feedback per target, and a step that issued two
    # recovered calls would otherwise give two results for one target. details["node"] is the call's node in the
    # judges' view, its caller's (insights/statements.py): a tool recorded as a plain span has its own name as its
    # stored node, and the call's unrecovered occurrences are the deciding agent's.
    return JudgeResult(judge=result.judge, target_span_id=span.span_id, status="ok", score=1.0, verdict="pass",
                       critique=f"Recovered error: {span_label(span)} failed, then the run {how} with "
                                f"{span_label(recovery.by)}.",
                       issues=issues, prompt_version=RULES_VERSION,
                       details={**result.details, "recovered": True, "recovered_by": recovery.by.span_id,
                                "recovered_how": recovery.how, "node": span.node})


def merge_by_target(results: list[JudgeResult]) -> list[JudgeResult]:
    """One result per target: issues of failing results with the same target joined (an issue repeated with the
    same title and detail kept once, citing every span), list details joined, other details the first's."""
    merged: dict[str | None, JudgeResult] = {}
    out: list[JudgeResult] = []
    for result in results:
        first = merged.get(result.target_span_id) if result.verdict == "fail" else None
        if first is None:
            if result.verdict == "fail":
                merged[result.target_span_id] = result
            out.append(result)
            continue
        for issue in result.issues:
            same = next((i for i in first.issues if (i.title, i.detail) == (issue.title, issue.detail)), None)
            if same is None:
                first.issues.append(issue)
                continue
            cited = {(e.span_id, e.quote) for e in same.evidence}
            same.evidence += [e for e in issue.evidence if (e.span_id, e.quote) not in cited]
            if SEVERITIES.index(issue.severity) > SEVERITIES.index(same.severity):
                same.severity = issue.severity
        for key, value in result.details.items():
            if isinstance(value, list) and isinstance(first.details.get(key), list):
                first.details[key] += [v for v in value if v not in first.details[key]]
            else:
                first.details.setdefault(key, value)
    return out


SEVERITIES = ("low", "medium", "high", "critical")


def rule_skip(judge: str, reason: str) -> JudgeResult:
    return JudgeResult(judge=judge, target_span_id=None, status="skipped", critique=reason,
                       prompt_version=RULES_VERSION)


def clip(text: str) -> str:
    text = text.strip()
    return text[:_QUOTE_MAX]


def span_label(span: SpanView) -> str:
    return f"{span.name} ({span.node})" if span.node and span.node not in span.name else span.name
