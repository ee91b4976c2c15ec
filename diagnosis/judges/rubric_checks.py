"""Deterministic rubric checks: a project's own assertions, evaluated as code over a TraceView.

`rubric_check` takes a rubric whose config rubric_config.py has validated and returns one JudgeResult (judge
"rubric.<id>"): fail with quoted evidence, pass, or skipped when the rubric does not apply to the trace (its
"when" does not match, or nothing to check). A rubric's node scope narrows the spans it looks at (regex, jsonpath,
tool_* calls, the coverage target).
"""

from __future__ import annotations

import re
from typing import Any

from diagnosis.judges.contract import Evidence, JudgeIssue, JudgeResult, SpanView, TraceView
from diagnosis.judges.jsonpath import jsonpath_values
from diagnosis.judges.text import dump, maybe_json, normalise, plain_text, value_text

RUBRICS_VERSION = "rubrics-1"
DETERMINISTIC_KINDS = ("regex", "jsonpath", "tool_order", "tool_never", "coverage")
_QUOTE_MAX = 200
_CODE_MAX = 40  # characters of a value quoted in an issue title


def _matches(span: SpanView, selector: dict) -> bool:
    if "node" in selector and span.node not in selector["node"]:
        return False
    if "kind" in selector and span.kind not in selector["kind"]:
        return False
    if "tool" in selector and span.tool_name not in selector["tool"]:
        return False
    if "name" in selector and span.name not in selector["name"]:
        return False
    return True


def _scoped(selector: dict, node: str) -> dict:
    if node and "node" not in selector:
        return {**selector, "node": [node]}
    return selector


def _root(trace: TraceView) -> SpanView | None:
    ids = {s.span_id for s in trace.spans}
    for span in trace.spans:
        if not span.parent_span_id or span.parent_span_id not in ids:
            return span
    return None


def _field_value(span: SpanView, field: str) -> Any:
    if field == "input":
        return span.input
    if field == "output":
        return span.output
    return [span.input, span.output]


def _clip(text: str) -> str:
    return text.strip()[:_QUOTE_MAX]


def _opening(span: SpanView, field: str = "output") -> str:
    """A verifiable quote of what a span said instead."""
    return _clip(plain_text(_field_value(span, field) if field != "any" else span.output))


def _result(rubric: dict, verdict: str | None, critique: str, issues: list[JudgeIssue] | None = None,
            target: str | None = None, status: str = "ok") -> JudgeResult:
    return JudgeResult(
        judge=f"rubric.{rubric['id']}", target_span_id=target, status=status,
        score=None if verdict is None else (1.0 if verdict == "pass" else 0.0), verdict=verdict, critique=critique,
        issues=issues or [], prompt_version=RUBRICS_VERSION,
        details={"rubric_id": rubric["id"], "rubric": rubric.get("name", ""), "kind": rubric["kind"]},
    )


def _violating(what: str, rubric: dict) -> str:
    """An issue title says what went wrong, where, in plain words, then the rubric it breaks: "`planner` writes
    `intent: refund`, `worker: orders_worker` (violates “Refund requests are routed to billing”)". The rubric's
    name states the expected behaviour, so read alone as a title it would say the opposite of the finding. The name
    is in typographic quotes, which insight titles keep when they drop instance values (title_generalize)."""
    name = " ".join(str(rubric.get("name") or "").split())
    return f"{what} (violates \u201c{name}\u201d)" if name else what


def _code(text: str, limit: int = _CODE_MAX) -> str:
    """A name or value as a Markdown code span (titles render them as code), on one line and short."""
    text = " ".join(str(text).replace("`", "'").split())
    return f"`{text if len(text) <= limit else text[:limit - 1].rstrip() + chr(0x2026)}`"


def _where(span: SpanView) -> str:
    return _code(span.node or span.name)


def _wrote(span: SpanView, field: str) -> str:
    """`planner` writes / receives / shows: what a span did with the checked content."""
    return f"{_where(span)} " + {"output": "writes", "input": "receives"}.get(field, "shows")


def _content(field: str) -> str:
    # Not the span's name: the title says where, and a model's name ("chat gpt-4o") in the statement draws it
    # towards every other statement about that model's steps when statements are clustered.
    return {"output": "Its output", "input": "Its input"}.get(field, "Its input or output")


def _said(match: str, pattern: str) -> str:
    """What a forbidden match says, in plain words: the key/value pairs of JSON it matched (those the pattern names,
    when it names some: `[^}]*` between two keys also matches the fields between them), else the matched text."""
    pairs = re.findall(r'"([\w.-]{1,40})"\s*:\s*(?:"([^"\n]{0,60})"|([\w.+-]{1,40}))', match)
    pairs = [(key, a or b) for key, a, b in pairs]
    named = [(key, value) for key, value in pairs if key in pattern]
    pairs = named or pairs
    if pairs:
        return ", ".join(_code(f"{key}: {value}") for key, value in pairs[:3])
    return _code(match)


