from diagnosis.clustering.statements import normalize_text, split_critique, statements_from_critique


def test_split_critique_sentences_praise_and_boilerplate():
    text = (
        "Critique: The agent correctly greeted the user. However, it never checked the order status "
        "(e.g. via lookup_order), and it invented a refund policy.\n"
        "- The tool call passed 3.5 as the page size, which is invalid.\n"
        "- Score: 0.2\n"
        "Overall, the response is fine.\n"
        "The agent correctly parsed the date, but it used the wrong timezone for the booking.\n"
        "Bad.\n"
        "Good job overall, the answer was well structured and helpful!"
    )
    assert split_critique(text) == [
        "It never checked the order status (e.g. via lookup_order), and it invented a refund policy.",
        "The tool call passed 3.5 as the page size, which is invalid.",
        "It used the wrong timezone for the booking.",
    ]


def test_split_critique_empty_and_repeats():
    assert split_critique("") == []
    assert split_critique("   \n ") == []
    assert split_critique("The agent looped on search. The agent looped on search!") == ["The agent looped on search."]


def test_statements_from_critique_carries_provenance():
    out = statements_from_critique("It skipped the lookup. It replied in English to a Spanish question.",
                                   id_prefix="fb7", node="responder", trace_id="t1", span_id="sp", severity="high",
                                   source="llm.step")
    assert [s.id for s in out] == ["fb7:0", "fb7:1"]
    assert all(s.node == "responder" and s.trace_id == "t1" and s.span_id == "sp" and s.severity == "high"
               and s.source == "llm.step" for s in out)


def test_normalize_text_ignores_case_quotes_numbers_and_trailing_punctuation():
    a = normalize_text('Called "search" 3 times for order #4821A.')
    assert a == normalize_text("called search 12 times for order #77b")
    assert normalize_text("Wrong  date format!") == "wrong date format"


def test_canonical_text_is_what_gets_embedded():
    from diagnosis.clustering.statements import canonical_text

    assert canonical_text("Here, the agent invented a policy, so the task failed") == "The agent invented a policy."
    assert canonical_text("In this step, lookup_inventory returned an error, causing an extra round trip.") == (
        "X returned an error.")
    assert canonical_text("It called getOrder and `db.save()` twice") == "It called X and X twice."
    # a clause that states the problem itself is kept
    assert canonical_text("The page size was 3.5, which is invalid.") == "The page size was 3.5, which is invalid."
    # too little left without the clause: kept whole
    assert canonical_text("It failed, so it retried.") == "It failed, so it retried."
    a, b = "the agent never verified the order id", "The agent never verified the order id."
    assert canonical_text(a) == canonical_text(b)
