"""What the model wrote and what Clear showed of it, per text kind (issue 43): shown, asked again, replaced (or
recorded as invalid), with examples; and the benchmark's own count of what must be zero — statements that echo a
judge prompt, and shown titles or root causes naming an entity absent from their evidence.

Kinds: step verdicts (`llm.step`), trace verdicts (`llm.trace`), root causes (the trace verdict's), insight names.
"Asked again" is a reply that needed the repair round (details["repaired"], or one still refused after it);
"replaced" is a text that failed the checks after the repair and was dropped or replaced by the computed one
(details["text_source"] == "computed", Insight.naming_note), or a reply recorded as `invalid_output:echo` /
`invalid_output:refusal` / `invalid_output:inconsistent`.
"""

from __future__ import annotations

from collections import Counter

EXAMPLES = 3
REFUSED_CAUSES = ("invalid_output:echo", "invalid_output:refusal", "invalid_output:inconsistent")


def text_report(*, run, project) -> dict:
    from diagnosis.models import Feedback

    report: dict = {}
    for kind, judge in (("step verdicts", "llm.step"), ("trace verdicts", "llm.trace")):
        rows = Feedback.objects.filter(run=run, judge=judge).values("status", "details", "critique", "error")
        counts, examples = Counter(), []
        for row in rows:
            details = row["details"] or {}
            cause = details.get("cause", "")
            if row["status"] in ("ok", "truncated"):
                counts["shown"] += 1
                if details.get("repaired") or details.get("text_source") == "computed":
                    counts["asked again"] += 1
                if details.get("text_source") == "computed":
                    counts["replaced"] += 1
                    if len(examples) < EXAMPLES:
                        examples.append((details.get("ungrounded") or [""])[0][:200])
            elif cause in REFUSED_CAUSES:
                counts["asked again"] += 1
                counts[cause] += 1
                if len(examples) < EXAMPLES:
                    examples.append(row["error"][:200])
        report[kind] = {**counts, "examples": examples}
    causes = Counter()
    for row in Feedback.objects.filter(run=run, judge="llm.trace", status__in=("ok", "truncated")).values("details"):
        cause = (row["details"] or {}).get("root_cause") or {}
        if cause:
            causes["shown"] += 1
            causes["replaced" if cause.get("text_source") == "computed" else "model"] += 1
    report["root causes"] = dict(causes)
    report["insight names"] = _names(project=project)
    report["zero_expected"] = _must_be_zero(run=run, project=project)
    return report


def _names(*, project) -> dict:
    from diagnosis.models import Insight

    insights = Insight.objects.filter(project=project, is_other=False)
    replaced = [i for i in insights if i.naming_note]
    return {"shown": insights.count(), "model": sum(i.naming_source == "llm" for i in insights),
            "replaced": len(replaced),
            "examples": [{"title": i.title, "reason": i.naming_note[:200]} for i in replaced[:EXAMPLES]]}


