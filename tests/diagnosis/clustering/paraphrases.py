"""Hand-written paraphrases of distinct agent-failure problems, as step judges would word them.

Each problem has a node where it mostly happens, and paraphrases that share little wording, so clustering must
work on meaning. A few problems are deliberately close (two kinds of tool-argument mistakes, two kinds of
looping) to check they are kept apart.
"""

from __future__ import annotations

PROBLEMS: dict[str, tuple[str, list[str]]] = {
    "refund_policy_hallucination": ("responder", [
        "The agent invented a refund policy that does not exist in the knowledge base.",
        "It told the customer they could get a full refund within 90 days, which is not our policy.",
        "The response fabricates refund terms instead of quoting the documented return policy.",
        "Hallucinated refund conditions: the stated 90-day money-back guarantee is made up.",
        "The assistant made up the rules for returns and refunds rather than citing the policy article.",
        "Claims about refund eligibility are not grounded in any retrieved document.",
    ]),
    "order_lookup_skipped": ("planner", [
        "The agent never looked up the order before answering questions about its status.",
        "It answered about the shipment without calling the order lookup tool first.",
        "No call to get_order was made, so the delivery status it reported was a guess.",
        "The planner skipped retrieving the order record and went straight to a reply.",
        "The order status was stated without checking the order system.",
        "It should have fetched the order details with the lookup tool before responding.",
    ]),
    "wrong_date_format": ("tool_caller", [
        "The date argument was passed as 12/03/2024 although the API expects ISO 8601.",
        "The tool call used a day-month-year date string instead of the required YYYY-MM-DD format.",
        "Dates were sent to the booking API in the wrong format, causing a validation error.",
        "The start_date parameter is not in ISO format, so the search endpoint rejected it.",
        "It formatted the date as 'March 3rd' when the tool schema requires an ISO date.",
    ]),
    "search_loop": ("researcher", [
        "The agent repeated the same web search query five times without changing it.",
        "It kept issuing identical searches in a loop instead of refining the query.",
        "Redundant repeated calls to the search tool with the exact same keywords.",
        "The researcher is stuck in a loop, searching for the same phrase over and over.",
        "Same search was run again and again although the previous results were empty.",
    ]),
    "ignored_tool_error": ("tool_caller", [
        "The tool returned an error but the agent ignored it and reported success to the user.",
        "It did not notice that the payment API call failed and continued as if it had worked.",
        "An exception from the tool was swallowed; the agent claimed the update was saved.",
        "The failed API response (HTTP 500) was not handled, and the agent told the user all was done.",
        "Error output from the inventory tool was disregarded and the step proceeded anyway.",
    ]),
    "no_escalation": ("responder", [
        "The customer explicitly asked to speak to a human but the agent did not escalate.",
        "It failed to hand the conversation over to a human operator despite the user's request.",
        "The request for a human agent was ignored; no escalation ticket was created.",
        "The agent kept answering on its own instead of transferring the angry customer to support staff.",
        "Escalation to a live representative should have happened when the user demanded a person.",
    ]),
    "leaked_internal_notes": ("responder", [
        "The reply exposed internal notes meant only for staff to the customer.",
        "It pasted the internal agent comments, including the fraud flag, into the customer message.",
        "Confidential internal information from the CRM was revealed in the answer.",
        "The response leaks private staff annotations that must never be shown to users.",
    ]),
    "wrong_language": ("responder", [
        "The user wrote in Spanish but the agent replied in English.",
        "The answer is not in the customer's language; they asked in German and got English.",
        "It ignored the language of the question and responded in a different language.",
        "The reply should have been in French, matching the user's message, but it was in English.",
    ]),
}

OUTLIERS: list[tuple[str, str]] = [
    ("responder", "The closing signature contains a typo in the company name."),
    ("planner", "Latency of this step was over forty seconds because of a slow model."),
    ("researcher", "The cited Wikipedia article about penguins was irrelevant to the billing question."),
    ("tool_caller", "The JSON payload had trailing commas that the parser tolerated."),
]
