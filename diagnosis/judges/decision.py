"""Who decided a tool call: the agent step (an LLM or AGENT span) that issued it, and what that step had in front of
it. A failing or wrong tool call is the symptom; the step that made it is where a fix goes, so the error rules
(rules/errors.py, rules/repetition.py) blame that step and cite the call and its reply as evidence, and the offline
texts (insights/facts.py, tickets/fix.py) describe the decision from the same spans.

Instrumentations put tool spans in two places:
* inside the model turn that asked for them (a TOOL span child of the LLM span): the nearest LLM ancestor decided;
* beside it (tau-bench's OpenInference traces, the example agent's GenAI spans, Who&When's group chat): the TOOL span
  is a sibling that starts after the turn whose output holds the tool call. The decider is then the latest LLM (or,
  without one, AGENT) sibling that ended before the call started, preferring one whose output names the tool;
  without such a sibling, the enclosing AGENT span (the agent that made the call, if not which of its turns).
The walk goes up through spans that are neither (a CHAIN wrapping the call) the same way. A decider must belong to the
call's agent: a sibling or AGENT ancestor whose node differs from the tool span's (both set) is another agent (the
normaliser gives a call its enclosing agent's node unless the call names its own: a group chat's code executor runs
what another agent wrote, and which turn that was is not in the spans' structure). None when no span qualifies: the
caller then keeps citing the tool span itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnosis.judges.contract import Evidence, SpanView, TraceView
from diagnosis.judges.text import dump, error_payload, maybe_json, normalise, plain_text, value_text

DECIDING_KINDS = ("LLM", "AGENT")
QUOTE_MAX = 160  # characters of an argument list or reply quoted in a text (evidence quotes stay verifiable)
_MIN_VALUE = 3  # shortest argument value that ties two calls to one object ("O-5007", not "1")


class TraceIndex:
    """Parent and children of a trace's spans, built once per trace: rules ask for many calls' deciders."""

    __slots__ = ("by_id", "children")

    def __init__(self, trace: TraceView) -> None:
        self.by_id: dict[str, SpanView] = {}
        self.children: dict[str, list[SpanView]] = {}
        for span in trace.spans:  # start order, so children lists are too
            self.by_id.setdefault(span.span_id, span)
            self.children.setdefault(span.parent_span_id, []).append(span)


def _names_tool(step: SpanView, tool: str) -> bool:
    return bool(tool) and normalise(tool) in normalise(value_text(step.output))


def _same_agent(step: SpanView, call: SpanView) -> bool:
    return not step.node or not call.node or step.node == call.node


def _earlier_sibling(span: SpanView, index: TraceIndex, call: SpanView, tool: str) -> SpanView | None:
    """The latest LLM (else AGENT) sibling of `span` of the call's agent that ended before `span` started,
    preferring one naming `tool`."""
    for kind in DECIDING_KINDS:
        before = [s for s in index.children.get(span.parent_span_id, []) if s.kind == kind and _same_agent(s, call)
                  and s.span_id != span.span_id and (s.end_time or s.start_time) <= span.start_time]
        if before:
            before.sort(key=lambda s: (s.end_time or s.start_time, s.start_time))
            naming = [s for s in before if _names_tool(s, tool)]
            return (naming or before)[-1]
    return None


def deciding_step(span: SpanView, trace: TraceView, index: TraceIndex | None = None) -> SpanView | None:
    """The LLM or AGENT span that issued the TOOL span `span` (module docstring), or None."""
    if span.kind != "TOOL":
        return None
    index = index or TraceIndex(trace)
    tool = span.tool_name or span.name
    current, seen = span, {span.span_id}
    while True:
        parent = index.by_id.get(current.parent_span_id)
        if parent is not None and parent.kind == "LLM":
            return parent
        sibling = _earlier_sibling(current, index, span, tool)
        if sibling is not None:
            return sibling
        if parent is None or parent.span_id in seen:
            return None
        if parent.kind == "AGENT" and _same_agent(parent, span):
            return parent
        seen.add(parent.span_id)
        current = parent


def agent_of(step: SpanView) -> str:
    """How a text names a step: its agent (node) and the span, "billing_worker (chat gpt-4o-mini)"."""
    return f"{step.node} ({step.name})" if step.node and step.node != step.name else step.name


def clip_quote(text: str, limit: int = QUOTE_MAX) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "\u2026"


def arguments_of(call: SpanView) -> str:
    """The call's arguments as the evidence check finds them in the tool span (compact JSON), "" without any."""
    if call.input in (None, "", {}, []):
        return ""
    return dump(maybe_json(call.input))


def reply_of(call: SpanView) -> str:
    """What the tool answered: its output (an error payload included), else its exception or status message."""
    output = maybe_json(call.output)
    if output not in (None, "", {}, []):
        return plain_text(output) if isinstance(output, str) else dump(output)
    for exc in call.exceptions or []:
        if exc.get("message"):
            return str(exc["message"])
    return call.status_message or ""


