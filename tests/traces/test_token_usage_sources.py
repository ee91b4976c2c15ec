"""Token counts from the less common carriers (issue 24, point 4), ingested through the OTLP/JSON endpoint.

Each fixture copies the attribute shape a tool documents for its export:

* MLflow: `mlflow.chat.tokenUsage`, a JSON object string with `input_tokens`, `output_tokens`, `total_tokens`, set on
  chat spans by autologging (https://mlflow.org/docs/latest/genai/tracing/token-usage-cost/ —
  `span.get_attribute("mlflow.chat.tokenUsage")`; MLflow's OTLP export JSON-encodes every attribute value).
* Codex CLI: `codex.turn.token_usage.{input_tokens, cached_input_tokens, output_tokens, reasoning_output_tokens,
  total_tokens}` (the `[otel]` section of https://github.com/openai/codex/blob/main/docs/config.md; the names are
  Codex's `TokenUsage` struct, copied from the OpenAI Responses API usage, where `input_tokens` includes the cached
  part and `output_tokens` the reasoning part).
* OpenAI-style reasoning details: a Chat Completions `usage` object with `completion_tokens_details.reasoning_tokens`
  as the Langfuse SDK forwards it (`langfuse.observation.usage_details`,
  https://platform.openai.com/docs/api-reference/chat/object#chat/object-usage), and OpenInference's flat
  `llm.token_count.completion_details.reasoning`.
"""

import base64
import json
import uuid

import pytest
from django.test import Client
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rest_framework.test import APIClient

from clear.llm import litellm_load, price_per_token
from tests.traces.otlp_helpers import to_json
from traces.models import Span, Trace
from traces.services import trace_finalize

pytestmark = pytest.mark.django_db

MLFLOW_CHAT = {
    "mlflow.spanType": json.dumps("CHAT_MODEL"),
    "mlflow.llm.model": json.dumps("gpt-4o"),
    "mlflow.chat.tokenUsage": json.dumps({"input_tokens": 120, "output_tokens": 45, "total_tokens": 165}),
}
CODEX_TURN = {
    "gen_ai.request.model": "gpt-5-codex",
    "codex.turn.token_usage.input_tokens": 2000,
    "codex.turn.token_usage.cached_input_tokens": 1500,
    "codex.turn.token_usage.output_tokens": 300,
    "codex.turn.token_usage.reasoning_output_tokens": 200,
    "codex.turn.token_usage.total_tokens": 2300,
}
OPENAI_USAGE = {
    "prompt_tokens": 90,
    "completion_tokens": 70,
    "total_tokens": 160,
    "prompt_tokens_details": {"cached_tokens": 64},
    "completion_tokens_details": {"reasoning_tokens": 50},
}


