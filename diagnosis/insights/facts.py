"""An insight's root cause and recommendation without a model: computed facts only.

Restating the statements ("fix the behaviour that makes judges report …") or listing their distinctive terms reads
as an analysis nobody made. What the traces do show: where the pattern first appears (the earliest span its
statements cite in each trace), its share of the failing and of the succeeding traces, and what the agent did
next (the first step that started after that span ended, outside it). The root cause states the first two, the
recommendation where to start and what followed; a sentence whose facts are missing is left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from diagnosis.clustering.stats import TraceInfo
from diagnosis.insights.statements import Draft
from traces.models import Span

MAX_TRACES = 50  # traces whose spans are read for the first appearance and the next step


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


def _steps(cited: dict[int, set[str]]) -> tuple[Counter, Counter]:
    """(first-appearance steps, next steps), counted once per trace (None: nothing came next). The first appearance
    is the earliest cited span that holds no other cited span: an agent's span that failed because a call inside it
    failed started first, but the call is where the pattern shows."""
    pks = sorted(cited)[:MAX_TRACES]
    spans: dict[int, list[dict]] = {}
    for row in Span.objects.filter(trace_id__in=pks).values(
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


def insight_offline_text(*, rows: list[int], drafts: list[Draft], traces: Mapping[str, TraceInfo]) -> OfflineText:
    """The root cause and recommendation of an insight named without a model, from its statements `rows`."""
    at, after = _steps(_cited(rows, drafts))
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
