"""An insight's root cause and recommendation without a model: computed facts only.

Restating the statements ("fix the behaviour that makes judges report …") or listing their distinctive terms reads
as an analysis nobody made. What the traces do show: where the pattern first appears (the earliest span its
statements cite in each trace), its share of the failing and of the succeeding traces, and what the agent did
next (the first step that started after that span ended, outside it). The root cause states the first two, the
recommendation where to start and what followed; a sentence whose facts are missing is left out.

By-design behaviour (`insight_by_design`): an output property (an empty or a cut-off output) that a step shows on
every call in the judged traces, in succeeding and failing runs alike, is what the step does (a "think" scratchpad
returns nothing), not a fault. A lift above 1 then says only that failing runs take that step more often. Errors are
never by design: a tool that errors on every call is broken.
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


def insight_offline_text(*, project_id: int, rows: list[int], drafts: list[Draft],
                         traces: Mapping[str, TraceInfo]) -> OfflineText:
    """The root cause and recommendation of an insight named without a model, from its statements `rows`."""
    at, after = _steps(_cited(rows, drafts), project_id=project_id)
    share = _share(rows, drafts, traces)
    if not at:
        return OfflineText(root_cause=share, recommendation="")
    (step, n), looked = at.most_common(1)[0], sum(at.values())
    where = f"at node {step.node}, in {step.name}" if step.node else f"in {step.name}"
    first = f"It first appears {where}: the earliest step its statements cite, in {n} of {looked} traces."
    recommendation = f"Start at {step.label()}, where it first appears."
    (following, m) = after.most_common(1)[0]
    if following is None:
        recommendation += f" The trace ended after that step in {m} of {looked} traces."
    else:
        recommendation += (f" Next, the agent ran {following.label()}" + (", which failed," if following.failed else "")
                           + f" in {m} of {looked} traces.")
    return OfflineText(root_cause=f"{first} {share}", recommendation=recommendation)


def insight_by_design(*, project_id: int, rows: list[int], drafts: list[Draft],
                      traces: Mapping[str, TraceInfo]) -> bool:
    """Whether statements `rows` are by-design behaviour: all of them an output property's (OUTPUT_PROPERTY_JUDGES)
    on a span, their traces holding succeeding and failing runs (recorded outcomes), and every call of each step they
    cite (same node, kind and tool, else span name) in the judged `traces` cited by one of them."""
    if not rows or any(drafts[r].judge not in OUTPUT_PROPERTY_JUDGES or not drafts[r].span_id for r in rows):
        return False
    outcomes = {traces[str(drafts[r].trace_pk)].failed for r in rows if str(drafts[r].trace_pk) in traces}
    if not {True, False} <= outcomes:
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
    for node, kind, tool, name in {(n, k, t, "" if t else name) for n, k, t, name in steps}:
        calls = Span.objects.filter(node=node, kind=kind, tool_name=tool,
                                    **({"name": name} if name else {}))
        for index, chunk in enumerate(chunks):
            if index not in days:
                days[index] = trace_days_for(project=project_id, trace_pks=chunk)
            found = calls.filter(trace_id__in=chunk, trace_day__in=days[index]).values_list("trace_id", "span_id")
            if any(call not in cited for call in found.iterator()):
                return False
    return True
