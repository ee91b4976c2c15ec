"""Issue 24 for scores: a score's free text (name, comment, string value, source, id) with NUL, lone surrogates or
past its column never fails the other events of its batch. Each case answered 500 for the whole batch before (NUL:
Postgres refuses it; lone surrogate: UnicodeEncodeError), and is now repaired (201 entry saying so) or rejected on
its own (400 entry)."""

import base64
import json

import pytest
from django.test import Client

from traces.models import Score, Span

pytestmark = pytest.mark.django_db

TRACE = "lf-scored-trace"


def _auth(key) -> str:
    return "Basic " + base64.b64encode(f"{key.api_key.public_key}:{key.secret}".encode()).decode()


def _ingest(key, events: list[dict]):
    # json.dumps writes NUL and lone surrogates as \u escapes, as the SDKs do.
    return Client().post("/api/public/ingestion", data=json.dumps({"batch": events}),
                         content_type="application/json", HTTP_AUTHORIZATION=_auth(key))


def _score(event_id: str, **body) -> dict:
    return {"id": event_id, "type": "score-create", "timestamp": "2024-01-01T00:00:00Z",
            "body": {"traceId": TRACE, "value": 1, **body}}


def _span_event() -> dict:
    return {"id": "e-span", "type": "span-create", "timestamp": "2024-01-01T00:00:00Z",
            "body": {"id": "obs-good", "traceId": TRACE, "name": "good", "startTime": "2024-01-01T00:00:00Z"}}


@pytest.mark.parametrize("body, stored, reason", [
    ({"name": "nul\x00name", "comment": "co\x00mment"}, {"name": "nulname", "comment": "comment"}, "nul_removed"),
    ({"name": "cut \ud800", "comment": "\udfff"}, {"name": "cut \ufffd", "comment": "\ufffd"},
     "lone_surrogate_replaced"),
    ({"name": "n" * 1000}, {"name": "n" * 200}, "truncated"),
    ({"name": "label", "value": "a\x00b\ud800", "dataType": "CATEGORICAL"}, {"string_value": "ab\ufffd"},
     "nul_removed"),
    ({"name": "src", "source": "s\x00" * 100}, {"source": "s" * 40}, "truncated"),
], ids=["nul", "lone-surrogate", "long-name", "string-value", "long-source"])
def test_score_free_text_is_repaired_and_the_batch_kept(issued_key, body, stored, reason):
    response = _ingest(issued_key, [_span_event(), _score("e-good", name="good", comment="fine"),
                                    _score("e-bad", id="score-bad", **body)])
    assert response.status_code == 207
    errors = response.json()["errors"]
    assert [(e["id"], e["status"]) for e in errors] == [("e-bad", 201)]
    assert "repairs" in errors[0]["message"] and reason.replace("_", " ") in errors[0]["message"]
    assert Score.objects.get(name="good").comment == "fine"
    bad = Score.objects.get(external_id="score-bad")
    assert {name: getattr(bad, name) for name in stored} == stored
    assert Span.objects.filter(name="good").exists()


@pytest.mark.parametrize("body, words", [
    ({"id": "score\x00id", "name": "s"}, "body.id"),
    ({"id": "s" * 201, "name": "s"}, "body.id"),
    ({"traceId": "trace-\ud800", "name": "s"}, "body.traceId"),
    ({"observationId": "obs-\ud800", "name": "s"}, "body.observationId"),
    ({"name": "\x00"}, "body.name"),
    ({"name": "s", "dataType": "TEXT\x00"}, "body.dataType"),
], ids=["nul-in-id", "long-id", "surrogate-in-trace-id", "surrogate-in-observation-id", "only-nul-name",
        "nul-in-data-type"])
