"""Issue 24, point 6: fuzzed ingestion endpoints. Hypothesis draws small batches (1-5 spans or events) that mix valid
spans with broken ones (100,000-character names, NUL, lone surrogates, ids of the wrong length or not hex, times that
are negative, 'abc', 2^70, 2^64-1 or end before start, attributes nested deep, huge or of the wrong type) and sends
them in-process through Django's test client to OTLP/JSON and OTLP/protobuf /v1/traces and to the Langfuse ingestion
endpoint. Every response must be below 500; OTLP's accepted + rejectedSpans equals the spans sent (accepted counted as
the Span rows the request created); Langfuse's 207 names every event sent; every 20th request's spans read back
through /api/v1/traces/{id}/.

Each endpoint kind gets CLEAR_FUZZ_EXAMPLES generated requests (default 2,000: .ci/run's Postgres pass; its SQLite
pass sets 500, scripts/test.sh); a longer profile is `CLEAR_FUZZ_EXAMPLES=10000` (30,000 requests, 7 minutes on
Postgres). The totals (requests per kind, 5xx count, seconds) are written to the terminal at the end of the module. Two explicit tests ingest a 100,000-character span name and a 5,000-span trace, then render
the trace page and the API and run the rule judges over them."""

import base64
import itertools
import json
import os
import re
import time
from collections import Counter
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

from diagnosis.models import DiagnosisRun
from traces.models import Span

pytestmark = pytest.mark.django_db

EXAMPLES = int(os.environ.get("CLEAR_FUZZ_EXAMPLES", "2000"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))
READBACK_EVERY = 20
SURROGATE = "SURROGATE-MARK"  # replaced by a raw \ud800 escape in JSON bodies: json.dumps cannot write one
START = 1_700_000_000_000_000_000
TOTALS: Counter = Counter()
_ids = itertools.count(1)  # valid ids are unique across the run, so every accepted span is a new Span row


@pytest.fixture(scope="module", autouse=True)
def _print_totals(request):
    yield
    if not TOTALS:
        return
    line = "fuzz: " + ", ".join(f"{kind} {TOTALS[kind]} requests in {TOTALS[kind + ' s']:.1f} s "
                                f"({TOTALS[kind + ' accepted']} accepted, {TOTALS[kind + ' rejected']} rejected, "
                                f"{TOTALS[kind + ' 4xx']} requests 4xx)"
                                for kind in ("otlp-json", "otlp-protobuf", "langfuse") if TOTALS[kind])
    line += f"; {TOTALS['5xx']} responses 5xx"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.ensure_newline()
            reporter.write_line(line)
    else:
        print(line)


