"""TraceViews for the LLM-judge tests and benchmark: hand-built ones and the support-desk example's traces.

The example's in-memory OTel spans go through the real ingestion normaliser (OTLP protobuf encode →
`traces.normalize.decode_export_request` → `resolve_nodes`) so kinds, nodes and input/output are what the
orchestrator will see from the database.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta, timezone

from diagnosis.judges.contract import SpanView, TraceView

T0 = datetime(2025, 1, 6, 9, 0, tzinfo=timezone.utc)


def span(span_id: str, *, parent: str = "", name: str = "", kind: str = "LLM", node: str = "agent",
         offset_s: float = 0.0, **fields) -> SpanView:
    return SpanView(span_id=span_id, parent_span_id=parent, name=name or f"{kind.lower()} {span_id}", kind=kind,
                    node=node, start_time=T0 + timedelta(seconds=offset_s),
                    end_time=T0 + timedelta(seconds=offset_s + 0.5), **fields)


def linear_trace(n_steps: int, *, text_chars: int = 200, trace_id: str = "t-linear", outcome: str | None = "failure",
                 goal: str = "Refund the duplicate charge on invoice INV-7 and tell the customer.") -> TraceView:
    """A root AGENT span and `n_steps` children alternating LLM and TOOL spans, each with ~text_chars of output."""
    filler = ("The customer was charged twice for invoice INV-7; checking the billing records now. " * 50)
    spans = [span("root", name="invoke_agent desk", kind="AGENT", node="desk", input=goal, output="Done.")]
    for i in range(n_steps):
        kind = "LLM" if i % 2 == 0 else "TOOL"
        fields = {"input": f"step {i} input: " + filler[: text_chars // 2],
                  "output": f"step {i}: " + filler[:text_chars]}
        if kind == "TOOL":
            fields["tool_name"] = "invoice_lookup"
        else:
            fields["model"] = "gpt-4o-mini"
        spans.append(span(f"s{i:03d}", parent="root", kind=kind, node="billing", offset_s=i + 1, **fields))
    return TraceView(trace_id=trace_id, spans=spans, goal=goal, final_output="Done.", outcome=outcome)


def _to_view(records) -> TraceView:
    parents = {r.span_id: r.parent_span_id for r in records}

    def depth(record) -> int:
        level, parent = 0, record.parent_span_id
        while parent in parents and level < 100:
            level, parent = level + 1, parents[parent]
        return level

    records = sorted(records, key=lambda r: (r.start_time, depth(r), r.span_id))
    root = next((r for r in records if r.is_root or not r.parent_span_id), records[0])
    spans = [
        SpanView(span_id=r.span_id, parent_span_id=r.parent_span_id or "", name=r.name, kind=r.kind,
                 node=r.node or "", start_time=r.start_time, end_time=r.end_time, model=r.model or "",
                 tool_name=r.tool_name or "", input=r.input, output=r.output, status=r.status,
                 status_message=r.status_message, input_tokens=r.input_tokens, output_tokens=r.output_tokens,
                 attributes=r.attributes, events=r.events, exceptions=r.exceptions)
        for r in records
    ]
    return TraceView(trace_id=root.trace_id, spans=spans, goal=root.input, final_output=root.output,
                     outcome=root.outcome, score=root.score, task_id=root.task_id or "", release=root.release or "",
                     synthetic_timing=True)


def support_desk_traces(*, bugs: str = "all", seed: int = 7, release: str = "r1",
                        task_ids=None) -> list[TraceView]:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from examples.support_desk import run_suite
    from traces.normalize import decode_export_request, resolve_nodes

    exporter = InMemorySpanExporter()
    run_suite(release=release, bugs=bugs, seed=seed, exporter=exporter, task_ids=task_ids)
    body = encode_spans(exporter.get_finished_spans()).SerializeToString()
    batch = decode_export_request(body=body, content_type="application/x-protobuf")
    resolve_nodes(batch.spans)
    by_trace = defaultdict(list)
    for record in batch.spans:
        by_trace[record.trace_id].append(record)
    return [_to_view(records) for records in by_trace.values()]


# --- a scripted judge: valid replies computed from what the fake server received -----------------------------------

def data_block(request: dict) -> dict:
    """The JSON payload of the <trace_data> block in a request the fake server received."""
    import json

    user = next(m["content"] for m in request["messages"] if m["role"] == "user")
    start = user.index("<trace_data>\n") + len("<trace_data>\n")
    end = user.rindex("\n</trace_data>")
    return json.loads(user[start:end])


def judge_of(request: dict) -> str:
    from diagnosis.judges.llm import SYSTEM_PROMPTS

    system = request["messages"][0]["content"]
    return next(name for name, text in SYSTEM_PROMPTS.items() if text == system)


def judge_reply(request: dict, *, score: float = 0.5) -> str:
    """A schema-valid answer for whichever judge sent `request` (verdicts for every step / rubric asked)."""
    import json

    judge, data = judge_of(request), data_block(request)
    issue = {"title": "Example issue: the step failed", "detail": "d", "severity": "medium", "evidence": []}
    if judge == "llm.step":
        steps = [{"span_id": s["span_id"], "critique": f"step {s['span_id']} looked at", "score": score,
                  "verdict": "fail" if score < 0.5 else "pass",
                  "issues": [{**issue, "evidence": [{"span_id": s["span_id"], "quote": "x"}]}]}
                 for s in data["steps"]]
        return json.dumps({"steps": steps})
    if judge == "llm.trace_window":
        seen = [s["span_id"] for s in data["steps"]]
        previous = data["running_summary"] or ""
        return json.dumps({"summary": (previous + f" window saw {len(seen)} spans, last {seen[-1]}.").strip(),
                           "issues": [issue]})
    if judge == "llm.rubric_gen":
        return json.dumps({"rubrics": [{"name": f"g{n}", "text": f"criterion {n}"} for n in range(3)]})
    failing = data["trace"]["recorded_outcome"] == "failure"
    first = data["steps"][0]["span_id"]
    return json.dumps({
        "feedback": "The agent did things.",
        "dimensions": {name: {"score": score, "justification": "j"} for name in
                       ("task_completion", "correctness", "tool_use", "efficiency", "coordination")},
        "score": score, "verdict": "fail" if failing else "pass",
        "outcome_assessment": "failure" if failing else "success",
        "root_cause": {"node": "n", "span_id": first, "reason": "r"} if failing else None,
        "issues": [issue],
        "rubrics": [{"id": r["id"], "verdict": "pass", "justification": "ok", "evidence": []} for r in data["rubrics"]],
    })


def conversation_trace(turns: int, *, result_chars: int = 400, trace_id: str = "t-conversation") -> TraceView:
    """One agent looping `turns` times: an LLM call (whose input is the whole conversation so far, as real
    instrumentations record it) followed by a tool call. Step inputs grow linearly, so re-sending them (CLEAR's
    step judge) costs O(turns²) tokens."""
    goal = "Research the refund policy changes of 2024 and summarise them for the customer."
    system = {"role": "system", "content": "You are the researcher. Use search_kb until you can answer."}
    history = [system, {"role": "user", "content": goal}]
    spans = [span("root", name="invoke_agent researcher", kind="AGENT", node="researcher", input=goal,
                  output="Summary sent.")]
    for turn in range(turns):
        call = {"role": "assistant", "tool_calls": [{"id": f"call_{turn}", "name": "search_kb",
                                                     "arguments": {"query": f"refund policy part {turn}"}}]}
        result = (f"Article {turn}: " + "Refunds within 30 days are processed to the original payment method. "
                  * (result_chars // 70 + 1))[:result_chars]
        spans.append(span(f"llm{turn:04d}", parent="root", kind="LLM", node="researcher", offset_s=2 * turn + 1,
                          model="gpt-4o-mini", input=list(history), output=[{**call, "finish_reason": "tool_calls"}]))
        spans.append(span(f"tool{turn:04d}", parent="root", kind="TOOL", node="researcher", offset_s=2 * turn + 2,
                          tool_name="search_kb", input=call["tool_calls"][0]["arguments"], output=result))
        history += [call, {"role": "tool", "tool_call_id": f"call_{turn}", "content": result}]
    return TraceView(trace_id=trace_id, spans=spans, goal=goal, final_output="Summary sent.", outcome="success")
