"""An insight's root cause and recommendation without a model: computed facts only.

Restating the statements ("fix the behaviour that makes judges report …") or listing their distinctive terms reads
as an analysis nobody made, and naming a place ("it first appears at node X") says where it broke, not who decided.
What the traces do show: the decision one of its statements blames (in a failing trace when there is one, the
earliest cited step of that trace): what the deciding step did and what it had in front of it, from the spans
(judges/decision.py `decision_facts`: "billing_worker (chat …) called `invoice_lookup` 5 times with `{…}`; the tool
replied `{"error": "rate_limited", …}`. It had in front of it the same call's earlier reply `rate_limited`."); the
earliest step its statements cite per trace; its share of the failing and of the succeeding traces. The root cause
states them, the recommendation what to change in that decision (and what a rubric it violates requires); a
sentence whose facts are missing is left out.

By-design behaviour (`insight_by_design`): an output property (an empty or a cut-off output) that a step shows on
every call in the judged traces, in succeeding and failing runs alike, is what the step does (a "think" scratchpad
returns nothing), not a fault. So is a tool whose calls, at least 20 of them, return one same empty or constant output
95% of the time, whether or not the project has succeeding runs (a project of failed runs has a "think" tool too). A
lift above 1 then says only that failing runs take that step more often. Errors are never by design: a tool that
errors on every call is broken, and a call in error never counts towards a constant output.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from diagnosis.clustering.stats import TraceInfo
from diagnosis.insights.statements import Draft
from traces.models import Span
from traces.selectors import trace_days_for

MAX_TRACES = 50  # traces whose spans are read for the first appearance and the next step
OUTPUT_PROPERTY_JUDGES = frozenset({"rule.empty_output", "rule.truncated_output"})
_TRACE_CHUNK = 500  # judged traces per query when looking for a call of a step without the property
# A tool that returns one same output on 95% of at least 20 calls does so by design, succeeding runs or not (issue 41):
# fewer calls are too few to tell a design from a fault that hit every call so far.
BY_DESIGN_MIN_CALLS = 20
BY_DESIGN_CONSTANT_SHARE = 0.95


@dataclass(frozen=True, slots=True)
class OfflineText:
    root_cause: str
    recommendation: str


@dataclass(frozen=True, slots=True)
class _Step:
    node: str
    name: str
    failed: bool

    def label(self) -> str:
        return f"{self.node} ({self.name})" if self.node else self.name


def _cited(rows: list[int], drafts: list[Draft]) -> dict[int, set[str]]:
    """Trace pk -> the spans the statements cite in it."""
    cited: dict[int, set[str]] = {}
    for r in rows:
        if drafts[r].span_id:
            cited.setdefault(drafts[r].trace_pk, set()).add(drafts[r].span_id)
    return cited


def _step(span: dict) -> _Step:
    return _Step(span["node"], span["name"], span["status"] == "error")


def _steps(cited: dict[int, set[str]], *, project_id: int) -> tuple[Counter, Counter]:
    """(first-appearance steps, next steps), counted once per trace (None: nothing came next). The first appearance
    is the earliest cited span that holds no other cited span: an agent's span that failed because a call inside it
    failed started first, but the call is where the pattern shows."""
    pks = sorted(cited)[:MAX_TRACES]
    spans: dict[int, list[dict]] = {}
    days = trace_days_for(project=project_id, trace_pks=pks)  # only their days' span partitions
    for row in Span.objects.filter(trace_id__in=pks, trace_day__in=days).values(
            "trace_id", "span_id", "parent_span_id", "name", "node", "start_time", "end_time", "status"):
        spans.setdefault(row["trace_id"], []).append(row)
    at, after = Counter(), Counter()
    for pk in pks:
        by_id = {s["span_id"]: s for s in spans.get(pk, [])}
        children: dict[str, list[str]] = {}
        for s in by_id.values():
            children.setdefault(s["parent_span_id"], []).append(s["span_id"])
        found = [by_id[span_id] for span_id in cited[pk] if span_id in by_id]
        leaves = [s for s in found if not (_subtree(s["span_id"], children) - {s["span_id"]}) & cited[pk]]
        if not leaves:
            continue
        first = min(leaves, key=lambda s: (s["start_time"], s["span_id"]))
        at[_step(first)] += 1
        inside, outer = _subtree(first["span_id"], children), _ancestors(first, by_id)
        ended = first["end_time"] or first["start_time"]
        later = sorted((s for s in by_id.values() if s["span_id"] not in inside and s["span_id"] not in outer
                        and s["start_time"] >= ended), key=lambda s: (s["start_time"], s["span_id"]))
        after[_step(later[0]) if later else None] += 1
    return at, after


def _subtree(span_id: str, children: dict[str, list[str]]) -> set[str]:
    found, todo = {span_id}, [span_id]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _ancestors(span: dict, by_id: dict[str, dict]) -> set[str]:
    found, parent = set(), span["parent_span_id"]
    while parent in by_id and parent not in found:
        found.add(parent)
        parent = by_id[parent]["parent_span_id"]
    return found


def _share(rows: list[int], drafts: list[Draft], traces: Mapping[str, TraceInfo]) -> str:
    hit = {str(drafts[r].trace_pk) for r in rows} & set(traces)
    failing = {t for t, info in traces.items() if info.failed is True}
    succeeding = {t for t, info in traces.items() if info.failed is False}
    if not failing and not succeeding:
        return f"It is in {len(hit)} of the {len(traces)} judged traces, none of which has a known outcome."
    unknown = len(hit - failing - succeeding)
    return (f"It is in {len(hit & failing)} of the {len(failing)} failing traces and {len(hit & succeeding)} of "
            f"the {len(succeeding)} succeeding ones" + (f" ({unknown} more of unknown outcome)." if unknown else "."))


def _decision(rows: list[int], drafts: list[Draft], traces: Mapping[str, TraceInfo]):
    """The decision to describe (module docstring) as `DecisionFacts`, with its draft; (None, None) without one."""
    from diagnosis.judges.decision import decision_facts
    from diagnosis.services.trace_view import trace_view_build
    from traces.models import Trace

    cited = [r for r in rows if drafts[r].span_id]
    if not cited:
        return None, None

    def rank(r: int) -> tuple:
        info = traces.get(str(drafts[r].trace_pk))
        return info is None or info.failed is not True, drafts[r].trace_pk, drafts[r].started or 0.0, r

    draft = drafts[min(cited, key=rank)]
    trace = Trace.objects.filter(pk=draft.trace_pk).first()
    if trace is None:
        return None, draft
    same = [drafts[r] for r in cited if (drafts[r].trace_pk, drafts[r].span_id) == (draft.trace_pk, draft.span_id)]
    evidence = [(e["span_id"], e["quote"]) for d in same for e in d.evidence]
    draft = next((d for d in same if d.judge.startswith("rubric.")), draft)  # what a violated rubric requires
    return decision_facts(trace=trace_view_build(trace=trace), span_id=draft.span_id, evidence=evidence), draft


def _rubric_requires(judge: str) -> str:
    """What a rubric finding's rubric requires, as a sentence; "" for other judges."""
    from diagnosis.models import Rubric
    from diagnosis.tickets.fix import rubric_demand

    rubric_id = judge.removeprefix("rubric.")
    rubric = Rubric.objects.filter(pk=int(rubric_id)).first() if judge.startswith("rubric.") and \
        rubric_id.isdigit() else None
    return f" The rubric \u201c{rubric.name}\u201d requires: {rubric_demand(rubric)}." if rubric else ""