@pytest.fixture
def fuzz_client(issued_key, settings):
    settings.CLEAR_API_RATE = ""  # thousands of requests a minute from one key
    return Client(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")


# --- strategies ----------------------------------------------------------------------------------------------------

long_text = st.sampled_from([300, 501, 5_000, 100_000]).map(lambda n: "n" * n)
names = st.one_of(st.text(max_size=30), long_text, st.just("nul\x00name"), st.just(f"cut-{SURROGATE}"),
                  st.just("名前 🚀 \u202e"))
# Weighted so that about half the spans are valid: a batch mixes both.
ID_KINDS = ["valid"] * 12 + ["short", "long", "empty", "non-hex", "zero"]
times = st.sampled_from(["valid"] * 12 + ["-1", "abc", str(2**70), str(2**64 - 1), "", None, 1.5])


def _any_value(depth: int) -> st.SearchStrategy:
    leaf = st.one_of(st.builds(lambda s: {"stringValue": s}, st.one_of(st.text(max_size=20), long_text,
                                                                       st.just(f"a\x00{SURROGATE}"))),
                     st.builds(lambda i: {"intValue": i}, st.sampled_from(["12", "abc", str(2**70), -3, 1.5])),
                     st.builds(lambda b: {"boolValue": b}, st.sampled_from([True, "yes", None])),
                     st.builds(lambda d: {"doubleValue": d}, st.sampled_from([1.5, "NaN", "x"])),
                     st.builds(lambda b: {"bytesValue": b}, st.sampled_from(["aGk=", "not base64!"])),
                     st.sampled_from(["wrong", 3, None, [], {}]))
    if depth <= 0:
        return leaf
    inner = _any_value(depth - 1)
    return st.one_of(leaf, st.builds(lambda vs: {"arrayValue": {"values": vs}}, st.lists(inner, max_size=2)),
                     st.builds(lambda kvs: {"kvlistValue": {"values": [{"key": k, "value": v} for k, v in kvs]}},
                               st.lists(st.tuples(st.text(max_size=5), inner), max_size=2)))


deep_levels = st.sampled_from([0, 0, 0, 50, 150, 1_000])
attributes = st.lists(st.tuples(st.sampled_from(["k", "gen_ai.request.model", "gen_ai.operation.name",
                                                 "gen_ai.tool.name", "input.value", ""]), _any_value(2)), max_size=4)
span_specs = st.fixed_dictionaries({"trace": st.sampled_from(ID_KINDS), "span": st.sampled_from(ID_KINDS),
                                    "name": names, "start": times, "end": times, "end_before_start": st.booleans(),
                                    "attributes": attributes, "deep": deep_levels})
batches = st.lists(span_specs, min_size=1, max_size=5)


def _hex_id(kind: str, width: int, shared: str) -> str:
    n = next(_ids)
    return {"valid": shared, "short": f"{n:x}"[:width // 2], "long": f"{n:0{width + 4}x}", "empty": "",
            "non-hex": f"zz{n:0{width - 2}x}", "zero": "0" * width}[kind]


def _concrete(spec: dict, trace_id: str) -> dict:
    """The span's ids, times and values as plain Python: one trace per request, fresh valid span ids."""
    start, end = spec["start"], spec["end"]
    start = str(START) if start == "valid" else start
    end = str(START + 10**9) if end == "valid" else end
    if spec["end_before_start"] and spec["start"] == spec["end"] == "valid":
        start, end = end, start
    return {"trace": _hex_id(spec["trace"], 32, trace_id), "span": _hex_id(spec["span"], 16, f"{next(_ids):016x}"),
            "name": spec["name"], "start": start, "end": end, "attributes": spec["attributes"], "deep": spec["deep"]}


def _deep_json(levels: int) -> str:
    return '{"arrayValue": {"values": [' * levels + '{"stringValue": "bottom"}' + "]}}" * levels


def _otlp_json(spans: list[dict]) -> str:
    out = []
    for span in spans:
        item = {"traceId": span["trace"], "spanId": span["span"], "name": span["name"],
                "attributes": [{"key": k, "value": v} for k, v in span["attributes"]]}
        for field, value in (("startTimeUnixNano", span["start"]), ("endTimeUnixNano", span["end"])):
            if value is not None:
                item[field] = value
        if span["deep"]:  # written as text afterwards: json.dumps would recurse
            item["attributes"].append({"key": "deep", "value": "DEEP-MARK"})
        out.append(json.dumps(item).replace('"DEEP-MARK"', _deep_json(span["deep"])))
    body = '{"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "fuzz"}, "spans": [' \
        + ", ".join(out) + "]}]}]}"
    return body.replace(SURROGATE, "\\ud800")


def _pb_time(value: object) -> int:
    if isinstance(value, str) and value.isdigit() and int(value) < 2**64:
        return int(value)
    return 2**64 - 1 if value == str(2**70) else 0  # fixed64 cannot carry the rest: the nearest broken value


def _pb_value(target: common_pb2.AnyValue, value: object, depth: int = 0) -> None:
    if not isinstance(value, dict) or not value:
        target.string_value = repr(value)  # wrong JSON types have no protobuf form
        return
    kind, inner = next(iter(value.items()))
    if kind == "stringValue":
        target.string_value = str(inner)
    elif kind == "intValue":
        target.int_value = int(inner) if isinstance(inner, str) and inner.lstrip("-").isdigit() \
            and abs(int(inner)) < 2**63 else -1
    elif kind == "boolValue":
        target.bool_value = bool(inner)
    elif kind == "doubleValue":
        target.double_value = inner if isinstance(inner, float) else float("nan")
    elif kind == "bytesValue":
        target.bytes_value = str(inner).encode()
    elif kind == "arrayValue":
        target.array_value.SetInParent()
        for item in inner["values"]:
            _pb_value(target.array_value.values.add(), item, depth + 1)
    else:
        target.kvlist_value.SetInParent()
        for item in inner["values"]:
            _pb_value(target.kvlist_value.values.add(key=item["key"]).value, item["value"], depth + 1)


def _otlp_protobuf(spans: list[dict]) -> bytes:
    request = trace_service_pb2.ExportTraceServiceRequest()
    scope_spans = request.resource_spans.add().scope_spans.add()
    scope_spans.scope.name = "fuzz"
    for span in spans:
        ids = []
        for text, width in ((span["trace"], 16), (span["span"], 8)):
            try:  # a broken id goes as the bytes it would be: wrong length, or empty when not hex
                ids.append(bytes.fromhex(text) if len(text) % 2 == 0 else bytes.fromhex(text + "0"))
            except ValueError:
                ids.append(b"\x01" * (width - 1))
        item = scope_spans.spans.add(trace_id=ids[0], span_id=ids[1], name=span["name"].replace(SURROGATE, "s"),
                                     start_time_unix_nano=_pb_time(span["start"]),
                                     end_time_unix_nano=_pb_time(span["end"]))
        for key, value in span["attributes"]:
            _pb_value(item.attributes.add(key=key).value, json.loads(json.dumps(value).replace(SURROGATE, "s")))
        if span["deep"]:
            value = item.attributes.add(key="deep").value
            for _ in range(min(span["deep"], 150)):  # upb refuses past 100 levels: 150 is as bad as 1,000
                value = value.array_value.values.add()
            value.string_value = "bottom"
    return request.SerializeToString()


LANGFUSE_TIMES = st.sampled_from(["2024-01-01T00:00:00Z"] * 6 + ["2024-01-01T00:00:01.5+02:00", "abc", "", -1, 2**70,
                                  2**64 - 1, None, "9999-12-31T23:59:59Z"])
json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20), long_text,
                                     st.just(f"a\x00b{SURROGATE}")),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                           max_leaves=8)
