"""The labelled statement generator for the clustering benchmark.

A statement = optional lead-in + a paraphrase pattern of one failure category with its slots filled + optional
consequence clause. The category is the label. Variety comes from four independent sources:
  * 14 categories x 5-6 paraphrase patterns each (different wording and sentence structure for one problem),
  * slot fillers (tool names, entities, fields, languages, formats, numbers),
  * 5 lead-ins ("", "In this step, ", ...), 16 context phrases (" during checkout", ...; 4 of them empty) and 6
    consequence clauses ("", ", so the task failed", ...),
  * numbers (counts, ids, status codes), which vary the text but not its normalised key (`normalize_text`
    maps every token with a digit to "0"), like real judge output that repeats a problem with other ids.
Categories have Zipf-like frequencies (the most common is ~9x the rarest), each has a home node (75% of its
statements) and 2% of statements are unlabelled noise (one-off sentences from standard-library docstrings,
label -1) that should stay out of the categories' clusters. Identifier slots (tools, fields) and consequence
clauses are masked/stripped before embedding
(`canonical_text`), so the texts the model actually sees are far fewer than the distinct texts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

TOOLS = ["search_orders", "get_customer", "refund_payment", "update_ticket", "send_email", "lookup_inventory",
         "create_booking", "web_search"]
ENTITIES = ["order", "invoice", "booking", "subscription", "shipment", "support ticket"]
FIELDS = ["customer_id", "order_id", "start_date", "amount", "email", "currency"]
LANGS = [("Spanish", "English"), ("German", "English"), ("French", "English"), ("Italian", "Spanish"),
         ("Portuguese", "English")]
FORMATS = ["DD/MM/YYYY", "MM-DD-YY", "a written-out month name", "a Unix timestamp"]
NODES = ["planner", "responder", "tool_caller", "researcher", "verifier"]

# Natural-language context (not masked like identifiers): adds real embedding variety, as real critiques do.
CONTEXTS = ["", "", "", "", " during checkout", " for a returning customer", " in the second turn",
            " after the refund request", " while handling a complaint", " on a mobile session",
            " for a premium account", " in a conversation about a damaged parcel",
            " when the customer was already upset", " late in the dialogue",
            " for a business client", " right after the greeting"]
LEADS = ["", "", "In this step, ", "Here, ", "Notably, "]
TAILS = ["", "", ", so the task failed", ", which confused the customer", " and the final answer was wrong",
         ", causing an extra round trip"]

CATEGORIES: dict[str, tuple[str, list[str]]] = {
    "hallucinated_policy": ("responder", [
        "the agent invented a {entity} cancellation policy that is not in the knowledge base",
        "the reply states a refund window of {n} days that no document supports",
        "the assistant made up the terms for changing a {entity} instead of quoting the policy",
        "policy details about the {entity} were fabricated rather than retrieved",
        "it cited a nonexistent rule allowing free {entity} changes within {n} hours",
    ]),
    "skipped_lookup": ("planner", [
        "the agent answered about the {entity} without calling {tool} first",
        "no lookup of the {entity} was done before replying about its status",
        "the planner skipped retrieving the {entity} record and guessed its state",
        "it should have fetched the {entity} with {tool} before responding",
        "the {entity} status was reported without checking the system of record",
    ]),
    "bad_date_format": ("tool_caller", [
        "the {field} argument to {tool} was given as {fmt} instead of ISO 8601",
        "{tool} received a date in {fmt}, but the schema requires YYYY-MM-DD",
        "dates were passed to {tool} in the wrong format ({fmt})",
        "the tool call used {fmt} for a date parameter and was rejected",
        "a date formatted as {fmt} broke the {tool} request",
    ]),
    "search_loop": ("researcher", [
        "the agent repeated the same query to {tool} {n} times without changing it",
        "it kept issuing identical searches in a loop instead of refining the query",
        "{tool} was called again and again with the exact same keywords",
        "the researcher got stuck re-running one search {n} times",
        "the same lookup was repeated even though the previous results were empty",
    ]),
    "ignored_tool_error": ("tool_caller", [
        "{tool} returned an error but the agent reported success anyway",
        "the failed {tool} call (HTTP {n}) was ignored and the agent continued as if it worked",
        "an exception from {tool} was swallowed and the {entity} was claimed to be updated",
        "the agent did not notice that {tool} failed and told the user everything was done",
        "error output from {tool} was disregarded before moving on",
    ]),
    "no_escalation": ("responder", [
        "the customer asked for a human but the agent did not escalate",
        "the request to speak to a person was ignored and no handoff happened",
        "it failed to transfer the frustrated customer to a human operator",
        "the agent kept answering alone although the user demanded a live representative",
        "escalation to support staff should have been triggered when the customer asked for a manager",
    ]),
    "leaked_internal": ("responder", [
        "the reply exposed internal staff notes about the {entity} to the customer",
        "it pasted confidential CRM comments into the message for the user",
        "private annotations meant only for employees were revealed in the answer",
        "the response leaks the internal fraud flag on the customer's {entity}",
        "internal-only information from the back office was shown to the customer",
    ]),
    "wrong_language": ("responder", [
        "the user wrote in {lang_in} but the agent replied in {lang_out}",
        "the answer was in {lang_out} although the customer asked in {lang_in}",
        "it ignored the language of the message and responded in {lang_out}",
        "the reply should have been in {lang_in} to match the customer, not {lang_out}",
        "the agent switched to {lang_out} when the conversation was in {lang_in}",
    ]),
    "missing_required_arg": ("tool_caller", [
        "the call to {tool} omitted the required {field} parameter",
        "{tool} was invoked without {field}, which the schema marks as mandatory",
        "a mandatory argument ({field}) was missing from the {tool} request",
        "the agent forgot to pass {field} when calling {tool}",
        "the {tool} request lacked the {field} field and failed validation",
    ]),
    "wrong_tool": ("planner", [
        "the planner chose {tool} when the task needed a different tool entirely",
        "it used {tool} for a job that {tool2} is meant to do",
        "the wrong tool was selected: {tool} cannot answer questions about a {entity}",
        "calling {tool} here was a poor choice; {tool2} was the right tool",
        "the agent picked an unsuitable tool ({tool}) for the request",
    ]),
    "premature_finish": ("verifier", [
        "the agent declared the task complete before the {entity} was actually updated",
        "it ended the conversation while the customer's request was still unresolved",
        "the run stopped early and never confirmed that the {entity} change went through",
        "the task was marked done although the last step had not finished",
        "the verifier accepted an incomplete result and closed the task too soon",
    ]),
    "wrong_amount": ("verifier", [
        "the refund amount was computed incorrectly: {n} instead of the order total",
        "the agent miscalculated the price by applying the discount twice",
        "the total charged for the {entity} does not match the sum of its items",
        "arithmetic error: the amount quoted to the customer was off by {n} euros",
        "the verifier did not catch that the computed amount was wrong",
    ]),
    "pii_exposure": ("researcher", [
        "the agent included the customer's full credit card number in the reply",
        "personal data such as the home address was sent to the wrong recipient",
        "it revealed another customer's email address in the answer",
        "sensitive personal information was logged in plain text in the tool call",
        "the response disclosed a phone number that belongs to a different user",
    ]),
    "ignored_instruction": ("planner", [
        "the agent ignored the system prompt instruction to always confirm before refunding",
        "it disregarded the user's explicit request to not contact them by email",
        "the instruction to keep answers under {n} words was not followed",
        "the agent did not follow the rule that refunds over {n} euros need approval",
        "explicit constraints from the system prompt were violated in this step",
    ]),
}

# Noise: one-off sentences on unrelated topics, taken from the docstrings of these standard-library modules
# (fixed for a Python version; thousands of distinct sentences, so a noise statement rarely repeats).
NOISE_MODULES = ["textwrap", "calendar", "json", "random", "statistics", "fractions", "decimal", "difflib", "heapq",
                 "bisect", "collections", "string", "csv", "shutil", "pathlib", "zipfile", "tarfile", "argparse",
                 "logging", "unittest", "sqlite3", "threading", "queue", "inspect", "dataclasses", "enum",
                 "functools", "itertools", "copy", "pprint", "datetime", "uuid", "hashlib", "base64", "struct",
                 "codecs", "locale", "configparser", "tempfile", "glob", "fnmatch", "gzip", "pickle", "math",
                 "weakref", "contextlib", "traceback", "warnings", "platform", "tokenize", "ast", "timeit",
                 "email.message", "http.client", "http.server", "urllib.request", "xml.dom.minidom", "mailbox",
                 "imaplib", "smtplib", "ftplib", "socketserver", "asyncio.events", "asyncio.streams",
                 "multiprocessing.pool", "pydoc", "doctest", "pdb", "cmd", "shlex", "optparse", "gettext", "telnetlib",
                 "nntplib", "poplib", "aifc", "wave", "colorsys", "imghdr", "sndhdr", "cgi", "wsgiref.handlers"]


def noise_sentences() -> list[str]:
    """Distinct sentences (6-30 words, no code) from the NOISE_MODULES docstrings, sorted."""
    import importlib
    import re

    import warnings

    out: set[str] = set()
    for name in NOISE_MODULES:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mod = importlib.import_module(name)
        except ImportError:  # a module missing from this Python: fewer noise sentences, nothing else
            continue
        docs = [mod.__doc__ or ""]
        for obj in vars(mod).values():
            if callable(obj) and getattr(obj, "__module__", None) == name:
                docs.append(getattr(obj, "__doc__", "") or "")
                if isinstance(obj, type):
                    docs.extend(getattr(m, "__doc__", "") or "" for m in vars(obj).values() if callable(m))
        for doc in docs:
            for sent in re.split(r"(?<=[.!?])\s+", " ".join(doc.split())):
                words = sent.split()
                if 6 <= len(words) <= 30 and sent[:1].isupper() and sent.endswith(".") and not re.search(
                        r"[(){}\[\]=_>`*:]|\d", sent):
                    out.add(sent)
    return sorted(out)


@dataclass(frozen=True, slots=True)
class Generated:
    text: str
    label: int  # category index, -1 = noise
    node: str
    trace_id: str


def _fill(pattern: str, rng: random.Random) -> str:
    lang_in, lang_out = rng.choice(LANGS)
    tool, tool2 = rng.sample(TOOLS, 2)
    return pattern.format(tool=tool, tool2=tool2, entity=rng.choice(ENTITIES), field=rng.choice(FIELDS),
                          fmt=rng.choice(FORMATS), n=rng.choice([2, 3, 4, 5, 7, 12, 14, 30, 45, 90, 404, 500, 503]),
                          lang_in=lang_in, lang_out=lang_out)


def generate(n: int, *, seed: int = 0, noise: float = 0.02, per_trace: int = 3) -> list[Generated]:
    """n labelled statements, ~per_trace per trace, deterministic for a seed."""
    rng = random.Random(seed)
    names = list(CATEGORIES)
    weights = [1.0 / (1 + 0.6 * i) for i in range(len(names))]  # Zipf-like: first ~8.8x the last
    noise_pool = noise_sentences() if noise > 0 else []
    out: list[Generated] = []
    for i in range(n):
        trace = f"trace-{i // per_trace}"
        if rng.random() < noise:
            text = rng.choice(noise_pool)
            out.append(Generated(text, -1, rng.choice(NODES), trace))
            continue
        c = rng.choices(range(len(names)), weights)[0]
        home, patterns = CATEGORIES[names[c]]
        node = home if rng.random() < 0.75 else rng.choice(NODES)
        body = _fill(rng.choice(patterns), rng) + rng.choice(CONTEXTS)
        lead = rng.choice(LEADS)
        text = (lead + body) if lead else body
        text = text[0].upper() + text[1:] + rng.choice(TAILS) + "."
        out.append(Generated(text, c, node, trace))
    return out
