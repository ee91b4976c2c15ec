import pytest

from diagnosis.errors import RubricInvalidError
from diagnosis.judges.jsonpath import JsonPathError, jsonpath_compile, jsonpath_values
from diagnosis.judges.rubric_checks import rubric_check
from diagnosis.judges.rubric_config import rubric_config_validate
from diagnosis.models import Rubric
from diagnosis.selectors import rubric_get, rubric_list
from diagnosis.services import rubric_create, rubric_delete, rubric_update
from diagnosis.services.evidence import evidence_verify
from tests.diagnosis.support import span, view


@pytest.mark.parametrize("path, expected", [
    ("$.a.b", [1]),
    ("$.list[*].id", ["x", "y"]),
    ("$..id", ["x", "y", "z"]),
    ("$.list[1]", [{"id": "y"}]),
    ("$.list[-1].id", ["y"]),
    ("$['a']['b']", [1]),
    ("$.a.*", [1]),
    ("$.missing.b", []),
])
def test_jsonpath_subset(path, expected):
    document = {"a": {"b": 1}, "list": [{"id": "x"}, {"id": "y"}], "deep": {"more": [{"id": "z"}]}}
    assert jsonpath_values(path, document) == expected


@pytest.mark.parametrize("path, message", [
    ("a.b", "must start with '$'"),
    ("$.", "expected a key name"),
    ("$[?(@.x > 1)]", "filters, slices and unions"),
    ("$[0:2]", "filters, slices and unions"),
    ("$.a[", "never closed"),
])
def test_jsonpath_refuses_what_it_cannot_read(path, message):
    with pytest.raises(JsonPathError, match=message.replace("$", r"\$").replace("(", r"\(")):
        jsonpath_compile(path)


@pytest.mark.parametrize("kind, config, message", [
    ("nope", {}, "Unknown rubric kind 'nope'"),
    ("regex", {"pattern": "(unclosed"}, "not a valid regular expression"),
    ("regex", {"pattern": "x", "expect": "maybe"}, "expect must be one of present, absent"),
    ("regex", {"pattern": "x", "spans": {"agent": "a"}}, "unknown keys ['agent']"),
    ("jsonpath", {"path": "$[?(@.a)]"}, "path: JSONPath"),
    ("jsonpath", {"path": "$.a", "assert": "equals"}, 'needs "value"'),
    ("tool_order", {"then": "b"}, "first must be a non-empty string"),
    ("tool_never", {"tool": []}, "tool must be a non-empty string"),
    ("coverage", {"path": "$.id", "target": {"node": "w"}}, "sources is required"),
    ("coverage", {"path": "$.id", "sources": {"kind": "TOOL"}, "target": {}}, "target must select some spans"),
    ("llm", {"criterion": " "}, 'needs "criterion"'),
    ("tool_never", {"tool": "x", "extra": 1}, "Unknown keys ['extra']"),
    ("tool_never", {"tool": "x", "when": {"goal_regex": "["}}, "when.goal_regex"),
])
def test_rubric_create_refuses_bad_configs_with_a_clear_message(project, kind, config, message):
    with pytest.raises(RubricInvalidError) as caught:
        rubric_create(project=project, name="r", kind=kind, config=config)
    assert message in caught.value.message and caught.value.message.startswith("Rubric 'r': ")
    assert not Rubric.objects.exists()


def test_rubric_create_update_delete(project, outsider_project):
    rubric = rubric_create(project=project, name="answer cites a refund id", kind="regex",
                           config={"pattern": r"RF-\d+"}, node="writer")
    assert rubric.config == {"pattern": r"RF-\d+", "expect": "present", "field": "output", "spans": {},
                             "ignore_case": False}
    with pytest.raises(RubricInvalidError, match="already has a rubric named"):
        rubric_create(project=project, name="answer cites a refund id", kind="tool_never", config={"tool": "x"})
    rubric_create(project=outsider_project, name="answer cites a refund id", kind="tool_never", config={"tool": "x"})
    rubric_update(rubric=rubric, config={"pattern": r"RF-\d{4}", "expect": "present"}, enabled=False, node=None)
    rubric.refresh_from_db()
    assert rubric.config["pattern"] == r"RF-\d{4}" and not rubric.enabled and rubric.node == ""
    with pytest.raises(RubricInvalidError, match="first must be"):
        rubric_update(rubric=rubric, kind="tool_order")  # the old config does not fit the new kind
    assert list(rubric_list(project=project)) == [rubric]
    assert rubric_get(project=project, rubric_id=rubric.pk) == rubric
    rubric_delete(rubric=rubric)
    assert not rubric_list(project=project).exists()


def _rubric(kind, config, node=""):
    return {"id": 7, "name": kind, "kind": kind, "node": node, "config": rubric_config_validate(kind, config)}


def _trace():
    return view(
        span("p", kind="LLM", node="planner", output='{"intent": "refund", "worker": "orders"}', at=1),
        span("o", kind="TOOL", node="orders", tool_name="order_lookup", input={"order_id": "O-1"},
             output={"order_id": "O-1", "items": [{"sku": "A"}, {"sku": "B"}]}, at=2),
        span("r", kind="TOOL", node="billing", tool_name="refund_lookup", input={"order_id": "O-1"},
             output={"refund_id": "RF-9", "order_id": "O-1"}, at=3),
        span("w", kind="LLM", node="writer", input="brief: O-1, RF-9, A, B", output="Your refund RF-9 for O-1 is on "
             "its way (item A).", at=4),
        goal="I want a refund for order O-1.",
    )


