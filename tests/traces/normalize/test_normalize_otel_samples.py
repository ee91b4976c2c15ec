"""Every span of every shared otel-samples payload maps as its expect.json says.

Where expect.json lists a field as ambiguous, the expected value it gives is also our documented choice
(traces/normalize/MAPPING.md), so every field is asserted against it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from traces.normalize import decode_export_request, resolve_nodes

REPO_ROOT = Path(__file__).resolve().parents[3]
SHARED = Path(os.environ.get("CLEAR_SHARED_DIR", str(REPO_ROOT.parent / "shared"))).resolve()
SAMPLES = SHARED / "datasets" / "otel-samples"
FOLDERS = ["genkit", "langfuse-sdk", "openlit", "openllmetry", "pydantic-ai"]


def _samples_dir() -> Path:
    if not SAMPLES.is_dir():
        pytest.fail(f"shared datasets missing at {SAMPLES}; lay shared/ next to the checkout or set CLEAR_SHARED_DIR")
    return SAMPLES


def test_every_folder_is_covered():
    found = sorted(p.name for p in _samples_dir().iterdir() if (p / "expect.json").is_file())
    assert found == sorted(FOLDERS), "a new otel-samples folder needs a test"


@pytest.mark.parametrize("folder", FOLDERS)
def test_sample_folder_matches_expectations(folder):
    root = _samples_dir() / folder
    expect = json.loads((root / "expect.json").read_text())
    checked = 0
    for trace in expect["traces"]:
        body = (root / trace["file"]).read_bytes()
        batch = decode_export_request(body=body, content_type="application/json")
        assert batch.rejected == []
        resolve_nodes(batch.spans)
        by_id = {s.span_id: s for s in batch.spans}
        assert len(batch.spans) == len(trace["spans"]), trace["file"]
        for span_expect in trace["spans"]:
            span = by_id[span_expect["spanId"]]
            exp = span_expect["expected"]
            where = f"{trace['file']} {span_expect['name']}"
            assert span.name == span_expect["name"], where
            assert span.scope == span_expect["scope"], where
            assert span.kind == exp["kind"], where
            assert span.node == exp["node_name"], where
            assert span.model == exp["model"], where
            assert (span.input is not None) == exp["input_present"], where
            assert (span.output is not None) == exp["output_present"], where
            assert span.input_tokens == exp["input_tokens"], where
            assert span.output_tokens == exp["output_tokens"], where
            assert span.parent_span_id == exp["parent"], where
            assert span.is_root == (exp["parent"] is None), where
            assert span.usage_is_aggregate == span_expect["aggregate_usage"], where
            assert span.start_time.tzinfo is not None
            json.dumps(span.input), json.dumps(span.output), json.dumps(span.attributes), json.dumps(span.metadata)
            checked += 1
    assert checked == sum(len(t["spans"]) for t in expect["traces"])


def _decode(folder: str, file: str):
    batch = decode_export_request(body=(_samples_dir() / folder / file).read_bytes(), content_type="application/json")
    resolve_nodes(batch.spans)
    return {s.name: s for s in batch.spans}


def test_langfuse_sdk_details():
    spans = _decode("langfuse-sdk", "langfuse-python-sdk-generation.otlp.json")
    gen = spans["my-generation"]
    assert gen.input == [{"role": "user", "content": "hello"}]  # JSON-in-string decoded
    assert gen.output == {"role": "assistant", "content": "what's up?"}
    assert gen.metadata["key1"] == "value1"  # double-encoded metadata value
    assert gen.metadata["trace_metadata"] == {"trace-key1": "value1", "trace-key2": "value2"}
    assert gen.metadata["completion_start_time"] == "2025-04-30T15:28:50.686390Z"
    assert gen.metadata["model_parameters"] == {"temperature": 1, "top_p": "0.2"}
    assert gen.metadata["level"] == "WARNING"
    assert gen.status_message == "nothing to report"
    assert gen.cost == pytest.approx(0.0021)
    assert gen.release == "0.0.1" and gen.environment == "production"
    assert gen.session_id == "my-session" and gen.user_id == "my-user"
    assert gen.tags == ["tag2"]
    assert spans["my-span"].tags == ["tag1"]


def test_openlit_details():
    span = _decode("openlit", "openlit-openai-chat.otlp.json")["openai.chat.completions"]
    assert span.input == "user: What is LLM Observability?"
    assert span.output.startswith("LLM Observability stands for")
    assert span.cost == pytest.approx(0.000151)
    assert span.attributes["gen_ai.request.max_tokens"] == -1
    assert span.environment == "default"
    assert span.status == "ok"


def test_openllmetry_details():
    chat = _decode("openllmetry", "traceloop-openai-chat-0.33.9.otlp.json")["openai.chat"]
    assert chat.input == [{"role": "user", "content": "What is LLM Observability?"}]
    assert chat.output[0]["role"] == "assistant" and chat.output[0]["finish_reason"] == "stop"
    assert chat.status == "unset"
    stream = _decode("openllmetry", "traceloop-openai-chat-stream-0.26.4.otlp.json")["openai.chat"]
    assert [m["role"] for m in stream.input] == ["system", "user"]
    assert len(stream.events) == 14
    wf = _decode("openllmetry", "traceloop-langchain-workflow-0.26.5.otlp.json")["RunnableSequence.workflow"]
    assert wf.output["outputs"].startswith("\U0001f44b Hi there")  # surrogate escapes decoded
    assert wf.input["inputs"] == {"input": ""}


def test_genkit_details():
    span = _decode("genkit", "genkit-model-action.otlp.json")["genkit-action"]
    assert span.input["messages"][0]["role"] == "user"
    assert span.output["usage"]["thoughtsTokens"] == 320


def test_pydantic_ai_details():
    root = _decode("pydantic-ai", "pydantic-ai-1.60-agent-root.otlp.json")["roulette_agent run"]
    assert root.agent_name == "roulette_agent"
    assert root.input[2]["parts"][0]["type"] == "tool_call"
    assert root.output.endswith("\U0001f389")
    spans = _decode("pydantic-ai", "pydantic-ai-agent-run-with-feedback.otlp.json")
    assert spans["chat test"].input == [{"parts": [{"type": "text", "content": "Hello"}], "role": "user"}]
    assert spans["invoke_agent agent"].output == "success (no tool calls)"  # plain string, not JSON
    assert spans["chat test"].session_id == "00000000-0000-4000-8000-00000000c0a1"
    assert spans["feedback: factuality"].attributes["factuality"] == 0.1