def _ingest(key, named_attributes: dict[str, dict]) -> dict[str, Span]:
    """One trace: a root with one child span per entry, posted as OTLP/JSON and finalised."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "usage-sources"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    with tracer.start_as_current_span("run"):
        for name, attributes in named_attributes.items():
            with tracer.start_as_current_span(name) as span:
                span.set_attributes(attributes)
    provider.shutdown()
    response = Client().post("/v1/traces", data=to_json(exporter.get_finished_spans()),
                             content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key.secret}")
    assert response.status_code == 200, response.content
    trace = Trace.objects.get()
    trace_finalize(trace_pk=trace.pk)
    return {s.name: s for s in Span.objects.filter(trace=trace)}


def _counts(span: Span) -> tuple:
    return span.input_tokens, span.output_tokens, span.cached_tokens, span.reasoning_tokens


def _list_price(*, model: str, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
    """What the diagnosis judges' price lookup (clear.llm.price_per_token) gives, cache reads at LiteLLM's rate."""
    price_in, price_out = price_per_token(model=model)
    price_cached = litellm_load().model_cost[model].get("cache_read_input_token_cost", price_in)
    return (input_tokens - cached_tokens) * price_in + cached_tokens * price_cached + output_tokens * price_out


def test_mlflow_token_usage_json_string(issued_key):
    span = _ingest(issued_key, {"ChatOpenAI": MLFLOW_CHAT})["ChatOpenAI"]
    assert (span.kind, span.model) == ("LLM", "gpt-4o")
    assert _counts(span) == (120, 45, None, None)
    assert span.cost == pytest.approx(_list_price(model="gpt-4o", input_tokens=120, output_tokens=45))
    assert span.metadata["cost_estimated"] is True


def test_codex_token_usage_keys_keep_cached_in_input_and_reasoning_in_output(issued_key):
    span = _ingest(issued_key, {"codex.turn": CODEX_TURN})["codex.turn"]
    # total 2300 = input 2000 + output 300: the reasoning 200 is already inside output, nothing is added
    assert _counts(span) == (2000, 300, 1500, 200)
    # cached tokens at the cache-read price, reasoning once at the output price
    assert span.cost == pytest.approx(_list_price(model="gpt-5-codex", input_tokens=2000, output_tokens=300,
                                                  cached_tokens=1500))
    assert Trace.objects.get().cost == pytest.approx(span.cost)


def test_a_total_without_reasoning_inside_output_gets_it_added(issued_key):
    attributes = {**CODEX_TURN, "codex.turn.token_usage.total_tokens": 2500}
    span = _ingest(issued_key, {"codex.turn": attributes})["codex.turn"]
    assert _counts(span) == (2000, 500, 1500, 200)


def test_openai_reasoning_details(issued_key):
    spans = _ingest(issued_key, {
        "langfuse generation": {"langfuse.observation.type": "generation", "langfuse.observation.model.name": "o3",
                                "langfuse.observation.usage_details": json.dumps(OPENAI_USAGE)},
        "openinference llm": {"openinference.span.kind": "LLM", "llm.token_count.prompt": 90,
                              "llm.token_count.completion": 70, "llm.token_count.completion_details.reasoning": 50},
        "semconv chat": {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 90,
                         "gen_ai.usage.output_tokens": 70, "gen_ai.usage.reasoning_tokens": 50},
        "usage json": {"gen_ai.operation.name": "chat", "llm.usage": json.dumps(OPENAI_USAGE)},
    })
    assert _counts(spans["langfuse generation"]) == (90, 70, 64, 50)
    assert _counts(spans["openinference llm"]) == (90, 70, None, 50)
    assert _counts(spans["semconv chat"]) == (90, 70, None, 50)
    assert _counts(spans["usage json"]) == (90, 70, 64, 50)


def test_a_span_with_several_carriers_is_counted_once(issued_key):
    spans = _ingest(issued_key, {
        # named keys win over any vendor carrier
        "named and json": {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 120,
                           "gen_ai.usage.output_tokens": 45, **MLFLOW_CHAT},
        # a JSON string wins over flat vendor keys
        "json and flat": {**MLFLOW_CHAT, **CODEX_TURN},
        # two spellings of one flat group: the first key of each count wins
        "flat spellings": {**CODEX_TURN, "codex.turn.token_usage.prompt_tokens": 2000},
    })
    assert _counts(spans["named and json"]) == (120, 45, None, None)
    assert _counts(spans["json and flat"]) == (120, 45, None, None)
    assert _counts(spans["flat spellings"]) == (2000, 300, 1500, 200)
    trace = Trace.objects.get()
    assert (trace.input_tokens, trace.output_tokens) == (120 + 120 + 2000, 45 + 45 + 300)


def test_the_api_and_the_span_detail_show_reasoning_and_cached_tokens(issued_key, project, owner):
    _ingest(issued_key, {"codex.turn": CODEX_TURN})
    trace = Trace.objects.get()
    body = APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}").get(f"/api/v1/traces/{trace.trace_id}/").json()
    turn = next(s for s in body["spans"] if s["name"] == "codex.turn")
    assert (turn["input_tokens"], turn["output_tokens"], turn["cached_tokens"], turn["reasoning_tokens"]) == (
        2000, 300, 1500, 200)
    page = Client()
    page.force_login(owner)
    span_id = Span.objects.get(name="codex.turn").span_id
    html = page.get(f"/p/{project.slug}/traces/{trace.trace_id}/?span={span_id}").content.decode()
    detail = html[html.index('data-testid="span-detail"'):]
    assert "2000 in (1500 cached) · 300 out (200 reasoning)" in detail


def test_a_reported_cost_is_kept_and_unknown_models_get_none(issued_key):
    spans = _ingest(issued_key, {
        "reported": {**CODEX_TURN, "gen_ai.usage.cost": 0.0042},
        "unknown model": {**CODEX_TURN, "gen_ai.request.model": "in-house-model-7"},
    })
    assert spans["reported"].cost == 0.0042 and "cost_estimated" not in spans["reported"].metadata
    assert spans["unknown model"].cost is None and _counts(spans["unknown model"]) == (2000, 300, 1500, 200)


def test_langfuse_ingestion_buckets_fill_reasoning_inside_output(issued_key):
    """Langfuse's documented exclusive buckets (https://langfuse.com/docs/model-usage-and-cost): `output` excludes
    `output_reasoning`, so output_tokens is their sum and reasoning_tokens the bucket."""
    trace_id = str(uuid.uuid4())
    usage = {"input": 50, "input_cached_tokens": 30, "output": 10, "output_reasoning": 5}
    batch = [{"id": str(uuid.uuid4()), "type": "generation-create", "timestamp": "2026-12-01T10:00:00.000Z",
              "body": {"id": str(uuid.uuid4()), "traceId": trace_id, "name": "think", "model": "o3",
                       "startTime": "2026-12-01T10:00:00Z", "usageDetails": usage}}]
    auth = "Basic " + base64.b64encode(f"{issued_key.api_key.public_key}:{issued_key.secret}".encode()).decode()
    response = Client().post("/api/public/ingestion", data={"batch": batch}, content_type="application/json",
                             HTTP_AUTHORIZATION=auth)
    assert response.status_code == 207, response.content
    span = Span.objects.get(name="think")
    assert _counts(span) == (80, 15, 30, 5)
    assert span.cost == pytest.approx(_list_price(model="o3", input_tokens=80, output_tokens=15, cached_tokens=30))