def _check(rubric, trace=None):
    trace = trace or _trace()
    result = rubric_check(rubric, trace)
    assert result.judge == "rubric.7"
    assert evidence_verify(trace=trace, results=[result]) == 0
    return result


def test_regex_rubrics():
    assert _check(_rubric("regex", {"pattern": r"RF-\d+"}, node="writer")).verdict == "pass"
    missing = _check(_rubric("regex", {"pattern": r"business days"}, node="writer"))
    assert missing.verdict == "fail" and missing.target_span_id == "w"
    assert missing.issues[0].evidence[0].quote.startswith("Your refund RF-9")
    leak = _check(_rubric("regex", {"pattern": r"refund_lookup|rate_limited", "expect": "absent",
                                    "spans": {"kind": "LLM"}}))
    assert leak.verdict == "pass"
    forbidden = _check(_rubric("regex", {"pattern": "ITEM a", "expect": "absent", "ignore_case": True,
                                         "spans": {"node": "writer"}}))
    assert forbidden.verdict == "fail" and forbidden.issues[0].evidence[0].quote == "item A"
    # Titled by the violation, then the rubric it breaks (the rubric's name states the expected behaviour).
    assert forbidden.issues[0].title.startswith("Forbidden text in ")
    assert forbidden.issues[0].title.endswith(", violating \u201cregex\u201d")
    assert missing.issues[0].title.startswith("Expected text is missing from ")
    # Without a node or selector the root span (the final answer) is checked.
    assert _check(_rubric("regex", {"pattern": "Done"})).verdict == "pass"


def test_jsonpath_rubrics():
    exists = _check(_rubric("jsonpath", {"path": "$.refund_id", "spans": {"tool": "refund_lookup"}}))
    assert exists.verdict == "pass"
    wrong = _check(_rubric("jsonpath", {"path": "$.worker", "assert": "equals", "value": "billing",
                                        "spans": {"node": "planner"}}))
    assert wrong.verdict == "fail" and wrong.target_span_id == "p" and wrong.issues[0].evidence[0].quote == "orders"
    skus = _check(_rubric("jsonpath", {"path": "$.items[*].sku", "assert": "in", "value": ["A"],
                                       "spans": {"tool": "order_lookup"}}))
    assert skus.verdict == "fail" and [i.evidence[0].quote for i in skus.issues] == ["B"]
    matches = _check(_rubric("jsonpath", {"path": "$..order_id", "assert": "matches", "pattern": r"^O-\d+$",
                                          "spans": {"kind": "TOOL"}}))
    assert matches.verdict == "pass"
    none = _check(_rubric("jsonpath", {"path": "$.x", "spans": {"node": "nobody"}}))
    assert none.status == "skipped" and none.verdict is None


def test_tool_order_and_tool_never_rubrics():
    assert _check(_rubric("tool_order", {"first": "order_lookup", "then": "refund_lookup"})).verdict == "pass"
    wrong = _check(_rubric("tool_order", {"first": "refund_lookup", "then": "order_lookup"}))
    assert wrong.verdict == "fail" and wrong.target_span_id == "o"
    assert [e.span_id for e in wrong.issues[0].evidence] == ["o", "r"]
    assert _check(_rubric("tool_order", {"first": "create_refund", "then": "send_email"})).status == "skipped"
    required = _check(_rubric("tool_order", {"first": "create_refund"}))
    assert required.verdict == "fail" and required.target_span_id is None
    assert "order_lookup, refund_lookup" in required.issues[0].detail
    never = _check(_rubric("tool_never", {"tool": ["order_lookup", "delete_account"]}))
    assert never.verdict == "fail" and never.target_span_id == "o"
    assert never.issues[0].evidence[0].quote == '{"order_id": "O-1"}'
    scoped = _check(_rubric("tool_never", {"tool": "order_lookup"}, node="billing"))
    assert scoped.verdict == "pass"
    unrelated = _check(_rubric("tool_never", {"tool": "order_lookup", "when": {"goal_regex": "password"}}))
    assert unrelated.status == "skipped"


def test_coverage_rubric_quotes_the_dropped_value_from_its_source():
    rubric = _rubric("coverage", {"path": ["$.order_id", "$.refund_id", "$.items[*].sku"],
                                  "sources": {"kind": "TOOL"}, "target": {"node": "writer"}})
    result = _check(rubric)
    assert result.verdict == "fail" and result.target_span_id == "w"
    assert [(i.evidence[0].span_id, i.evidence[0].quote) for i in result.issues] == [("o", "B")]
    assert "B from order_lookup is missing from llm w (writer)" == result.issues[0].title
    ok = _check(_rubric("coverage", {"path": "$.refund_id", "sources": {"tool": "refund_lookup"},
                                     "target": {"node": "writer"}}))
    assert ok.verdict == "pass"
    assert _check(_rubric("coverage", {"path": "$.order_id", "sources": {"kind": "TOOL"},
                                       "target": {"node": "nobody"}})).status == "skipped"
