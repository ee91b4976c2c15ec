"""Within-task features for the contrastive judge (issue 28, item 5): a run compared with the succeeding runs of its
own task.

Eval suites run each task several times (`clear.task.id`, `Trace.task_id`). Across tasks, "`book_reservation` is
not called" says nothing (most tasks need no booking); within a task whose other runs succeeded by calling it, its
absence is the mistake. For each run of a task that has at least one other succeeding run, against those other
succeeding runs (leave one out, so a succeeding run is held to the same test as a failing one and the feature stays
a fact about the run, not about its outcome):

* `task_missing`: a tool every other succeeding run of the task calls is not called;
* `task_arg`: a tool is called with a short argument whose values differ from every value the other succeeding runs
  pass it (the argument that differs);
* `task_extra`: a tool none of the other succeeding runs calls is called (the extra call).

Arguments are compared whole: a scalar as its text, a list or object in a canonical form (keys sorted, list items
sorted), so `flights` or `payment_methods` passed differently count as a different argument.

Each comes per tool (and argument name) and in general ("a tool the task's succeeding runs call is not called"),
the general one naming the tool of each trace in its note: each task needs its own actions, so the same mistake
(forgetting the write the task needs) recurs over tasks with different tools, and only the general feature reaches
the support a test needs. The general features come twice: over every tool, and over write tools only (a tool whose
name starts with a verb in CLEAR_WRITE_TOOL_VERBS: `cancel_reservation`, `createIssue`), since a missing or extra
lookup is mostly harmless while a missing or extra write is the outcome itself.

The judge then tests them like every other feature (Fisher over all runs with an outcome, Benjamini–Hochberg with
the rest), so a mistake has to recur over tasks to be reported. Features key on the tool (and argument name), never on
a task's values, so one finding gathers the same mistake across tasks. Nothing here reads labels or knows an agent.

Across tasks, `unpreceded`: a tool is called with no call to another tool before it, where that other tool precedes
it in a run of the same task that succeeded (or, for runs with no task id, nowhere) — "`update_reservation` is
called without `get_reservation_details` before it".

A write called straight after a tool result, with no user message since, is no contrastive feature any more: the
rule judge `rule.unconfirmed_write` (judges/rules/writes.py) finds it in one run alone, blames the step that issued
the write and leaves retries after a refusal to `rule.refused_write_retried`. As a feature too it found the same
traces (on tau-airline with every run, the rule's 38 traces all among the feature's 47), and the two were two rows
of the open list for one problem.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict

from diagnosis import conf
from diagnosis.judges.contract import SpanView, TraceView
from diagnosis.judges.text import maybe_json

_KEY = "{kind}|{node}|{tool}"
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_SCALAR_MAX = 60  # longer text is prose (a reason, a message), which differs between good runs too
_STRUCTURED_MAX = 600  # a list or object this long at most is compared whole


def is_write_tool(name: str, verbs: frozenset[str]) -> bool:
    """`cancel_reservation`, `createIssue`, `github.create_issue`: the first word of the name's last part is a verb
    that changes state."""
    words = _WORD.findall(re.split(r"[./:]", name)[-1])
    return bool(words) and words[0].lower() in verbs


def _calls(trace: TraceView) -> dict[str, list[SpanView]]:
    calls: dict[str, list[SpanView]] = defaultdict(list)
    for span in sorted(trace.spans, key=lambda s: s.start_time):
        if span.kind == "TOOL":
            calls[span.tool_name or span.name].append(span)
    return calls


def _canonical(value) -> str:
    if isinstance(value, list):
        return "[" + ",".join(sorted(_canonical(item) for item in value)) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{_canonical(v)}" for k, v in sorted(value.items())) + "}"
    return json.dumps(value)


def _arg_values(span: SpanView) -> dict[str, tuple[str, bool]]:
    """argument name -> (its value in comparable form, whether it is a list or object)."""
    arguments = maybe_json(span.input)
    if not isinstance(arguments, dict):
        return {}
    values: dict[str, tuple[str, bool]] = {}
    for key, value in arguments.items():
        if isinstance(value, (str, int, float, bool)) and len(str(value)) <= _SCALAR_MAX:
            values[str(key)] = (str(value), False)
        elif isinstance(value, (list, dict)) and value:
            text = _canonical(value)
            if len(text) <= _STRUCTURED_MAX:
                values[str(key)] = (text, True)
    return values


def _anchor(trace: TraceView) -> SpanView | None:
    """Where an absent call is cited: the root span (the run as a whole)."""
    spans = sorted(trace.spans, key=lambda s: s.start_time)
    return next((s for s in spans if not s.parent_span_id), spans[0] if spans else None)


def task_features(traces: list[TraceView], features: dict[str, dict], collector) -> None:
    """Adds the within-task features to `features` (trace id -> key -> Hit) in place; `collector(trace)` gives the
    contrastive_features collector whose `add` records a hit."""
    by_task: dict[str, list[TraceView]] = defaultdict(list)
    for trace in traces:
        if trace.task_id:
            by_task[trace.task_id].append(trace)
    calls = {t.trace_id: _calls(t) for t in traces}
    verbs = conf.write_tool_verbs()
    for runs in by_task.values():
        succeeded = [t for t in runs if t.outcome == "success"]
        for trace in runs:
            others = [s for s in succeeded if s.trace_id != trace.trace_id]
            if not others:
                continue
            c = collector(trace, features[trace.trace_id])
            mine = calls[trace.trace_id]
            always = set.intersection(*(set(calls[o.trace_id]) for o in others))
            anchor = _anchor(trace)
            for tool in sorted(always - set(mine)):
                node = calls[others[0].trace_id][tool][0].node
                if anchor is not None:
                    c.add(_KEY.format(kind="task_missing", node=node, tool=tool), kind="task_missing", node=node,
                          span=anchor, quote="", phrase=f"`{tool}` is not called where the task's succeeding runs "
                                                        "call it")
                    c.add(f"task_missing|{node}", kind="task_missing", node=node, span=anchor, quote="",
                          note=f"`{tool}` is not called",
                          phrase="a tool the task's succeeding runs call is not called")
                    if is_write_tool(tool, verbs):
                        c.add(f"task_missing|{node}|write", kind="task_missing", node=node, span=anchor, quote="",
                              note=f"`{tool}` is not called",
                              phrase="a write tool (one that changes state) the task's succeeding runs call is not "
                                     "called")
            seen_anywhere = set().union(*(set(calls[o.trace_id]) for o in others))
            for tool, spans in mine.items():
                node = spans[0].node
                if tool not in seen_anywhere:
                    c.add(_KEY.format(kind="task_extra", node=node, tool=tool), kind="task_extra", node=node,
                          span=spans[0], quote=c.quote(spans[0], tool),
                          phrase=f"`{tool}` is called where the task's succeeding runs do not call it")
                    c.add(f"task_extra|{node}", kind="task_extra", node=node, span=spans[0],
                          quote=c.quote(spans[0], tool), note=f"`{tool}` is called",
                          phrase="a tool the task's succeeding runs do not call is called")
                    if is_write_tool(tool, verbs):
                        c.add(f"task_extra|{node}|write", kind="task_extra", node=node, span=spans[0],
                              quote=c.quote(spans[0], tool), note=f"`{tool}` is called",
                              phrase="a write tool (one that changes state) the task's succeeding runs do not call "
                                     "is called")
                    continue
                expected: dict[str, set[str]] = defaultdict(set)
                for other in others:
                    for span in calls[other.trace_id].get(tool, []):
                        for key, (value, _) in _arg_values(span).items():
                            expected[key].add(value)
                given: dict[str, set[str]] = defaultdict(set)
                first: dict[str, tuple[SpanView, str, bool]] = {}
                for span in spans:
                    for key, (value, structured) in _arg_values(span).items():
                        given[key].add(value)
                        first.setdefault(key, (span, value, structured))
                for key in sorted(set(given) & set(expected)):
                    if given[key].isdisjoint(expected[key]):
                        span, value, structured = first[key]
                        if structured:
                            quote, note = c.quote(span, f'"{key}"', key), f"`{tool}` with another `{key}`"
                        else:
                            quote = c.quote(span, f'"{key}": "{value}"', f'"{key}":"{value}"', value)
                            note = f"`{tool}` with `{key}: {value}`"
                        c.add(f"task_arg|{node}|{tool}|{key}", kind="task_arg", node=node, span=span, quote=quote,
                              phrase=f"`{tool}` is called with another `{key}` than the task's succeeding runs pass")
                        c.add(f"task_arg|{node}", kind="task_arg", node=node, span=span, quote=quote, note=note,
                              phrase="a tool is called with another argument than the task's succeeding runs pass")
                        if is_write_tool(tool, verbs):
                            c.add(f"task_arg|{node}|write", kind="task_arg", node=node, span=span, quote=quote,
                                  note=note, phrase="a write tool (one that changes state) is called with another "
                                                    "argument than the task's succeeding runs pass")


def unpreceded_features(traces: list[TraceView], features: dict[str, dict], collector) -> None:
    """`unpreceded|A|B`: B is called with no A before it, where A comes before B in a succeeding run (of the same task
    when the run has one). The pairs are taken from succeeding runs, the feature tested on every run."""
    calls = {t.trace_id: _calls(t) for t in traces}

    def pairs(trace: TraceView) -> set[tuple[str, str]]:
        firsts = {tool: spans[0].start_time for tool, spans in calls[trace.trace_id].items()}
        return {(a, b) for a, ta in firsts.items() for b, tb in firsts.items() if a != b and ta < tb}

    # Counted per succeeding run, so that a succeeding run is held to the pairs of the others only (leave one out).
    own = {t.trace_id: pairs(t) for t in traces if t.outcome == "success"}
    by_task: dict[str, Counter] = defaultdict(Counter)
    anywhere: Counter = Counter()
    for trace in traces:
        if trace.trace_id in own:
            anywhere.update(own[trace.trace_id])
            if trace.task_id:
                by_task[trace.task_id].update(own[trace.trace_id])
    for trace in traces:
        counts = by_task.get(trace.task_id, Counter()) if trace.task_id else anywhere
        mine_pairs = own.get(trace.trace_id, set())
        expected = {pair for pair, n in counts.items() if n - (pair in mine_pairs) > 0}
        mine = calls[trace.trace_id]
        c = None
        for a, b in sorted(expected):
            if b not in mine:
                continue
            first_b = mine[b][0]
            if any(s.start_time < first_b.start_time for s in mine.get(a, [])):
                continue
            c = c or collector(trace, features[trace.trace_id])
            c.add(f"unpreceded|{a}|{b}", kind="unpreceded", node=first_b.node, span=first_b,
                  quote=c.quote(first_b, b), phrase=f"`{b}` is called without `{a}` before it")
