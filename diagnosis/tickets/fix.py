"""A ticket's suggested fix, drawn from what fired.

With a model (insight.naming_source == "llm") the namer's recommendation is the fix: it read the statements. Without
one, restating the statements ("fix the behaviour that makes judges report …") tells a developer nothing new, so the
fix names the check whose finding the insight's title names (else one with a known demand, else the one cited most
often among the insight's evidence), what that check demands (a rubric's configuration, a rule's known remedy), a
span at the insight's node it fired on, which the body links to (the step the judge blamed first: for a tool call,
the step that decided it), and what that decision was, from the spans (judges/decision.py `decision_facts`: what
the step did and what it had in front of it).

Returns plain text plus the span: {"text", "source": "llm" | "rubric" | "rule" | "judge" | "", "trace_id",
"span_id"}. Names and statements in it are untrusted; body.py escapes them.
"""

from __future__ import annotations

from collections import Counter

from diagnosis.clustering.naming import title_generalize
from diagnosis.judges.decision import decision_facts
from diagnosis.models import Feedback, Insight, Rubric
from traces.models import Span

# What each rule judge (diagnosis/judges/rules/) demands, as a remedy.
RULE_REMEDIES = {
    "rule.span_error": "Find why that step raises and handle the error where it occurs (or stop the step from "
                       "being taken when its input is invalid).",
    "rule.tool_error": "Make the tool call valid, or handle the tool's error: retry only transient errors, with "
                       "back-off, and report the failure instead of going on as if the call had worked.",
    "rule.exit_code": "Find why the command exits non-zero and handle that exit code before going on.",
    "rule.repeated_tool_call": "Do not repeat a call with identical arguments: after an error or an unchanged "
                               "result, back off, change the arguments or give up and say so.",
    "rule.loop": "Break the loop: cap the iterations and change course when a step repeats without progress.",
    "rule.empty_output": "Make the step produce an output, or fail it explicitly when it has nothing to say.",
    "rule.truncated_output": "Raise the output limit of that call or ask for a shorter answer, so that it is not "
                             "cut off.",
    "rule.latency_outlier": "Find what makes that step slow in these traces (a retry, a large input, a slow "
                            "dependency) and bound it.",
    "rule.token_outlier": "Find what inflates that step's tokens in these traces (a growing context, a repeated "
                          "document) and trim its input.",
}


def _names(value) -> str:
    items = value if isinstance(value, list) else [value]
    return " or ".join(str(v) for v in items if v)


def rubric_demand(rubric: Rubric) -> str:
    """What the rubric requires, from its configuration."""
    config, kind = rubric.config or {}, rubric.kind
    if kind == Rubric.Kind.REGEX:
        where = config.get("field") or "output"
        if config.get("expect") == "absent":
            return f"its {where} must never match /{config.get('pattern', '')}/"
        return f"its {where} must match /{config.get('pattern', '')}/"
    if kind == Rubric.Kind.JSONPATH:
        value = config.get("value", config.get("pattern", ""))
        return f"{config.get('path', '')} must satisfy {config.get('assert', 'exists')} {value}".rstrip()
    if kind == Rubric.Kind.TOOL_NEVER:
        return f"{_names(config.get('tool'))} must never be called"
    if kind == Rubric.Kind.TOOL_ORDER:
        then = f" before {_names(config.get('then'))}" if config.get("then") else ""
        return f"{_names(config.get('first'))} must be called{then}"
    if kind == Rubric.Kind.COVERAGE:
        return f"every {_names(config.get('path'))} a tool returns must reach the target's output"
    return rubric.description or rubric.name


def _where(span: Span | None, span_id: str, trace_id: str) -> str:
    name = f"{span.name}" + (f" at node {span.node}" if span and span.node else "") if span else f"span {span_id}"
    return f"{name} (trace {trace_id}, span {span_id})"


def _names_pattern(insight: Insight, statement: str) -> bool:
    """Whether a statement is the one the insight's title names (an offline title is its medoid's issue title,
    generalised and maybe cut)."""
    head = insight.title.split("\u2026", 1)[0].strip()
    return bool(head) and head in title_generalize(statement)


