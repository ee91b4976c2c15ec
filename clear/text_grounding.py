"""Grounding of model-written text that Clear shows (issue 43): a text may name only what its evidence holds.

The evidence is what the text was written from: an insight's statements and nodes (naming), a trace's spans (the
judges). A text is grounded when:

* every name it gives exists in the evidence: `backticked` terms, identifiers (snake_case, dotted, CamelCase) and
  the word before agent / service / server / tool / worker / node / api / endpoint / database / router / handler
  ("the Lambda agent", "the router service"), compared after normalisation (lower case, every run of characters
  other than letters and digits one space, so `update_reservation_flights` matches "update reservation flights";
  a single word also matches when its stem, all but its last 3 letters and at least 4, begins a word of the
  evidence: "booking" for book_reservation);
* every quoted value ("…", “…”, '…', 2 characters or more, placeholders such as "…", <id> and N aside) occurs in
  the evidence, and a quote tied to a span (a root cause's reason) occurs in that span;
* a title is at most TITLE_MAX_CHARS (80) characters and names a failure: it has a word of FAILURE_CUES (not, no,
  never, wrong, fails, error, missing, drops, ignores, instead, violates, repeated, …), so a restated task ("The
  customer has cancelled the flight.", "Update Reservations Flights") or a bare instruction is refused;
* it does not restate the task: its similarity to a task text (text_echo.py ratio) stays under ECHO_SIMILARITY.

A text that fails is asked for once more with the reasons (they carry GROUNDING_MARK); one that still fails is
replaced by the computed (offline) text, and the reason is kept with it (`text_source: computed`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from difflib import SequenceMatcher

from clear.text_echo import ECHO_SIMILARITY, normalised

TITLE_MAX_CHARS = 80
MIN_CONTENT_WORDS = 4
STEM_MIN_CHARS = 4
SHARED_CONTENT = 0.6
GROUNDING_MARK = "not grounded"  # in every grounding problem
_ROLE_NOUNS = r"(?:agents?|services?|servers?|tools?|workers?|nodes?|apis?|endpoints?|databases?|routers?|handlers?)"
_NAMED_ROLE = re.compile(r"\b([A-Za-z][\w-]*)(?:'s)?\s+(?=" + _ROLE_NOUNS + r"\b)", re.IGNORECASE)
# A kind before a kind names nothing ("customer service agent": "service"); a router or worker before one does.
_ROLE_WORD = re.compile(r"(?:agents?|services?|servers?|tools?|apis?)", re.IGNORECASE)
_BACKTICKED = re.compile(r"`([^`]{2,80})`")
_IDENTIFIER = re.compile(r"\b(?:[a-z][a-z0-9]*_[a-z0-9_]+|[a-z]\w*\.[a-z]\w*(?=\()|[a-z]+[A-Z]\w*"
                         r"|[A-Z][a-z]+[A-Z]\w*)\b")
_QUOTED = re.compile(r"\"([^\"]{2,200})\"|\u201c([^\u201d]{2,200})\u201d|(?<![\w])'([^']{2,200})'(?![\w])")
_PLACEHOLDERS = {"…", "...", "<id>", "n", ""}
# Words before a role noun that name no particular thing ("the same tool", "every agent", "a support agent").
_GENERIC = frozenset("""
a an the this that these those its their his her our your my each every any all one two no same other another
wrong right correct incorrect first last next previous earlier later final whole entire single multiple several
external internal remote local main sub downstream upstream calling called responsible relevant appropriate
different separate specific given current new old real actual corresponding underlying available expected
intended proper required needed backend front frontend web http llm ai language model customer user human
""".split())
FAILURE_CUES = re.compile(
    r"\b(?:not|no|never|none|nothing|cannot|can't|n't|without|instead|fail\w*|error\w*|wrong\w*|incorrect\w*|"
    r"invalid\w*|missing|miss(?:es|ed)?|drop\w*|ignor\w*|los(?:e|es|t|ing)|skip\w*|violat\w*|unable|refus\w*|"
    r"mismatch\w*|hallucinat\w*|invent\w*|repeat\w*|loop\w*|retr(?:y|ies|ied)|exceed\w*|time[sd]? ?out|crash\w*|"
    r"exception\w*|reject\w*|denied|outlier|far above|slow\w*|too (?:many|few|long|late|early|much)|mis\w+|"
    r"overcharg\w*|undercharg\w*|empty|truncat\w*|forg[eo]t\w*|omit\w*|left out|leaves? out|unrecovered|identical|"
    r"duplicat\w*|contradict\w*|unsupported|unverified|wrongly|bad|broken|stuck|abandon\w*|gives? up|gave up|"
    r"fabricat\w*|disagree\w*|before|twice|again|[0-9n]+ times|more often|less often|extra|unnecessar\w*|"
    r"unauthori[sz]ed|unasked|not asked|asked for|incomplete|partial\w*|only|just|left|leaves|discard\w*|should|"
    r"but|although|though|confus\w*|expected|swap\w*|lack\w*|absent|insufficient|unclear|ambiguous|un[a-z]+ed|"
    r"neglect\w*|overlook\w*|disappear\w*|premature\w*|unsafe|leak\w*|different|differs?|instead of|"
    r"mistak\w*|misroute\w*|wrongly|unhandled|insist\w*|deviat\w*|contrary)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Evidence:
    """The normalised text a model-written text may draw its names and quotes from."""

    text: str
    tasks: tuple[str, ...] = ()

    def holds(self, value: str) -> bool:
        needle = normalised(value)
        if not needle:
            return False
        if f" {needle} " in f" {self.text} ":
            return True
        # One word in another form ("booking" for book_reservation, "refunds" for refund): its stem begins a word.
        if " " not in needle and len(needle) >= STEM_MIN_CHARS + 1:
            stem = needle[:max(STEM_MIN_CHARS, len(needle) - 3)]
            return f" {stem}" in f" {self.text}"
        return False


def grounding_evidence(*, texts: Iterable[str], tasks: Iterable[str] = ()) -> Evidence:
    return Evidence(text=" | ".join(normalised(t) for t in texts if t),
                    tasks=tuple(normalised(t) for t in tasks if t and normalised(t)))


def names_in(text: str) -> list[str]:
    """The names a text gives: backticked terms, identifiers, and the word before a role noun."""
    found: list[str] = []
    found += _BACKTICKED.findall(text)
    unquoted = _BACKTICKED.sub(" ", text)
    found += _IDENTIFIER.findall(unquoted)
    found += [m.group(1) for m in _NAMED_ROLE.finditer(unquoted)
              if m.group(1).lower() not in _GENERIC and not _ROLE_WORD.fullmatch(m.group(1))]
    return list(dict.fromkeys(name for name in found if normalised(name)))


def quotes_in(text: str) -> list[str]:
    unticked = _BACKTICKED.sub(" ", text)
    quotes = ["".join(groups) for groups in _QUOTED.findall(unticked)]
    return [q for q in quotes if normalised(q) not in _PLACEHOLDERS and q.strip() not in _PLACEHOLDERS]


def grounding_problems(*, path: str, text: str, evidence: Evidence, title: bool = False,
                       names: bool = True, quote_span: Evidence | None = None,
                       max_chars: int | None = None) -> list[str]:
    """Why `text` is not grounded in `evidence` (empty when it is). `title`: the length limit, a failure named and
    no restated task; `max_chars` alone: the length limit only (an issue's title). `names`: check the names it gives
    (a recommendation may propose a new tool: only its backticked names are checked). `quote_span`: the span its
    quotes must be found in."""
    text = " ".join(str(text or "").split())
    if not text:
        return []
    problems = []
    limit = TITLE_MAX_CHARS if title else max_chars
    if limit is not None and len(text) > limit:
        problems.append(f"{path}: {GROUNDING_MARK}: {len(text)} characters, a title has at most {limit}")
    given = names_in(text) if names else _BACKTICKED.findall(text)
    absent = [name for name in given if not evidence.holds(name)]
    if absent:
        problems.append(f"{path}: {GROUNDING_MARK}: names {_listed(absent)}, which the evidence does not contain; "
                        "name only agents, tools, spans and fields that occur in it")
    for quote in quotes_in(text):
        where = quote_span or evidence
        if not where.holds(quote):
            problems.append(f"{path}: {GROUNDING_MARK}: the quoted value {_listed([quote])} occurs in "
                            f"{'no span it cites' if quote_span else 'none of the evidence'}; quote it verbatim or "
                            "leave it out")
    if title and not names_failure(text, evidence=evidence):
        problems.append(f"{path}: {GROUNDING_MARK}: names no failure (it reads as the task or a success); say what "
                        "goes wrong and where")
    if title and restates_task(text, evidence=evidence):
        problems.append(f"{path}: {GROUNDING_MARK}: restates the task; say what goes wrong")
    return problems


def names_failure(text: str, *, evidence: Evidence) -> bool:
    """A failure word (FAILURE_CUES), or the wording of the statements it was written from, which describe failures:
    at least MIN_CONTENT_WORDS content words, SHARED_CONTENT of them in the evidence ("Update Reservations Flights",
    a tool's name alone, is neither)."""
    if FAILURE_CUES.search(text):
        return True
    words = [w for w in normalised(text).split() if w not in _GENERIC and len(w) > 2]
    found = [w for w in words if f" {w} " in f" {evidence.text} "]
    return len(words) >= MIN_CONTENT_WORDS and len(found) >= SHARED_CONTENT * len(words)


def restates_task(text: str, *, evidence: Evidence) -> bool:
    """The text is (nearly) a task, or one sentence of one."""
    field = normalised(text)
    if not field:
        return False
    for task in evidence.tasks:
        pieces = [task, *(normalised(p) for p in re.split(r"(?<=[.!?])\s+", task))]
        if field in task and len(field.split()) >= 3:
            return True
        if any(p and SequenceMatcher(None, field, p, autojunk=False).ratio() >= ECHO_SIMILARITY for p in pieces):
            return True
    return False


def _listed(values: list[str]) -> str:
    shown = [v if len(v) <= 40 else v[:39] + "…" for v in values[:5]]
    return ", ".join(f"\u201c{v}\u201d" for v in shown) + (f" and {len(values) - 5} more" if len(values) > 5 else "")


def grounded(problems: list[str]) -> bool:
    return not any(GROUNDING_MARK in p for p in problems)