langfuse_bodies = st.fixed_dictionaries(
    {"name": names, "startTime": LANGFUSE_TIMES, "endTime": LANGFUSE_TIMES},
    optional={"input": json_values, "output": json_values, "metadata": json_values,
              "model": st.one_of(st.text(max_size=10), long_text, st.integers()),
              "usage": st.one_of(st.fixed_dictionaries({"input": st.integers(), "output": st.sampled_from([1, "x"])}),
                                 st.text(max_size=5)),
              "parentObservationId": st.sampled_from(["", "missing-parent", 5])})
langfuse_events = st.fixed_dictionaries({
    "type": st.sampled_from(["trace-create"] * 2 + ["span-create", "generation-create"] * 4 + ["unknown-type", None]),
    "body": langfuse_bodies,
    "broken_body": st.sampled_from([False] * 8 + [None, "text", []]),
    "body_id": st.sampled_from(["fresh"] * 6 + ["empty", "number", "missing"]),
    "trace": st.sampled_from(["shared"] * 6 + ["empty", "number", "long"]),
    "deep": deep_levels,
})


def _langfuse_batch(events: list[dict]) -> tuple[str, list[str]]:
    trace_id = f"fuzz-{next(_ids)}"
    batch, ids = [], []
    for spec in events:
        event_id = f"e-{next(_ids)}"
        body = spec["body"] if spec["broken_body"] is False else spec["broken_body"]
        if isinstance(body, dict):
            body = dict(body)
            body_id = {"fresh": f"o-{next(_ids)}", "empty": "", "number": 7}.get(spec["body_id"])
            if body_id is not None:
                body["id"] = body_id
            body["traceId"] = {"shared": trace_id, "empty": "", "number": 12, "long": "t" * 1000}[spec["trace"]]
            if spec["deep"]:
                body["input"] = "DEEP-MARK"
        batch.append({"id": event_id, "type": spec["type"], "timestamp": "2024-01-01T00:00:00Z", "body": body})
        ids.append(event_id)
    text = json.dumps({"batch": batch})
    deep = max((spec["deep"] for spec in events), default=0)
    text = text.replace('"DEEP-MARK"', "[" * deep + "]" * deep)
    return text.replace(SURROGATE, "\\ud800"), ids


# --- checks --------------------------------------------------------------------------------------------------------


def _last_span_pk() -> int:
    return Span.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


