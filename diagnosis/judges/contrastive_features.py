"""The features the contrastive judge compares between failing and succeeding traces (diagnosis/judges/contrastive.py).

Each feature is a fact about one trace that a person can read ("`invoice_lookup` fails with `rate_limited`"), tied to
the node where it shows and to the spans that carry it, with a quote that is found again in the span's stored text
(diagnosis/services/evidence.py). Features are generic: tool and node presence and counts, ordered tool pairs,
hand-offs between nodes, short key/value pairs a node writes (routing decisions) or passes to a tool, errors and
their types, identical-argument repeats, list sizes in tool arguments, steps per node, and identifiers a node
received but did not pass on. Nothing here knows any particular agent.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import combinations, pairwise
from statistics import median

from diagnosis.judges.contract import Evidence, SpanView, TraceView
from diagnosis.judges.contrastive_tasks import task_features, unpreceded_features
from diagnosis.judges.rules.repetition import REPEATED_CALL_THRESHOLD
from diagnosis.judges.text import dump, error_pattern, error_payload, maybe_json, normalise, plain_text, value_text

# Readability and specificity of a feature kind: when features hold in exactly the same traces, the first kind here
# names the finding (a lost identifier says more than "the node ran").
# Within-task kinds come after what a node itself did: a run that routed wrongly also lacks the call the right
# worker makes, and the routing is the cause.
KIND_ORDER = ("lost", "repeat", "error_type", "route", "error", "arg", "task_arg", "task_missing", "task_extra",
              "unpreceded", "before", "without", "items", "count", "steps", "handoff", "calls", "node")
MAX_COUNT_THRESHOLD = 5  # "called at least k times" for k = 2..5: beyond that one more call says nothing new
_SHORT_VALUE = re.compile(r"^[A-Za-z][\w .:/-]{0,39}$")  # a word-like value (routing targets, intents, error codes)
_IDENTIFIER = re.compile(r"\b[A-Za-z][A-Za-z_]*[-_]?\d{2,}[A-Za-z0-9_-]*\b")  # O-5010, INV-9011, 1Z-…, KB-204
_MAX_FIELDS = 8  # key/value pairs are taken from objects this small only: larger ones are records, not decisions


@dataclass
class Hit:
    """One feature in one trace: where it shows and the spans that carry it."""

    kind: str
    node: str
    phrase: str  # completes "fails X% vs Y% when …"
    evidence: list[Evidence] = field(default_factory=list)
    started: float = 0.0  # epoch seconds of its first span: which of equivalent features shows first
    notes: list[str] = field(default_factory=list)  # what it is in this trace, when the phrase is general

    @property
    def rank(self) -> int:
        return KIND_ORDER.index(self.kind)


class _Collector:
    def __init__(self, trace: TraceView) -> None:
        self.trace = trace
        self.hits: dict[str, Hit] = {}
        self._texts: dict[str, str] = {}

    def quote(self, span: SpanView, *candidates: str) -> str:
        """The first candidate found in the span's stored text (as the evidence check will look for it), else a bare
        citation of the span."""
        if span.span_id not in self._texts:
            # Imported here: diagnosis.services imports the judges, so importing it at module load is circular.
            from diagnosis.services.evidence import span_text

            self._texts[span.span_id] = span_text(span)
        for candidate in candidates:
            if candidate and normalise(candidate) in self._texts[span.span_id]:
                return candidate[:200]
        return ""

    def add(self, key: str, *, kind: str, node: str, phrase: str, span: SpanView, quote: str, note: str = "") -> None:
        hit = self.hits.get(key)
        if hit is None:
            hit = self.hits[key] = Hit(kind=kind, node=node, phrase=phrase, started=span.start_time.timestamp())
        if note and note not in hit.notes:
            hit.notes.append(note)
        if len(hit.evidence) < 5 and all(e.span_id != span.span_id for e in hit.evidence):
            hit.evidence.append(Evidence(span.span_id, quote))


def tool_of(span: SpanView) -> str:
    return span.tool_name or span.name


def _error_type(span: SpanView) -> str:
    for exc in span.exceptions or []:
        if exc.get("type"):
            return str(exc["type"]).rsplit(".", 1)[-1]
    for key in ("error.type", "exception.type"):
        if span.attributes.get(key):
            return str(span.attributes[key])
    output = maybe_json(span.output)
    if isinstance(output, dict) and isinstance(output.get("error"), str) and _SHORT_VALUE.match(output["error"]):
        return output["error"]
    if span.kind == "TOOL":  # "Error: flight HAT030 not available on date …" -> its pattern, values taken out
        payload = error_payload(span.output)
        return error_pattern(payload) if payload else ""
    return ""


def _failed(span: SpanView) -> bool:
    """An error status or exception, or a tool whose output reports an error whatever its status (judges/text.py
    error_payload: a top-level `error` member, text starting with "Error:")."""
    if span.status == "error" or span.exceptions:
        return True
    return span.kind == "TOOL" and error_payload(span.output) is not None


def _objects(value, out: list[dict], depth: int = 0, *, calls: bool = True) -> None:
    """Every JSON object inside a value, JSON held in strings parsed too; with calls=False, not tool calls
    (`_tool_call`) nor what they hold."""
    if depth > 20:
        return
    value = maybe_json(value)
    if isinstance(value, dict):
        if not calls and _tool_call(value):
            return
        out.append(value)
        for child in value.values():
            _objects(child, out, depth + 1, calls=calls)
    elif isinstance(value, list):
        for child in value:
            _objects(child, out, depth + 1, calls=calls)


def _tool_call(obj: dict) -> bool:
    """A tool call a model wrote (`{"name", "arguments"}`, `{"function": {...}}`, `{"type": "tool_use", "input"}`)."""
    return (isinstance(obj.get("name"), str) and any(k in obj for k in ("arguments", "input", "args"))) \
        or isinstance(obj.get("function"), dict)


def _output_objects(span: SpanView) -> list[dict]:
    """The objects a model wrote: inside its messages' text when the output is a message list (the message
    envelopes themselves are not what it decided), else inside the output as it is. Tool calls are left out with
    what they hold: the call is its TOOL span, whose name and arguments the tool features compare (`calls`, `arg`;
    within a task `task_extra`, `task_arg`); as "writes `name: book_reservation`" it would be the same call twice."""
    found: list[dict] = []
    output = maybe_json(span.output)
    if isinstance(output, list) and output and all(isinstance(m, dict) and "parts" in m for m in output):
        for text in plain_text(output).split("\n"):
            _objects(text, found, calls=False)
    else:
        _objects(output, found, calls=False)
    return found


def _short_fields(obj: dict) -> list[tuple[str, str]]:
    if len(obj) > _MAX_FIELDS:
        return []
    return sorted((str(k), v) for k, v in obj.items()
                  if isinstance(v, str) and _SHORT_VALUE.match(v) and sum(c.isdigit() for c in v) < 2)


def _kv_quotes(key: str, value: str) -> tuple[str, ...]:
    return (f'"{key}": "{value}"', f'"{key}":"{value}"', value)


def _tool_features(c: _Collector, tools: list[SpanView]) -> None:
    by_tool: dict[tuple[str, str], list[SpanView]] = defaultdict(list)
    for span in tools:
        by_tool[(span.node, tool_of(span))].append(span)
    for (node, tool), spans in by_tool.items():
        first = spans[0]
        c.add(f"calls|{node}|{tool}", kind="calls", node=node, phrase=f"`{tool}` is called", span=first,
              quote=c.quote(first, tool))
        for k in range(2, min(len(spans), MAX_COUNT_THRESHOLD) + 1):
            c.add(f"count|{node}|{tool}|{k}", kind="count", node=node, phrase=f"`{tool}` is called {k}+ times",
                  span=spans[k - 1], quote=c.quote(spans[k - 1], tool))
        same_args: dict[tuple[str, str], list[SpanView]] = defaultdict(list)
        for span in spans:
            if span.input not in (None, "", {}, []):
                same_args[(span.parent_span_id, dump(maybe_json(span.input)))].append(span)
        for group in same_args.values():
            if len(group) >= REPEATED_CALL_THRESHOLD:
                for span in group:
                    c.add(f"repeat|{node}|{tool}", kind="repeat", node=node, span=span,
                          phrase=f"`{tool}` is called {REPEATED_CALL_THRESHOLD}+ times with identical arguments",
                          quote=c.quote(span, dump(maybe_json(span.input))))
        for span in spans:
            arguments = maybe_json(span.input)
            if isinstance(arguments, dict):
                for key, value in _short_fields(arguments):
                    c.add(f"arg|{node}|{tool}|{key}={value}", kind="arg", node=node, span=span,
                          phrase=f"`{tool}` is called with `{key}: {value}`", quote=c.quote(span, *_kv_quotes(key, value)))
                for key, value in arguments.items():
                    if isinstance(value, list) and len(value) >= 2:
                        c.add(f"items|{node}|{tool}|{key}", kind="items", node=node, span=span,
                              phrase=f"`{tool}` is called with 2+ items in `{key}`", quote=c.quote(span, str(key)))


def _error_features(c: _Collector, spans: list[SpanView]) -> None:
    for span in spans:
        if not _failed(span):
            continue
        label = tool_of(span) if span.kind == "TOOL" else span.name
        verb = "fails" if span.kind == "TOOL" else "ends in error"
        message = span.status_message or ""
        c.add(f"error|{span.node}|{label}", kind="error", node=span.node, phrase=f"`{label}` {verb}", span=span,
              quote=c.quote(span, message, label))
        error_type = _error_type(span)
        if error_type:
            c.add(f"error_type|{span.node}|{label}|{error_type}", kind="error_type", node=span.node, span=span,
                  phrase=f"`{label}` {verb} with `{error_type}`", quote=c.quote(span, error_type, message))


def _order_features(c: _Collector, tools: list[SpanView]) -> None:
    firsts: dict[str, SpanView] = {}
    for span in tools:
        firsts.setdefault(tool_of(span), span)
    for (a, first_a), (b, first_b) in combinations(firsts.items(), 2):
        if first_a.start_time == first_b.start_time:
            continue  # started together: no order
        (x, sx), (y, sy) = ((a, first_a), (b, first_b)) if first_a.start_time < first_b.start_time else \
            ((b, first_b), (a, first_a))
        c.add(f"before|{x}|{y}", kind="before", node=sx.node, phrase=f"`{x}` is called before `{y}`", span=sx,
              quote=c.quote(sx, x))
        c.add(f"before|{x}|{y}", kind="before", node=sx.node, phrase=f"`{x}` is called before `{y}`", span=sy,
              quote=c.quote(sy, y))


def _node_features(c: _Collector, spans: list[SpanView]) -> None:
    firsts: dict[str, SpanView] = {}
    for span in spans:
        if span.node:
            firsts.setdefault(span.node, span)
    for node, span in firsts.items():
        c.add(f"node|{node}", kind="node", node=node, phrase=f"`{node}` runs", span=span, quote="")
    agents = [s for s in spans if s.kind == "AGENT" and s.node and s.parent_span_id]
    for before, after in pairwise(agents):
        if before.node != after.node:
            c.add(f"handoff|{before.node}|{after.node}", kind="handoff", node=before.node, span=before, quote="",
                  phrase=f"`{before.node}` hands off to `{after.node}`")


def _copied(key: str, value: str, received: str) -> bool:
    return any(normalise(q) in received for q in _kv_quotes(key, value)[:2])


def _output_features(c: _Collector, spans: list[SpanView]) -> None:
    """Short key/value pairs a model writes, alone and in pairs from one object: a routing decision is a pair
    ("intent: refund" with "worker: orders_worker") that neither value shows alone. Pairs the span received in its
    input are data it passes on (a tool result's "status": "delivered"), not its decision, and are left out."""
    for span in spans:
        if span.kind not in ("LLM", "AGENT") or span.output is None:
            continue
        received = normalise(value_text(span.input)) if span.input is not None else ""
        for obj in _output_objects(span):
            fields = [(k, v) for k, v in _short_fields(obj) if not _copied(k, v, received)]
            for key, value in fields:
                c.add(f"route|{span.node}|{key}={value}", kind="route", node=span.node, span=span,
                      phrase=f"`{span.node}` writes `{key}: {value}`", quote=c.quote(span, *_kv_quotes(key, value)))
            for (k1, v1), (k2, v2) in combinations(fields, 2):
                c.add(f"route|{span.node}|{k1}={v1}|{k2}={v2}", kind="route", node=span.node, span=span,
                      phrase=f"`{span.node}` writes `{k1}: {v1}`, `{k2}: {v2}`",
                      quote=c.quote(span, f'"{k1}":"{v1}","{k2}":"{v2}"', f'"{k1}": "{v1}", "{k2}": "{v2}"', v2))


def _lost_features(c: _Collector, spans: list[SpanView]) -> None:
    """Identifiers in a model call's input that its output leaves out: facts lost between nodes."""
    for span in spans:
        if span.kind != "LLM" or span.input is None or span.output is None:
            continue
        received = set(_IDENTIFIER.findall(value_text(span.input)))
        if not received:
            continue
        output = value_text(span.output)
        passed = set(_IDENTIFIER.findall(output))
        lost = sorted(i for i in received - passed if i not in output and not i.startswith("call_"))
        if lost:
            c.add(f"lost|{span.node}", kind="lost", node=span.node, span=span, quote=c.quote(span, lost[0]),
                  phrase=f"`{span.node}` leaves out an identifier it received")


def trace_features(trace: TraceView) -> dict[str, Hit]:
    """Every feature of one trace, by key. Run-level features (`without`, `steps`) are added by run_features."""
    c = _Collector(trace)
    spans = sorted(trace.spans, key=lambda s: s.start_time)
    tools = [s for s in spans if s.kind == "TOOL"]
    _tool_features(c, tools)
    _error_features(c, spans)
    _order_features(c, tools)
    _node_features(c, spans)
    _output_features(c, spans)
    _lost_features(c, spans)
    return c.hits


# Runs of several tasks (run_features): which tools a run calls, how often, in which order, with which arguments and
# in how many steps is first of all what its task needs; within a task, `task_missing`, `task_extra`, `unpreceded`
# and `task_arg` say it of the run.
CROSS_TASK_KINDS = frozenset({"calls", "count", "items", "before", "without", "steps", "arg"})


def _task_compared(traces: list[TraceView]) -> set[str]:
    """The traces with a task id whose cross-task facts are left out: when the within-task features
    (contrastive_tasks.py) apply (some run's task has another run that succeeded), or when the runs are of several
    tasks at all (one run per task: every comparison is then across tasks). Empty otherwise (no task ids, or one
    task with no other succeeding run)."""
    succeeded: Counter = Counter(t.task_id for t in traces if t.task_id and t.outcome == "success")
    within = any(t.task_id and succeeded[t.task_id] - (t.outcome == "success") > 0 for t in traces)
    if not within and len({t.task_id for t in traces if t.task_id}) < 2:
        return set()
    return {t.trace_id for t in traces if t.task_id}


def run_features(traces: list[TraceView]) -> dict[str, dict[str, Hit]]:
    """trace id -> key -> Hit, with the features that need the whole run: a tool called without another tool the
    run uses, and a node taking more spans than its median over the traces it ran in.

    Runs of several tasks (`Trace.task_id`), when some run's task has another succeeding run: which tools a run
    calls, how often, in which order, with which arguments and in how many steps is first of all what its task
    needs. Across tasks, "`search_flight` is called without `transfer_to_human`", "`get_user` is called before
    `search_flight`", "is called with `origin: JFK`" or "takes more steps than usual" tell the kinds of task apart
    (the ones that fail more often), not a run's mistake, and when one such finding is left out the next one takes
    its place. So on every run with a task id, the features of those facts (CROSS_TASK_KINDS) are left out: the
    within-task features (`task_missing`, `task_extra`, `unpreceded`, `task_arg`) compare the run with its task's
    succeeding runs instead (a task whose runs all failed keeps none either, or they would look like causes).
    Errors, identical repeats, routing pairs and lost identifiers are compared across every run. On tau-airline's
    tune split (every run: 4 runs per task), the cross-task findings put no statement within one agent turn of a
    labelled wrong write and none of their tickets was real. With one run per task (issue 41) the same holds, and
    nothing compares within a task: on the tune split's one-run-per-task samplings, the cross-task findings that got
    a ticket ("`airline_agent` takes more steps than usual", "`search_direct_flight` is called without
    `transfer_to_human_agents`", "`get_user_details` is called before `search_direct_flight`") had no statement
    within one agent turn of a labelled step (0 of 12, 0 of 10, 0 of 4), so they are left out there too. Runs
    without task ids keep every feature."""
    features = {t.trace_id: trace_features(t) for t in traces}
    compared = _task_compared(traces)
    vocabulary = sorted({tool_of(s) for t in traces for s in t.spans if s.kind == "TOOL"})
    spans_per_node = {t.trace_id: Counter(s.node for s in t.spans if s.node) for t in traces}
    counts_of: dict[str, list[int]] = defaultdict(list)
    for counts in spans_per_node.values():
        for node, count in counts.items():
            counts_of[node].append(count)
    medians = {node: median(values) for node, values in counts_of.items()}
    for trace in traces:
        hits = features[trace.trace_id]
        c = _Collector(trace)
        c.hits = hits
        firsts: dict[str, SpanView] = {}
        for span in sorted(trace.spans, key=lambda s: s.start_time):
            if span.kind == "TOOL":
                firsts.setdefault(tool_of(span), span)
        for tool, span in firsts.items():
            for other in vocabulary:
                if other not in firsts:
                    c.add(f"without|{tool}|{other}", kind="without", node=span.node, span=span,
                          phrase=f"`{tool}` is called without `{other}`", quote=c.quote(span, tool))
        for node, count in spans_per_node[trace.trace_id].items():
            if count > medians[node]:
                span = next(s for s in sorted(trace.spans, key=lambda s: s.start_time) if s.node == node)
                c.add(f"steps|{node}", kind="steps", node=node, span=span, quote="",
                      phrase=f"`{node}` takes more steps than usual (over {medians[node]:g} spans)")
    _leave_out_task_facts(features, compared)
    task_features(traces, features, _collector_for)
    unpreceded_features(traces, features, _collector_for)
    return features


def _leave_out_task_facts(features: dict[str, dict[str, Hit]], compared: set[str]) -> None:
    """CROSS_TASK_KINDS features of the runs with a task id (`compared`, run_features)."""
    for trace_id in compared:
        hits = features[trace_id]
        for key in [k for k, hit in hits.items() if hit.kind in CROSS_TASK_KINDS]:
            del hits[key]


def _collector_for(trace: TraceView, hits: dict[str, Hit]) -> _Collector:
    c = _Collector(trace)
    c.hits = hits
    return c
