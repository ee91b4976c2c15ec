"""All 126 Who&When traces decode with every span, parent link and agent name (checked against the raw files)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from traces.normalize import decode_export_request, resolve_nodes

REPO_ROOT = Path(__file__).resolve().parents[3]
SHARED = Path(os.environ.get("CLEAR_SHARED_DIR", str(REPO_ROOT.parent / "shared"))).resolve()
WHOWHEN = SHARED / "datasets" / "whowhen-algorithm-generated"


def _files() -> list[Path]:
    if not WHOWHEN.is_dir():
        pytest.fail(f"shared datasets missing at {WHOWHEN}; lay shared/ next to the checkout or set CLEAR_SHARED_DIR")
    return sorted(WHOWHEN.glob("Algorithm-Generated-*.json"))


def _raw_spans(doc: dict) -> list[dict]:
    out = []
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            out.extend(ss["spans"])
    return out


def _attr(span: dict, key: str):
    for kv in span.get("attributes", []):
        if kv["key"] == key:
            return next(iter(kv["value"].values()))
    return None


def test_all_126_traces_decode_completely():
    files = _files()
    assert len(files) == 126
    total = 0
    agent_spans = 0
    for path in files:
        body = path.read_bytes()
        raw = _raw_spans(json.loads(body))
        batch = decode_export_request(body=body, content_type="application/json; charset=utf-8")
        assert batch.rejected == [], path.name
        resolve_nodes(batch.spans)
        assert len(batch.spans) == len(raw), path.name
        by_id = {s.span_id: s for s in batch.spans}
        assert len(by_id) == len(raw)
        roots = [s for s in batch.spans if s.is_root]
        assert len(roots) == 1, path.name
        root = roots[0]
        assert root.kind == "CHAIN"
        assert root.outcome == "failure"
        assert root.task_id and root.input, path.name
        for rs in raw:
            span = by_id[rs["spanId"].lower()]
            assert span.trace_id == rs["traceId"].lower()
            assert span.parent_span_id == (rs.get("parentSpanId") or None)
            if span.parent_span_id:
                assert span.parent_span_id in by_id  # every parent link resolves inside the trace
            agent = _attr(rs, "gen_ai.agent.name")
            tool = _attr(rs, "gen_ai.tool.name")
            if rs["name"].startswith("invoke_agent "):
                assert span.kind == "AGENT"
                assert span.node == span.agent_name == agent
                agent_spans += 1
            elif rs["name"].startswith("execute_tool "):
                assert span.kind == "TOOL"
                assert span.tool_name == tool
                assert span.node == tool  # no AGENT ancestor: the tool names its node
                assert span.status == ("error" if rs.get("status", {}).get("code") == 2 else "unset")
                if span.status == "error":
                    assert "exit code" in span.status_message
            if "agent.step_index" in {kv["key"] for kv in rs.get("attributes", [])}:
                assert span.attributes["agent.step_index"] == int(_attr(rs, "agent.step_index"))
            assert span.output is not None or span.is_root
        total += len(raw)
    assert total > 126 and agent_spans > 0


def test_whowhen_resource_and_timing():
    path = _files()[0]
    batch = decode_export_request(body=path.read_bytes(), content_type="application/json")
    span = batch.spans[0]
    assert span.resource["dataset.synthetic_timing"] is True
    assert span.resource["service.name"] == "whowhen-algorithm-generated"
    assert span.start_time.year >= 2025 and span.end_time > span.start_time