def _read_back(client: Client, since_pk: int) -> None:
    """Every span the request stored reads back through the API, under its trace."""
    stored: dict[str, set[str]] = {}
    for trace_id, span_id in Span.objects.filter(pk__gt=since_pk).values_list("trace__trace_id", "span_id"):
        stored.setdefault(trace_id, set()).add(span_id)
    for trace_id, span_ids in stored.items():
        response = client.get(f"/api/v1/traces/{trace_id}/")
        assert response.status_code == 200, response.content[:300]
        assert span_ids <= {span["span_id"] for span in response.json()["spans"]}


def _send(client: Client, kind: str, path: str, body: str | bytes, content_type: str, **extra):
    started = time.perf_counter()
    response = client.post(path, data=body, content_type=content_type, **extra)
    TOTALS[kind] += 1
    TOTALS[kind + " s"] += time.perf_counter() - started
    if response.status_code >= 500:
        TOTALS["5xx"] += 1
    elif response.status_code >= 400:
        TOTALS[kind + " 4xx"] += 1
    assert response.status_code < 500, response.content[:500]
    return response


def _check_otlp(client: Client, kind: str, specs: list[dict]) -> None:
    trace_id = f"{next(_ids):032x}"
    spans = [_concrete(spec, trace_id) for spec in specs]
    json_kind = kind == "otlp-json"
    body = _otlp_json(spans) if json_kind else _otlp_protobuf(spans)
    before = _last_span_pk()
    response = _send(client, kind, "/v1/traces", body, "application/json" if json_kind else "application/x-protobuf")
    if response.status_code != 200:
        assert Span.objects.filter(pk__gt=before).count() == 0  # a refused request stores nothing
        return
    if json_kind:
        rejected = int(response.json().get("partialSuccess", {}).get("rejectedSpans", 0))
    else:
        rejected = trace_service_pb2.ExportTraceServiceResponse.FromString(response.content).partial_success \
            .rejected_spans
    accepted = Span.objects.filter(pk__gt=before).count()
    assert accepted + rejected == len(spans), response.content[:500]
    TOTALS[kind + " accepted"] += accepted
    TOTALS[kind + " rejected"] += rejected
    if TOTALS[kind] % READBACK_EVERY == 0:
        _read_back(client, before)


# --- the fuzz ------------------------------------------------------------------------------------------------------


@FUZZ
@given(specs=batches)
def _fuzz_otlp_json(client: Client, specs: list[dict]) -> None:
    _check_otlp(client, "otlp-json", specs)


@FUZZ
@given(specs=batches)
def _fuzz_otlp_protobuf(client: Client, specs: list[dict]) -> None:
    _check_otlp(client, "otlp-protobuf", specs)


@FUZZ
@given(events=st.lists(langfuse_events, min_size=1, max_size=5))
def _fuzz_langfuse(client: Client, auth: str, events: list[dict]) -> None:
    body, ids = _langfuse_batch(events)
    before = _last_span_pk()
    response = _send(client, "langfuse", "/api/public/ingestion", body, "application/json", HTTP_AUTHORIZATION=auth)
    if response.status_code != 207:
        return
    result = response.json()
    successes = [entry["id"] for entry in result["successes"]]
    failures = [entry["id"] for entry in result["errors"] if entry["status"] >= 400]
    assert sorted(successes + failures) == sorted(ids), result
    TOTALS["langfuse accepted"] += len(successes)
    TOTALS["langfuse rejected"] += len(failures)
    repaired = {entry["id"] for entry in result["errors"] if entry["status"] < 400}
    assert repaired <= set(successes), result
    if TOTALS["langfuse"] % READBACK_EVERY == 0:
        _read_back(client, before)


def test_fuzz_otlp_json(fuzz_client):
    _fuzz_otlp_json(fuzz_client)


def test_fuzz_otlp_protobuf(fuzz_client):
    _fuzz_otlp_protobuf(fuzz_client)


def test_fuzz_langfuse(fuzz_client, issued_key):
    auth = "Basic " + base64.b64encode(f"{issued_key.api_key.public_key}:{issued_key.secret}".encode()).decode()
    _fuzz_langfuse(fuzz_client, auth)


# --- repaired spans on the trace page, the API and the judges -------------------------------------------------------