def _leaf(path: str) -> str:
    """The field a JSONPath names ("$.articles[*].id" -> "id")."""
    names = re.findall(r"[A-Za-z_][\w-]*", path)
    return names[-1] if names else path


def _not_applicable(rubric: dict, why: str) -> JudgeResult:
    return _result(rubric, None, f"Not applicable: {why}", status="skipped")


def _tool_calls(trace: TraceView, node: str) -> list[SpanView]:
    return [s for s in trace.spans if s.kind == "TOOL" and (not node or s.node == node)]


def _call_quote(span: SpanView) -> str:
    return dump(maybe_json(span.input)) if span.input not in (None, "", {}, []) else ""


def _decided(call: SpanView, trace: TraceView) -> tuple[str, list[Evidence]]:
    """A wrong call's finding targets the step that decided it (judges/decision.py), which it cites too."""
    from diagnosis.judges.decision import call_evidence, deciding_step

    step = deciding_step(call, trace)
    return (step.span_id, call_evidence(call, step)[:1]) if step is not None else (call.span_id, [])


def _check_regex(rubric: dict, trace: TraceView, config: dict, node: str) -> JudgeResult:
    selector = _scoped(config["spans"], node)
    if selector:
        spans = [s for s in trace.spans if _matches(s, selector)]
    else:
        root = _root(trace)
        spans = [root] if root else []
    spans = [s for s in spans if _field_value(s, config["field"]) not in (None, [None, None])]
    if not spans:
        return _not_applicable(rubric, "no span with that content")
    pattern = re.compile(config["pattern"], re.IGNORECASE if config["ignore_case"] else 0)
    hits = []
    for span in spans:
        match = pattern.search(value_text(_field_value(span, config["field"])))
        if match:
            hits.append((span, match.group(0)))
    if config["expect"] == "present":
        if hits:
            return _result(rubric, "pass", f"/{config['pattern']}/ found in {hits[0][0].name}.")
        target = spans[-1]
        what = f"{_wrote(target, config['field'])} no text the rubric requires"
        issue = JudgeIssue(title=_violating(what, rubric),
                           detail=f"No {config['field']} of the checked spans matches /{config['pattern']}/.",
                           severity="medium", evidence=[Evidence(target.span_id, _opening(target, config["field"]))])
        return _result(rubric, "fail", f"/{config['pattern']}/ not found.", [issue], target.span_id)
    if not hits:
        return _result(rubric, "pass", f"/{config['pattern']}/ appears nowhere it is forbidden.")
    issues = [JudgeIssue(title=_violating(f"{_wrote(span, config['field'])} {_said(text, config['pattern'])}",
                                          rubric),
                         detail=f"{_content(config['field'])} matches /{config['pattern']}/.", severity="medium",
                         evidence=[Evidence(span.span_id, _clip(text))]) for span, text in hits]
    return _result(rubric, "fail", f"/{config['pattern']}/ found.", issues, hits[0][0].span_id)


def _check_jsonpath(rubric: dict, trace: TraceView, config: dict, node: str) -> JudgeResult:
    selector = _scoped(config["spans"], node)
    if selector:
        spans = [s for s in trace.spans if _matches(s, selector)]
    else:
        root = _root(trace)
        spans = [root] if root else []
    spans = [s for s in spans if _field_value(s, config["field"]) is not None]
    if not spans:
        return _not_applicable(rubric, "no span with that content")
    failures = []
    for span in spans:
        values = jsonpath_values(config["path"], maybe_json(_field_value(span, config["field"])))
        values = [maybe_json(v) for v in values]
        check = config["assert"]
        if check == "exists":
            bad = [] if values else [None]
        elif check == "absent":
            bad = values
        elif check == "equals":
            bad = [v for v in values if v != config["value"]] if values else [None]
        elif check == "in":
            bad = [v for v in values if v not in config["value"]] if values else [None]
        else:
            bad = [v for v in values if not re.search(config["pattern"], v if isinstance(v, str) else dump(v))]
            bad = bad if values else [None]
        for value in bad:
            quote = _opening(span, config["field"]) if value is None else _clip(
                value if isinstance(value, str) else dump(value))
            wrote = _wrote(span, config["field"])
            failures.append(JudgeIssue(
                title=_violating(f"{wrote} no {_code(config['path'])}" if value is None
                                 else f"{wrote} {_code(config['path'] + ': ' + quote)}", rubric),
                detail=("nothing matched " + config["path"]) if value is None else f"{config['path']} = {quote}",
                severity="medium", evidence=[Evidence(span.span_id, quote)]))
    if not failures:
        return _result(rubric, "pass", f"{config['path']} {config['assert']} holds.")
    return _result(rubric, "fail", f"{config['path']} {config['assert']} failed.", failures,
                   failures[0].evidence[0].span_id)


