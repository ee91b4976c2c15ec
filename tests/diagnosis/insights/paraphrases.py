"""Six failure patterns of the support desk as an LLM step judge would word them: several paraphrases each that
share little wording, so only clustering on meaning (not the judge's name or a fixed title) groups them."""

from __future__ import annotations

# problem -> (node of the judged LLM step, paraphrases)
PROBLEMS: dict[str, tuple[str, list[str]]] = {
    "ignored_request": ("planner", [
        "The planner dropped the second question of the ticket and planned only for the first.",
        "Only one of the two requests made it into the plan; the other one was left out.",
        "The plan covers just the first request and skips the second one.",
        "A second request in the ticket is missing from the plan.",
        "The planner left one of the requests out of its plan.",
    ]),
    "bad_routing": ("planner", [
        "The request was routed to the wrong worker.",
        "It assigned the task to a desk that does not handle this kind of request.",
        "Wrong worker chosen: the ticket went to a team that cannot act on it.",
        "The planner handed the refund to a worker that does not own refunds.",
        "Routing mistake: the task was given to the wrong specialist.",
    ]),
    "lost_findings": ("mediator", [
        "The brief for the writer leaves out one of the results the workers returned.",
        "A fact found by a worker, the second tracking number, never reaches the writer's brief.",
        "The mediator's summary is incomplete: one worker finding was lost while merging the results.",
        "Not every tool result made it into the merged brief; one of them disappeared.",
        "It merged the worker outputs but silently discarded one of them.",
    ]),
    "invented_policy": ("writer", [
        "The reply invents a warranty policy that exists in no knowledge-base article.",
        "It made up the terms of the guarantee instead of quoting the documented policy.",
        "The answer fabricates policy details that no tool returned.",
        "Hallucinated policy: the stated 90-day guarantee is made up.",
        "The writer cites policy rules that are not grounded in any retrieved document.",
    ]),
    "wrong_language": ("writer", [
        "The customer wrote in Spanish but the reply is in English.",
        "The answer is not in the customer's language; they asked in German and got English.",
        "It ignored the language of the ticket and responded in a different language.",
        "The reply should have been in French, matching the user's message, but it was in English.",
    ]),
    "wrong_argument": ("billing_worker", [
        "The tool call passed the order number where the invoice id was required.",
        "It looked up the invoice with an order id, so the billing system could not find it.",
        "The invoice lookup was called with an order number instead of an invoice id.",
        "The worker confused the two identifiers and queried billing with the order number.",
        "An order reference was sent as the invoice id parameter of the lookup.",
    ]),
}

PRAISE = [
    "The step correctly used the context it was given.",
    "The output is well structured.",
    "It successfully produced valid JSON.",
]