def failed(call: SpanView) -> bool:
    return call.status == "error" or bool(call.exceptions) or error_payload(call.output) is not None


def _values(value, out: dict[str, str], depth: int = 0) -> None:
    """Argument values that can name an object (normalised -> as written): strings of 3+ characters, numbers
    of 3+ digits."""
    if depth > 10:
        return
    if isinstance(value, dict):
        for child in value.values():
            _values(child, out, depth + 1)
    elif isinstance(value, (list, tuple)):
        for child in value:
            _values(child, out, depth + 1)
    elif isinstance(value, str) and len(value.strip()) >= _MIN_VALUE:
        out.setdefault(normalise(value), value.strip())
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 100:
        out.setdefault(str(value), str(value))


@dataclass(frozen=True, slots=True)
class PriorReply:
    """The last reply about the call's object that the deciding step could have read before the call."""

    call: SpanView
    value: str  # the argument value both calls share
    same_call: bool  # the same tool with the same arguments


def prior_reply(call: SpanView, trace: TraceView) -> PriorReply | None:
    """The latest TOOL span that ended before `call` started and shares an argument value with it (the same call
    first), e.g. the lookup of the booking that a refused write was about."""
    mine: dict[str, str] = {}
    _values(maybe_json(call.input), mine)
    if not mine:
        return None
    arguments, tool = arguments_of(call), call.tool_name or call.name
    found: PriorReply | None = None
    for other in trace.spans:  # start order: the last match is the latest
        if other.kind != "TOOL" or other.span_id == call.span_id or \
                (other.end_time or other.start_time) > call.start_time:
            continue
        if (other.tool_name or other.name) == tool and arguments_of(other) == arguments:
            found = PriorReply(other, mine[min(mine)], True)
            continue
        theirs: dict[str, str] = {}
        _values(maybe_json(other.input), theirs)
        shared = sorted(mine.keys() & theirs.keys())
        if shared and not (found and found.same_call):
            found = PriorReply(other, mine[shared[0]], False)
    return found


def call_said(call: SpanView, step: SpanView | None) -> str:
    """What the step did and what came back, for an issue's detail: "billing_worker (chat …) called `invoice_lookup`
    with `{"invoice_id": "INV-9011"}`; the tool replied `{"error": "rate_limited", …}`"."""
    tool, arguments, reply = call.tool_name or call.name, arguments_of(call), reply_of(call)
    who = agent_of(step) if step is not None else "The agent"
    did = f"{who} called `{tool}`" + (f" with `{clip_quote(arguments)}`" if arguments else "")
    return did + (f"; the tool replied `{clip_quote(reply)}`." if reply else "; the tool replied nothing.")


def call_evidence(call: SpanView, step: SpanView | None, quote_max: int = 200) -> list[Evidence]:
    """Evidence of a call blamed on its deciding step: the step (quoting the tool's name where its text has it, else
    a bare citation), the call's arguments and the tool's reply, each cited on the span whose text holds it."""
    evidence = []
    if step is not None and step.span_id != call.span_id:
        tool = call.tool_name or call.name
        text = normalise(value_text(step.input) + "\n" + value_text(step.output))
        evidence.append(Evidence(step.span_id, tool if tool and normalise(tool) in text else ""))
    for quote in (arguments_of(call), reply_of(call)):
        quote = quote.strip()[:quote_max]
        if quote and all((e.span_id, e.quote) != (call.span_id, quote) for e in evidence):
            evidence.append(Evidence(call.span_id, quote))
    return evidence


# ---------------------------------------------------------------------------------------------------------------
# what a decision was, in words (insights/facts.py, tickets/fix.py)

_STATE_KEYS = ("status", "state", "result", "outcome")


@dataclass(frozen=True, slots=True)
class DecisionFacts:
    """A finding's decision, from the spans: who decided, what it did, what it had in front of it, the advice."""

    step: SpanView
    who: str  # "billing_worker (chat gpt-4o-mini)"
    did: str  # "called `invoice_lookup` 5 times with `{…}`; the tool replied `…`" / "wrote `…`"
    saw: str  # "the same call had already replied `…`" / "`track_shipment` had returned `…`" / ""
    advice: str  # the recommendation: what to change in that decision

    def sentence(self) -> str:
        return f"{self.who} {self.did}." + (f" It had in front of it {self.saw}." if self.saw else "")


def _gist(call: SpanView) -> str:
    """A reply in a few words: its error, else its state field ("status: cancelled"), else its opening."""
    error = error_payload(call.output)
    if error:
        return clip_quote(error, 100)
    output = maybe_json(call.output)
    if isinstance(output, dict):
        for key in _STATE_KEYS:
            if isinstance(output.get(key), (str, int, float)) and not isinstance(output.get(key), bool):
                return f"{key}: {output[key]}"
    return clip_quote(reply_of(call), 100)