def _check_tool_order(rubric: dict, trace: TraceView, config: dict, node: str) -> JudgeResult:
    calls = _tool_calls(trace, node)
    first = [s for s in calls if s.tool_name in config["first"]]
    names = " or ".join(config["first"])
    coded = " or ".join(_code(name) for name in config["first"])
    if "then" not in config:
        if first:
            return _result(rubric, "pass", f"{names} is called.")
        evidence = [Evidence(s.span_id, _call_quote(s)) for s in calls[:10]] or (
            [Evidence(_root(trace).span_id, "")] if _root(trace) else [])
        made = ", ".join(dict.fromkeys(s.tool_name for s in calls)) or "no tools"
        who = f"{_code(node)} never calls" if node else "The agent never calls"
        issue = JudgeIssue(title=_violating(f"{who} {coded}", rubric), detail=f"The trace called {made} instead.",
                           severity="high", evidence=evidence)
        return _result(rubric, "fail", f"{names} was required but never called.", [issue])
    then = [s for s in calls if s.tool_name in config["then"]]
    if not then:
        return _not_applicable(rubric, f"{' or '.join(config['then'])} is not called")
    later = then[0]
    if first and first[0].start_time < later.start_time:
        return _result(rubric, "pass", f"{names} is called before {later.tool_name}.")
    issue = JudgeIssue(
        title=_violating(f"{_where(later)} calls {_code(later.tool_name)} before {coded}"
                         if later.node else f"{_code(later.tool_name)} is called before {coded}", rubric),
        detail=f"{names} must come first" + (", but it came later." if first else ", but it is never called."),
        severity="high", evidence=[Evidence(later.span_id, _call_quote(later))]
        + [Evidence(s.span_id, _call_quote(s)) for s in first[:1]])
    target, step = _decided(later, trace)
    issue.evidence = step + issue.evidence
    return _result(rubric, "fail", f"{later.tool_name} before {names}.", [issue], target)


def _check_tool_never(rubric: dict, trace: TraceView, config: dict, node: str) -> JudgeResult:
    calls = [s for s in _tool_calls(trace, node) if s.tool_name in config["tool"]]
    names = " or ".join(config["tool"])
    if not calls:
        return _result(rubric, "pass", f"{names} is never called.")
    what = (f"{_where(calls[0])} calls {_code(calls[0].tool_name)}" if calls[0].node
            else f"{_code(calls[0].tool_name)} is called")
    issue = JudgeIssue(title=_violating(what, rubric),
                       detail=f"{len(calls)} call(s) to {names}.", severity="high",
                       evidence=[Evidence(s.span_id, _call_quote(s)) for s in calls])
    target, step = _decided(calls[0], trace)
    issue.evidence = step + issue.evidence
    return _result(rubric, "fail", f"{names} was called.", [issue], target)


def _check_coverage(rubric: dict, trace: TraceView, config: dict, node: str) -> JudgeResult:
    targets = [s for s in trace.spans if _matches(s, _scoped(config["target"], node)) and s.output is not None]
    if not targets:
        return _not_applicable(rubric, "no target span")
    target = targets[-1]
    target_text = normalise(value_text(target.output))
    sources = [s for s in trace.spans if _matches(s, config["sources"]) and s.start_time <= target.start_time
               and s.span_id != target.span_id and s.output is not None]
    issues, seen, checked = [], set(), 0
    for source in sources:
        document = maybe_json(source.output)
        for path in config["path"]:
            for value in jsonpath_values(path, document):
                if not isinstance(value, str) or len(value.strip()) < config["min_length"]:
                    continue
                value = value.strip()
                checked += 1
                if normalise(value) in target_text or value in seen:
                    continue
                seen.add(value)
                issues.append(JudgeIssue(
                    title=_violating(f"{_where(target)} drops the {_code(_leaf(path))} that "
                                     f"{_code(source.tool_name or source.name)} returned", rubric),
                    detail=f"{source.tool_name or source.name} returned {value} ({path}); the output of "
                           f"{target.name} never mentions it.",
                    severity="high", evidence=[Evidence(source.span_id, value)]))
    if issues:
        return _result(rubric, "fail", f"{len(issues)} value(s) dropped before {target.name}.", issues,
                       target.span_id)
    if not checked:
        return _not_applicable(rubric, "no source values")
    return _result(rubric, "pass", f"All {checked} source value(s) appear in {target.name}.")


_CHECKS = {
    "regex": _check_regex,
    "jsonpath": _check_jsonpath,
    "tool_order": _check_tool_order,
    "tool_never": _check_tool_never,
    "coverage": _check_coverage,
}


def rubric_applies(rubric: dict, trace: TraceView) -> bool:
    when = (rubric.get("config") or {}).get("when") or {}
    if when.get("goal_regex"):
        return re.search(when["goal_regex"], plain_text(trace.goal), re.IGNORECASE) is not None
    return True


def rubric_check(rubric: dict, trace: TraceView) -> JudgeResult:
    """Evaluate one deterministic rubric on a trace."""
    kind = rubric["kind"]
    if kind not in _CHECKS:
        raise ValueError(f"{kind} rubrics are not evaluated as code")
    if not rubric_applies(rubric, trace):
        return _not_applicable(rubric, "the trace's goal does not match when.goal_regex")
    return _CHECKS[kind](rubric, trace, rubric["config"], rubric.get("node") or "")
