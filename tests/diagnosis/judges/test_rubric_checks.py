from diagnosis.judges.rubric_checks import rubric_check
from diagnosis.judges.rubric_config import rubric_config_validate
from diagnosis.services.evidence import evidence_verify
from tests.diagnosis.support import span, view


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
    # Titled by what went wrong, where, then the rubric it breaks (the rubric's name states the expected behaviour).
    assert forbidden.issues[0].title == "`writer` writes `item A` (violates \u201cregex\u201d)"
    assert missing.issues[0].title == "`writer` writes no text the rubric requires (violates \u201cregex\u201d)"
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
    assert result.issues[0].title == "`writer` drops the `sku` that `order_lookup` returned (violates \u201ccoverage\u201d)"
    ok = _check(_rubric("coverage", {"path": "$.refund_id", "sources": {"tool": "refund_lookup"},
                                     "target": {"node": "writer"}}))
    assert ok.verdict == "pass"
    assert _check(_rubric("coverage", {"path": "$.order_id", "sources": {"kind": "TOOL"},
                                       "target": {"node": "nobody"}})).status == "skipped"