def _trace_renders_and_is_judged(client: Client, project, owner, trace_id: str, span_count: int) -> str:
    api = client.get(f"/api/v1/traces/{trace_id}/")
    assert api.status_code == 200 and len(api.json()["spans"]) == span_count
    page_client = Client()
    page_client.force_login(owner)
    response = page_client.get(f"/p/{project.slug}/traces/{trace_id}/")
    assert response.status_code == 200
    page = response.content.decode()
    # The layout: rows indent by the .depth-N classes clear.css has (0-24), however deep the tree.
    assert max(int(level) for level in re.findall(r"depth-(\d+)", page)) <= 24
    out, err = StringIO(), StringIO()
    call_command("diagnose", "--project", project.name, "--trace-ids", trace_id, "--judges", "rules", "--inline",
                 stdout=out, stderr=err)
    run = DiagnosisRun.objects.get(project=project)
    assert run.status == DiagnosisRun.Status.SUCCEEDED and run.done_count == 1, out.getvalue() + err.getvalue()
    return page


def _otlp_span(trace_id: str, index: int, name: str, parent: int | None) -> dict:
    span = {"traceId": trace_id, "spanId": f"{index + 1:016x}", "name": name, "attributes": [],
            "startTimeUnixNano": str(START + index), "endTimeUnixNano": str(START + 10**9)}
    if parent is not None:
        span["parentSpanId"] = f"{parent + 1:016x}"
    return span


def test_a_100000_character_name_renders_and_is_judged(fuzz_client, project, owner, settings):
    settings.CLEAR_JUDGE_MODEL = ""
    trace_id = "a" * 32
    spans = [_otlp_span(trace_id, 0, "root", None), _otlp_span(trace_id, 1, "n" * 100_000, 0)]
    body = _otlp_json([])
    body = body.replace('"spans": []', '"spans": ' + json.dumps(spans))
    response = fuzz_client.post("/v1/traces", data=body, content_type="application/json")
    assert response.status_code == 200 and "truncated" in response.json()["partialSuccess"]["errorMessage"]
    page = _trace_renders_and_is_judged(fuzz_client, project, owner, trace_id, 2)
    assert "n" * 501 not in page  # the name is cut to 500 at ingestion, the column shows no more
    assert len(page) < 500_000


@pytest.mark.parametrize("shape", ["wide", "chain"])
def test_a_5000_span_trace_renders_and_is_judged(fuzz_client, project, owner, settings, shape):
    settings.CLEAR_JUDGE_MODEL = ""
    trace_id = "b" * 32
    # wide: a root, 49 agents under it, 100 tool calls under each; chain: each span the child of the one before
    # (5,000 levels: nothing may recurse once per level).
    def parent(i: int) -> int | None:
        if i == 0:
            return None
        return i - 1 if shape == "chain" else (0 if i < 50 else 1 + (i - 50) % 49)

    spans = [_otlp_span(trace_id, i, f"step {i}", parent(i)) for i in range(5_000)]
    body = _otlp_json([]).replace('"spans": []', '"spans": ' + json.dumps(spans))
    started = time.perf_counter()
    response = fuzz_client.post("/v1/traces", data=body, content_type="application/json")
    assert response.status_code == 200 and not response.json().get("partialSuccess", {}).get("rejectedSpans")
    page = _trace_renders_and_is_judged(fuzz_client, project, owner, trace_id, 5_000)
    assert len(page) < 5_000_000, len(page)
    print(f"5,000-span {shape} trace: ingested, rendered ({len(page):,} bytes) and judged in "
          f"{time.perf_counter() - started:.1f} s")


def test_langfuse_usage_count_past_bigint_is_not_a_5xx(fuzz_client, issued_key):
    auth = "Basic " + base64.b64encode(f"{issued_key.api_key.public_key}:{issued_key.secret}".encode()).decode()
    event = {"id": "e-1", "type": "generation-create", "timestamp": "2024-01-01T00:00:00Z",
             "body": {"id": "o-1", "traceId": "big-usage", "name": "llm", "startTime": "2024-01-01T00:00:00Z",
                      "usage": {"input": 2**63, "output": 1}}}
    response = fuzz_client.post("/api/public/ingestion", data=json.dumps({"batch": [event]}),
                                content_type="application/json", HTTP_AUTHORIZATION=auth)
    assert response.status_code < 500