def _call_facts(step: SpanView, who: str, calls: list[SpanView], trace: TraceView) -> DecisionFacts:
    priors = [(call, prior_reply(call, trace)) for call in calls]
    call, prior = next(((c, p) for c, p in priors if p is not None and p.same_call), None) \
        or next(((c, p) for c, p in priors if p is not None), None) \
        or (next((c for c in calls if failed(c)), calls[0]), None)
    tool, arguments, reply = call.tool_name or call.name, arguments_of(call), reply_of(call)
    times = sum(1 for c in calls if (c.tool_name or c.name) == tool and arguments_of(c) == arguments)
    did = f"called `{tool}`" + (f" {times} times" if times > 1 else "") \
        + (f" with `{clip_quote(arguments)}`" if arguments else "") \
        + (f"; the tool replied `{clip_quote(reply)}`" if reply else "; the tool replied nothing")
    saw, refused = "", failed(call)
    if prior is not None and prior.same_call:
        saw = f"the same call's earlier reply `{_gist(prior.call)}`"
    elif prior is not None:
        saw = (f"`{prior.call.tool_name or prior.call.name}`'s last reply about `{clip_quote(prior.value, 60)}`: "
               f"`{_gist(prior.call)}`")
    if prior is not None and prior.same_call and failed(prior.call):
        advice = (f"Make {who} act on the reply it had before calling `{tool}` again (`{_gist(prior.call)}`): "
                  "wait as the reply says, change the arguments, or stop and report the failure instead of "
                  "repeating the call.")
    elif prior is not None and refused:
        advice = (f"Make {who} check `{prior.call.tool_name or prior.call.name}`'s reply (`{_gist(prior.call)}`) "
                  f"before it calls `{tool}`: the tool refused the call with `{_gist(call)}`.")
    elif refused:
        advice = (f"Make {who} meet what `{tool}` requires before calling it, or handle its refusal "
                  f"(`{_gist(call)}`) instead of going on as if the call had worked.")
    else:
        advice = f"Change the decision {who} makes there: it {did}."
    return DecisionFacts(step, who, did, saw, advice)


def decision_facts(*, trace: TraceView, span_id: str, evidence: list[tuple[str, str]]) -> DecisionFacts | None:
    """What the step `span_id` (a finding's target) decided, from the trace's spans and the finding's evidence
    ((span id, quote) pairs): the tool calls it cites, else what the step wrote. None when the span is not there."""
    index = TraceIndex(trace)
    step = index.by_id.get(span_id)
    if step is None:
        return None
    calls = {step.span_id: step} if step.kind == "TOOL" else {}
    if step.kind == "TOOL":
        step = deciding_step(step, trace, index) or step
    for cited, _ in evidence:  # the calls this step made; other cited spans are what it had in front of it
        span = index.by_id.get(cited)
        if span is not None and span.kind == "TOOL" and cited not in calls and \
                getattr(deciding_step(span, trace, index), "span_id", None) == step.span_id:
            calls[cited] = span
    who = agent_of(step)
    if calls:
        return _call_facts(step, who, sorted(calls.values(), key=lambda s: s.start_time), trace)
    others = [(index.by_id[s], q) for s, q in evidence if s != step.span_id and s in index.by_id and q.strip()]
    output = normalise(value_text(step.output))
    dropped = next((q for _, q in others if normalise(q) not in output), "")
    quote = max((q for s, q in evidence if s == step.span_id and q.strip()), key=len, default="") \
        or plain_text(maybe_json(step.output))
    did = f"wrote an output without `{clip_quote(dropped, 60)}`" if dropped else \
        f"wrote `{clip_quote(quote)}`" if quote.strip() else "wrote nothing"
    if others:
        source, value = next(((s, q) for s, q in others if q == dropped), others[0])
        saw = f"`{clip_quote(value, 60)}` from `{source.tool_name or source.name}`"
    else:
        ended = [s for s in trace.spans if s.kind == "TOOL" and (s.end_time or s.start_time) <= step.start_time]
        goal = clip_quote(plain_text(maybe_json(trace.goal)), 100) if trace.goal is not None else ""
        saw = (f"`{_gist(ended[-1])}` from `{ended[-1].tool_name or ended[-1].name}`" if ended
               else f"the request `{goal}`" if goal else "")
    if dropped:
        advice = f"Change the decision {who} makes there: {saw} was in front of it and its output leaves it out."
    else:
        advice = f"Change the decision {who} makes there: " + (f"with {saw} in front of it, " if saw else "") \
            + f"it {did}."
    return DecisionFacts(step, who, did, saw, advice)