def _must_be_zero(*, run, project) -> dict:
    """The benchmark's own checks of what was shown: statements echoing a judge prompt; model titles (insight names
    and the judges' issue titles) and root causes naming an entity absent from their evidence (the statements of the
    insight; the trace's spans: names, nodes, tools, input, output, status messages), longer than the title limit or
    naming no failure;
    root causes quoting a value their cited span does not hold; the judges' critiques and issue details naming an
    absent entity. Independent of the judges' own records: recomputed from what is stored and shown."""
    from diagnosis.insights.statements import statements_collect
    from clear.text_echo import echo_of
    from clear.text_grounding import TITLE_MAX_CHARS, grounding_evidence, names_failure, names_in
    from diagnosis.judges.llm.reply_checks import judge_reference
    from diagnosis.models import Feedback, Insight, InsightStatement

    references = [judge_reference(judge) for judge in ("llm.step", "llm.trace", "llm.trace_window")]
    echoes = [d.text for d in statements_collect(run=run)
              if any(echo_of(text=d.text, reference=reference) for reference in references)]
    absent_titles, long_titles, no_failure_titles = [], [], []
    for insight in Insight.objects.filter(project=project, is_other=False, naming_source="llm"):
        texts = list(InsightStatement.objects.filter(node_insight=insight).values_list("text", flat=True)[:200]) + \
            list(InsightStatement.objects.filter(system_insight=insight).values_list("text", flat=True)[:200])
        evidence = grounding_evidence(texts=[*texts, insight.node, *map(str, insight.affected_nodes or {})])
        missing = [name for name in names_in(insight.title) if not evidence.holds(name)]
        if missing:
            absent_titles.append({"title": insight.title, "absent": missing})
        if len(insight.title) > TITLE_MAX_CHARS:
            long_titles.append(insight.title)
        if not names_failure(insight.title, evidence=evidence):
            no_failure_titles.append(insight.title)
    absent_causes, unquoted_causes, absent_texts = [], [], []
    for row in Feedback.objects.filter(run=run, judge__in=("llm.step", "llm.trace"),
                                       status__in=("ok", "truncated")).values("trace_id", "judge", "details",
                                                                              "critique", "issues"):
        trace, spans = _trace_texts(trace_id=row["trace_id"])
        for issue in row["issues"] or []:
            title = str(issue.get("title", ""))
            missing = [name for name in names_in(title) if not trace.holds(name)]
            if missing:
                absent_titles.append({"title": title[:200], "absent": missing, "judge": row["judge"]})
            if len(title) > TITLE_MAX_CHARS:
                long_titles.append(title[:200])
            if not names_failure(title, evidence=trace):
                no_failure_titles.append(title[:200])
        for text in [row["critique"], *(str(i.get("detail", "")) for i in row["issues"] or [])]:
            missing = [name for name in names_in(str(text or "")) if not trace.holds(name)]
            if missing:
                absent_texts.append({"text": str(text)[:200], "absent": missing, "judge": row["judge"]})
        cause = (row["details"] or {}).get("root_cause") or {}
        if row["judge"] != "llm.trace" or not cause or cause.get("text_source") == "computed":
            continue
        reason = str(cause.get("reason", ""))
        missing = [name for name in names_in(reason) if not trace.holds(name)]
        if missing:
            absent_causes.append({"reason": reason[:200], "absent": missing})
        cited = spans.get(str(cause.get("span_id")))
        unfound = [q for q in quotes_in(reason) if cited is None or not cited.holds(q)]
        if unfound:
            unquoted_causes.append({"reason": reason[:200], "quotes": unfound})
    return {"echo_statements": len(echoes), "echo_examples": echoes[:EXAMPLES],
            "titles_naming_absent_entities": len(absent_titles), "title_examples": absent_titles[:EXAMPLES],
            "titles_over_limit": len(long_titles), "long_title_examples": long_titles[:EXAMPLES],
            "titles_naming_no_failure": len(no_failure_titles),
            "no_failure_title_examples": no_failure_titles[:EXAMPLES],
            "root_causes_naming_absent_entities": len(absent_causes), "root_cause_examples": absent_causes[:EXAMPLES],
            "root_causes_quoting_absent_values": len(unquoted_causes),
            "unquoted_root_cause_examples": unquoted_causes[:EXAMPLES],
            "verdict_texts_naming_absent_entities": len(absent_texts), "verdict_text_examples": absent_texts[:EXAMPLES]}


def _trace_texts(*, trace_id):
    """(the trace's evidence, each span's evidence by span id): the spans' names, nodes, tools, input, output and
    status messages, as stored."""
    from clear.text_grounding import grounding_evidence
    from traces.models import Span

    rows = Span.objects.filter(trace_id=trace_id).values_list("span_id", "name", "node", "tool_name", "input",
                                                              "output", "status_message")
    texts = {span_id: " ".join(str(v) for v in values if v) for span_id, *values in rows}
    return (grounding_evidence(texts=list(texts.values())),
            {span_id: grounding_evidence(texts=[text]) for span_id, text in texts.items()})


def quotes_in(text: str) -> list[str]:
    from clear.text_grounding import quotes_in as quoted

    return quoted(text)


def text_lines(report: dict) -> list[str]:
    lines = []
    for kind in ("step verdicts", "trace verdicts", "root causes", "insight names"):
        figures = {k: v for k, v in (report.get(kind) or {}).items() if k != "examples"}
        lines.append(f"  {kind}: " + (", ".join(f"{k} {v}" for k, v in figures.items()) or "none"))
        for example in (report.get(kind) or {}).get("examples") or []:
            lines.append(f"    e.g. {example}")
    zero = report.get("zero_expected") or {}
    lines.append(f"  echo statements: {zero.get('echo_statements', '?')}; model titles naming absent entities: "
                 f"{zero.get('titles_naming_absent_entities', '?')}; model titles over the limit: "
                 f"{zero.get('titles_over_limit', '?')}; naming no failure: "
                 f"{zero.get('titles_naming_no_failure', '?')}; model root causes naming absent entities: "
                 f"{zero.get('root_causes_naming_absent_entities', '?')}; quoting absent values: "
                 f"{zero.get('root_causes_quoting_absent_values', '?')}; critiques and details naming absent "
                 f"entities: {zero.get('verdict_texts_naming_absent_entities', '?')} (each should be 0)")
    for key in ("echo_examples", "title_examples", "long_title_examples", "no_failure_title_examples",
                "root_cause_examples",
                "unquoted_root_cause_examples", "verdict_text_examples"):
        for example in zero.get(key) or []:
            lines.append(f"    {key[:-9]}: {example}")
    return lines