def insight_offline_text(*, project_id: int, rows: list[int], drafts: list[Draft],
                         traces: Mapping[str, TraceInfo]) -> OfflineText:
    """The root cause and recommendation of an insight named without a model, from its statements `rows`."""
    at, _ = _steps(_cited(rows, drafts), project_id=project_id)
    share = _share(rows, drafts, traces)
    facts, draft = _decision(rows, drafts, traces)
    said = [facts.sentence()] if facts is not None else []
    if at:
        (step, n), looked = at.most_common(1)[0], sum(at.values())
        said.append(f"The earliest step its statements cite is {step.label()}, in {n} of {looked} traces.")
    if facts is not None:
        recommendation = facts.advice + _rubric_requires(draft.judge)
    elif at:
        recommendation = f"Look at the decision {at.most_common(1)[0][0].label()} makes there."
    else:
        recommendation = ""
    return OfflineText(root_cause=" ".join([*said, share]), recommendation=recommendation)


def _output_key(output) -> str:
    """What two calls' outputs must share to be "the same output": empty ones (None, "", [], {}) are one."""
    from diagnosis.judges.text import dump, has_content, maybe_json

    value = maybe_json(output)
    if value in (None, "", [], {}) or not has_content(value):
        return ""
    return " ".join((dump(value) if isinstance(value, (dict, list)) else str(value)).split())


