"""rule.unnamed_write_choice (diagnosis/judges/rules/choices.py) on hand-written chat-agent traces: a write that
passes one of several options a tool reply offered, never named to or by the user, is flagged and blamed on the turn
that issued it, with evidence that verifies; a choice the conversation named, an only option and a run without a
user in the loop are not."""

import json

from diagnosis.judges.rules import RULES
from diagnosis.judges.rules.choices import rule_unnamed_write_choice
from tests.diagnosis.judges.test_rules_writes import CORRECT, _failing, _flagged, _silent, call, turn
from tests.diagnosis.support import view

PROFILE = {"user": "ana_ruiz", "payment_methods": {"card_1111": {"kind": "card", "last_four": "1111"},
                                                   "gift_2222": {"kind": "gift card", "balance": 80}}}


def refund_run(*, offered: dict = PROFILE, agent_says: str = "I can refund booking BK-4471. Shall I go ahead?",
               payment: str = "gift_2222", confirm: str = "Yes, please."):
    """The user asks for a refund; the agent reads the profile (its payment methods), asks, then refunds to
    `payment`."""
    arguments = {"booking_id": "BK-4471", "payment_id": payment}
    return view(
        turn("l1", 1, [("user", "Hi, I'm ana_ruiz, please refund booking BK-4471.")],
             call=("get_user", {"user": "ana_ruiz"})),
        call("t1", 1.5, "get_user", {"user": "ana_ruiz"}, offered),
        turn("l2", 2, [("tool", json.dumps(offered))], text=agent_says),
        turn("l3", 3, [("user", confirm)], call=("refund_booking", arguments)),
        call("t2", 3.5, "refund_booking", arguments, {"booking_id": "BK-4471", "status": "refunded"}),
        turn("l4", 4, [("tool", json.dumps({"status": "refunded"}))], text="Done: BK-4471 is refunded."),
        goal="Hi, I'm ana_ruiz, please refund booking BK-4471.")


def test_unnamed_write_choice_is_registered_and_silent_on_a_correct_run():
    _silent(RULES["rule.unnamed_write_choice"], CORRECT)


def test_unnamed_write_choice_flags_an_option_the_user_never_heard_of_and_blames_the_turn():
    trace = refund_run()
    result = _flagged(rule_unnamed_write_choice, trace)
    assert result.target_span_id == "l3" and result.details["call_span_id"] == "t2"
    assert result.details["values"] == ["gift_2222"] and result.details["read_span_id"] == "t1"
    assert {e.span_id for e in result.issues[0].evidence} == {"l3", "t1", "t2"}
    assert "card_1111" in result.issues[0].detail


def test_unnamed_write_choice_is_silent_when_the_conversation_named_the_choice():
    # Named by the agent (case and separators folded), or asked for by the user: the user could agree to it.
    _silent(rule_unnamed_write_choice, refund_run(agent_says="I can refund BK-4471 to your Gift 2222. Go ahead?"))
    _silent(rule_unnamed_write_choice, refund_run(confirm="Yes, refund it to gift_2222 please."))


def test_unnamed_write_choice_is_silent_on_an_only_option_and_without_a_user_in_the_loop():
    only = {"user": "ana_ruiz", "payment_methods": {"gift_2222": {"kind": "gift card", "balance": 80}}}
    _silent(rule_unnamed_write_choice, refund_run(offered=only))
    autonomous = refund_run()
    autonomous.spans = [s for s in autonomous.spans if s.span_id not in ("l2", "l3")]
    results = rule_unnamed_write_choice(autonomous)
    assert not _failing(results) and results[0].status == "skipped"


def test_unnamed_write_choice_reads_options_from_a_list_of_records_and_skips_dates():
    flights = [{"flight": "FL-100", "date": "2024-05-20"}, {"flight": "FL-200", "date": "2024-05-21"}]
    trace = view(
        turn("l1", 1, [("user", "Move my trip BK-4471 to the 20th, please.")],
             call=("search_flights", {"day": "20th"})),
        call("t1", 1.5, "search_flights", {"day": "20th"}, flights),
        turn("l2", 2, [("tool", json.dumps(flights))], text="There are two flights that day. Shall I move you?"),
        turn("l3", 3, [("user", "Yes.")], call=("update_trip", {"trip": "BK-4471", "flight": "FL-200",
                                                                "date": "2024-05-21"})),
        call("t2", 3.5, "update_trip", {"trip": "BK-4471", "flight": "FL-200", "date": "2024-05-21"}, {"ok": True}),
        goal="Move my trip BK-4471 to the 20th, please.")
    result = _flagged(rule_unnamed_write_choice, trace)
    assert result.details["values"] == ["FL-200"]


def test_an_unnamed_choice_and_an_ungrounded_value_share_one_title_so_one_insight():
    from diagnosis.judges.rules.writes import rule_ungrounded_write_argument

    ungrounded = _flagged(rule_ungrounded_write_argument, refund_run(payment="gift_9999"))
    unnamed = _flagged(rule_unnamed_write_choice, refund_run())
    assert ungrounded.issues[0].title == unnamed.issues[0].title
    assert "offered" in unnamed.issues[0].detail and "offered" not in ungrounded.issues[0].detail