def _judge_pick(insight: Insight, rows: list, feedback: dict) -> str:
    """The judge whose finding the fix is drawn from: the one whose statement the title names, then one whose
    demand is known (a rubric, a rule with a remedy), then the one cited most."""
    judges = Counter(feedback[e.feedback_id].judge for e in rows)
    named = {feedback[e.feedback_id].judge for e in rows if _names_pattern(insight, e.statement_text)}

    def rank(judge: str) -> tuple:
        row = next(feedback[e.feedback_id] for e in rows if feedback[e.feedback_id].judge == judge)
        return judge in named, row.rubric is not None or judge in RULE_REMEDIES, judges[judge]

    return max(judges, key=rank)


def _span_pick(insight: Insight, rows: list, feedback: dict) -> tuple[object, Span | None, str]:
    """(evidence row, span, span id) to point at: a span at the insight's node, the step the judge judged or the
    cited one (a coverage rubric cites the tool that returned a value and judges the step that dropped it), else the
    first citation; in a failing trace when one is cited (a span in a run that succeeded shows the pattern, not
    what made a run fail)."""
    def pairs_of(some: list) -> list:  # the judged step (a tool call's decider) first, then what it cites
        return [(e, feedback[e.feedback_id].target_span_id) for e in some
                if feedback[e.feedback_id].target_span_id] + [(e, e.span_id) for e in some]

    rows = sorted(rows, key=lambda e: e.trace.outcome != "failure")  # stable: the evidence order otherwise
    failing = [e for e in rows if e.trace.outcome == "failure"]
    pairs = pairs_of(failing) + pairs_of(rows[len(failing):])
    spans = {(s.trace_id, s.span_id): s for s in Span.objects.filter(
        trace_id__in={e.trace_id for e in rows}, span_id__in={span_id for _, span_id in pairs},
        trace_day__in={e.trace.first_received_day for e in rows})}  # the evidence's traces are loaded with it
    node = insight.node if insight.level == Insight.Level.NODE else ""
    for e, span_id in pairs:
        span = spans.get((e.trace_id, span_id))
        if node and span is not None and span.node == node:
            return e, span, span_id
    first = rows[0]
    return first, spans.get((first.trace_id, first.span_id)), first.span_id


def suggested_fix(*, insight: Insight, evidence: list) -> dict:
    """The fix for `insight`; evidence: its InsightEvidence rows, newest run first (body.content_collect)."""
    if insight.naming_source == "llm" and insight.recommendation:
        return {"text": insight.recommendation, "source": "llm", "trace_id": "", "span_id": ""}
    feedback = Feedback.objects.select_related("rubric").in_bulk({e.feedback_id for e in evidence})
    cited = [e for e in evidence if e.feedback_id in feedback]
    if not cited:
        return {"text": insight.recommendation, "source": "", "trace_id": "", "span_id": ""}
    judge = _judge_pick(insight, cited, feedback)
    rows = [e for e in cited if feedback[e.feedback_id].judge == judge]
    first, span, span_id = _span_pick(insight, rows, feedback)
    row = feedback[first.feedback_id]
    trace_id = first.trace.trace_id
    where = _where(span, span_id, trace_id)
    share = f"{len(rows)} of the {len(evidence)} citations"
    decision = _decision(first, rows, span_id)
    if row.rubric is not None:
        text = (f"The rubric \u201c{row.rubric.name}\u201d fails ({share}), first on {where}: "
                f"{rubric_demand(row.rubric)}. {decision}")
        source = "rubric"
    elif judge in RULE_REMEDIES:
        text = (f"The rule {judge} fires ({share}), first on {where}: \u201c{first.statement_text}\u201d. "
                f"{decision} {RULE_REMEDIES[judge]}")
        source = "rule"
    else:
        text = (f"The judge {judge} fails the step ({share}), first on {where}: \u201c{first.statement_text}\u201d. "
                f"{decision}")
        source = "judge"
    # `decision` is the part copied out of the trace's spans: it goes when the trace expires (evidence_expiry.py)
    return {"text": " ".join(text.split()), "source": source, "trace_id": trace_id, "span_id": span_id,
            "decision": " ".join(decision.split())}


def _decision(first, rows: list, span_id: str) -> str:
    """What the step `span_id` of the first citation's trace decided and what to change there (decision.py)."""
    from diagnosis.services.trace_view import trace_view_build

    cited = [(e.span_id, e.quote or "") for e in rows if e.trace_id == first.trace_id]
    facts = decision_facts(trace=trace_view_build(trace=first.trace), span_id=span_id, evidence=cited)
    return facts.advice if facts is not None else "Look at the decision that step makes there."