def _constant_output(calls, chunks: list[list[int]], days_of) -> bool:
    """Whether a tool's calls in the judged traces — at least BY_DESIGN_MIN_CALLS, of which BY_DESIGN_CONSTANT_SHARE —
    returned one same output (empty or not), with no error: a call in error or carrying an error payload never
    counts towards it (errors are never by design)."""
    from diagnosis.judges.text import error_payload

    total = sum(calls.filter(trace_id__in=chunk, trace_day__in=days_of(index)).count()
                for index, chunk in enumerate(chunks))
    if total < BY_DESIGN_MIN_CALLS:
        return False
    needed = BY_DESIGN_CONSTANT_SHARE * total
    counts: Counter = Counter()
    seen = top = 0
    for index, chunk in enumerate(chunks):
        found = calls.filter(trace_id__in=chunk, trace_day__in=days_of(index)).values_list("status", "output")
        for status, output in found.iterator():
            seen += 1
            if status != "error" and error_payload(output) is None:
                key = _output_key(output)
                counts[key] += 1
                top = max(top, counts[key])
            if top + (total - seen) < needed:
                return False  # no output can reach the share any more: stop reading a large tool's outputs
    return top >= needed


def insight_by_design(*, project_id: int, rows: list[int], drafts: list[Draft],
                      traces: Mapping[str, TraceInfo]) -> bool:
    """Whether statements `rows` are by-design behaviour: all of them an output property's (OUTPUT_PROPERTY_JUDGES)
    on a span, and either each tool they cite returned one same output on at least 95% of its at least 20 calls in
    the judged `traces`, whatever their outcomes (`_constant_output`: a project of failed runs only has a "think" tool
    too), or their traces hold succeeding and failing runs (recorded outcomes) and every call of each step they cite
    (same node, kind and tool, else span name) in the judged `traces` is cited by one of them."""
    if not rows or any(drafts[r].judge not in OUTPUT_PROPERTY_JUDGES or not drafts[r].span_id for r in rows):
        return False
    cited = {(drafts[r].trace_pk, drafts[r].span_id) for r in rows}
    pks = sorted({pk for pk, _ in cited})
    steps = set()
    for start in range(0, len(pks), _TRACE_CHUNK):
        chunk = set(pks[start:start + _TRACE_CHUNK])
        steps |= set(Span.objects.filter(trace_id__in=chunk,
                                         trace_day__in=trace_days_for(project=project_id, trace_pks=chunk),
                                         span_id__in={s for pk, s in cited if pk in chunk})
                     .values_list("node", "kind", "tool_name", "name"))
    judged = sorted(int(pk) for pk in traces)
    chunks = [judged[start:start + _TRACE_CHUNK] for start in range(0, len(judged), _TRACE_CHUNK)]
    days: dict[int, list] = {}  # chunk index -> its traces' days (only their span partitions), read once

    def days_of(index: int) -> list:
        if index not in days:
            days[index] = trace_days_for(project=project_id, trace_pks=chunks[index])
        return days[index]

    steps = {(n, k, t, "" if t else name) for n, k, t, name in steps}
    calls = {step: Span.objects.filter(node=step[0], kind=step[1], tool_name=step[2],
                                       **({"name": step[3]} if step[3] else {})) for step in steps}
    if steps and all(step[1] == "TOOL" and _constant_output(calls[step], chunks, days_of) for step in steps):
        return True
    outcomes = {traces[str(drafts[r].trace_pk)].failed for r in rows if str(drafts[r].trace_pk) in traces}
    if not {True, False} <= outcomes:
        return False
    for step in steps:
        for index, chunk in enumerate(chunks):
            found = calls[step].filter(trace_id__in=chunk, trace_day__in=days_of(index)).values_list("trace_id",
                                                                                                    "span_id")
            if any(call not in cited for call in found.iterator()):
                return False
    return True