def test_score_that_cannot_be_kept_is_rejected_on_its_own(issued_key, body, words):
    response = _ingest(issued_key, [_span_event(), _score("e-good", name="good"), _score("e-bad", **body)])
    assert response.status_code == 207
    errors = response.json()["errors"]
    assert [(e["id"], e["status"]) for e in errors] == [("e-bad", 400)]
    assert words in errors[0]["message"]
    assert list(Score.objects.values_list("name", flat=True)) == ["good"]
    assert Span.objects.filter(name="good").exists()


def test_observation_with_a_lone_surrogate_in_its_id_is_rejected_on_its_own(issued_key):
    bad = {**_span_event(), "id": "e-bad"}
    bad["body"] = {**bad["body"], "id": "obs-\ud800", "name": "bad"}
    response = _ingest(issued_key, [_span_event(), bad])
    assert response.status_code == 207
    errors = response.json()["errors"]
    assert [(e["id"], e["status"]) for e in errors] == [("e-bad", 400)] and "body.id" in errors[0]["message"]
    assert list(Span.objects.exclude(name="trace").values_list("name", flat=True)) == ["good"]


def test_scores_api_repairs_free_text(issued_key):
    client = Client()
    single = client.post("/api/public/scores", data=json.dumps({"traceId": TRACE, "name": "a\x00", "value": 1,
                                                                 "comment": "c\ud800"}),
                         content_type="application/json", HTTP_AUTHORIZATION=_auth(issued_key))
    assert single.status_code == 200
    many = client.post("/api/public/scores", data=json.dumps([{"traceId": TRACE, "name": "b", "value": 1},
                                                              {"traceId": TRACE, "name": "c\x00", "value": 0}]),
                       content_type="application/json", HTTP_AUTHORIZATION=_auth(issued_key))
    assert many.status_code in (202, 207)
    assert sorted(Score.objects.values_list("name", "comment")) == [("a", "c\ufffd"), ("b", ""), ("c", "")]


def test_scores_api_body_nested_too_deep_is_a_400_not_a_500(issued_key):
    body = '{"traceId": "t", "name": "deep", "value": 1, "metadata": ' + "[" * 10_000 + "]" * 10_000 + "}"
    response = Client().post("/api/public/scores", data=body, content_type="application/json",
                             HTTP_AUTHORIZATION=_auth(issued_key))
    assert response.status_code in (200, 400)


@pytest.mark.parametrize("digits", [400, 5000])
def test_a_score_value_too_large_for_a_float_is_a_400_naming_the_field(issued_key, digits):
    # 400 digits overflowed float() (OverflowError, a 500); past 4,300 digits json's int() refuses it (ValueError).
    huge = "9" * digits
    client = Client()
    single = client.post("/api/public/scores", data=f'{{"traceId": "{TRACE}", "name": "big", "value": {huge}}}',
                         content_type="application/json", HTTP_AUTHORIZATION=_auth(issued_key))
    assert single.status_code == 400, single.content
    assert ("body.value" if digits == 400 else "JSON") in single.json()["message"]
    many = client.post("/api/public/scores", data=f'[{{"traceId": "{TRACE}", "name": "ok", "value": 1}}, '
                       f'{{"traceId": "{TRACE}", "name": "big", "value": -{huge}}}]',
                       content_type="application/json", HTTP_AUTHORIZATION=_auth(issued_key))
    if digits == 400:
        assert many.status_code == 207 and "body.value" in many.json()["errors"][0]["message"], many.content
        assert list(Score.objects.values_list("name", flat=True)) == ["ok"]
    else:
        assert many.status_code == 400 and not Score.objects.exists(), many.content
    batch = json.dumps({"batch": [_score("e-big", name="big", value=0)]}).replace('"value": 0', f'"value": {huge}')
    response = Client().post("/api/public/ingestion", data=batch, content_type="application/json",
                             HTTP_AUTHORIZATION=_auth(issued_key))
    if digits == 400:
        assert response.status_code == 207 and "body.value" in response.json()["errors"][0]["message"]
    else:
        assert response.status_code == 400, response.content
