"""Atomic issue statements: the unit that gets embedded and clustered.

A judge's critique of a failing step is free prose ("The agent correctly greeted the user. However, it never
checked the order status, and it invented a refund policy."). Clustering whole critiques mixes several problems
into one vector, so a critique is split into sentences, praise and boilerplate are dropped, and each remaining
sentence becomes one `Statement`. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "Statement", "split_critique", "statements_from_critique", "normalize_text", "canonical_text", "MIN_CHARS",
    "MIN_WORDS",
]

MIN_CHARS = 15
"""Fragments shorter than this (after cleaning) carry no diagnosable content ("Not good.", "See above.")."""
MIN_WORDS = 3
"""Fragments with fewer words are dropped for the same reason."""


@dataclass(frozen=True, slots=True)
class Statement:
    """One atomic issue statement with where it came from. `id` is the caller's (e.g. feedback pk + index)."""

    id: str
    text: str
    node: str  # the agent/graph node of the judged step; "" for trace-level (system) feedback
    trace_id: str
    span_id: str | None = None
    severity: str = "medium"
    source: str = ""  # judge name, e.g. "llm.step"
    tool: str = ""  # the tool the statement is about, when known
    pattern: str = ""  # a deterministic finding's pattern: statements with one are grouped by it alone (cluster.py)


# Abbreviations whose period must not end a sentence; they are masked before splitting.
_ABBREVIATIONS = (
    "e.g.", "i.e.", "etc.", "vs.", "cf.", "approx.", "incl.", "resp.", "a.k.a.", "Mr.", "Mrs.", "Ms.", "Dr.",
    "No.", "Fig.", "approx.",
)
_MASK = "\u2063"  # invisible separator, never in judge output in practice
_BULLET = re.compile(r"^\s*(?:[-*\u2022\u25cf]|\d{1,2}[.)]|\(?[a-z]\))\s+", re.IGNORECASE)
# A sentence ends at . ! ? (optionally followed by a closing quote/bracket) followed by whitespace and an
# uppercase letter, digit, quote or bracket. Decimals ("3.5"), file names ("app.py") and URLs are not split.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[A-Z0-9\"'(\[`])")
_LABEL = re.compile(
    r"^\s*(?:critique|feedback|reasoning|rationale|issues?|problems?|analysis|explanation|summary|verdict"
    r"|assessment|evaluation|observations?|notes?|comment)\s*[:\-\u2013]\s*",
    re.IGNORECASE,
)
_BOILERPLATE = re.compile(
    r"^\s*(?:"
    r"(?:overall\s+)?score\s*[:=]?\s*[\d.]+(?:\s*/\s*\d+)?"  # "Score: 0.3", "score 2/5"
    r"|(?:final\s+)?(?:verdict|rating|grade)\s*[:=]?\s*\w+"
    r"|(?:pass|fail(?:ed)?|ok|n/?a|none|no issues?(?: found)?)\.?"
    r"|let me (?:evaluate|analy[sz]e|look|review|check)\b.*"
    r"|(?:here is|here's|below is) (?:my|the) (?:evaluation|analysis|critique|assessment)\b.*"
    r"|i will (?:now )?(?:evaluate|analy[sz]e|review)\b.*"
    r"|(?:in summary|to summari[sz]e|in conclusion|overall)[,:]?\s*(?:the (?:step|response|agent|output) "
    r"(?:is|was) (?:(?:mostly|largely|generally) )?(?:fine|good|ok|acceptable|adequate|reasonable))?\.?"
    r")\s*$",
    re.IGNORECASE,
)
# A praise sentence: positive wording and no sign of a problem.
_PRAISE = re.compile(
    r"\b(?:correctly|successfully|properly|appropriately|accurately|well[- ](?:done|structured|written|handled)"
    r"|good job|great job|nicely|excellent|helpful|clear and concise|as expected|as required|is correct"
    r"|was correct|are correct|is accurate|is appropriate|did well|does well|commendabl[ey]|strength)\b",
    re.IGNORECASE,
)
_PROBLEM = re.compile(
    r"\b(?:not|no|never|none|nothing|fail\w*|miss\w*|incorrect\w*|wrong\w*|error\w*|mistak\w*|should\w*"
    r"|must|lack\w*|instead|but|however|although|though|without|ignor\w*|omit\w*|hallucinat\w*|invent\w*"
    r"|fabricat\w*|unclear|unnecessar\w*|redundant|repeat\w*|loop\w*|unable|didn't|doesn't|don't|isn't"
    r"|wasn't|can't|cannot|couldn't|won't|too|only|incomplete|inconsistent|contradict\w*|violat\w*"
    r"|exceed\w*|timeout|crash\w*|broke\w*|invalid|misread|misunderst\w*|confus\w*|irrelevant|off-topic)\b",
    re.IGNORECASE,
)
# "X was done correctly, but Y" -> keep "Y". The praise part must come first.
_CONTRAST = re.compile(r"(?:[,;]\s*|\s+-\s+|\s+)(?:but|however|although|though|yet|whereas)\b[,]?\s*", re.IGNORECASE)
_CONNECTIVE = re.compile(
    r"^(?:however|but|also|additionally|furthermore|moreover|in addition|further|finally|first(?:ly)?"
    r"|second(?:ly)?|third(?:ly)?|then|next|unfortunately|notably|importantly|that said)\b[,:]?\s*",
    re.IGNORECASE,
)
_SPACES = re.compile(r"\s+")
_NORM_DROP = re.compile(r"[\"'`\u2018\u2019\u201c\u201d()\[\]{}<>]")
_NORM_TOKEN_DIGIT = re.compile(r"\b[\w-]*\d[\w-]*\b")
_NORM_TRAIL = re.compile(r"[\s.,;:!?]+$")


def _split_sentences(text: str) -> list[str]:
    for abbr in _ABBREVIATIONS:
        text = re.sub(re.escape(abbr), abbr.replace(".", _MASK), text, flags=re.IGNORECASE)
    pieces: list[str] = []
    for line in re.split(r"\n+", text):
        line = _BULLET.sub("", line).strip()
        if not line:
            continue
        pieces.extend(p for p in _SENTENCE_END.split(line) if p and p.strip())
    return [p.replace(_MASK, ".").strip() for p in pieces]


def _is_praise(sentence: str) -> bool:
    return bool(_PRAISE.search(sentence)) and not _PROBLEM.search(sentence)


def _strip_leading_praise(sentence: str) -> str:
    """'The agent correctly parsed the date, but it used the wrong timezone.' -> 'It used the wrong timezone.'"""
    match = _CONTRAST.search(sentence)
    if not match:
        return sentence
    head, tail = sentence[: match.start()], sentence[match.end():]
    if _PRAISE.search(head) and not _PROBLEM.search(head) and len(tail.split()) >= MIN_WORDS:
        return tail[:1].upper() + tail[1:]
    return sentence


def _clean(sentence: str) -> str:
    sentence = _LABEL.sub("", sentence)
    sentence = _SPACES.sub(" ", sentence).strip(" \t-*:;,")
    stripped = _CONNECTIVE.sub("", sentence)
    if stripped != sentence and stripped:
        sentence = stripped[:1].upper() + stripped[1:]
    return sentence


def split_critique(text: str, *, min_chars: int = MIN_CHARS, min_words: int = MIN_WORDS) -> list[str]:
    """Split a critique into atomic statements, in order.

    Splits on sentence ends, line breaks and bullets; strips labels ("Critique:"); drops boilerplate ("Score:
    0.2", "Overall, the step is fine."), pure praise ("The agent correctly called the tool.") and fragments
    shorter than `min_chars` characters or `min_words` words; cuts a leading praise clause off a contrastive
    sentence ("X was right, but Y" keeps "Y"). Exact repeats within one critique are kept once.
    """
    if not text or not text.strip():
        return []
    out: list[str] = []
    seen: set[str] = set()
    for raw in _split_sentences(text):
        sentence = _clean(raw)
        if not sentence or _BOILERPLATE.match(sentence) or _is_praise(sentence):
            continue
        sentence = _clean(_strip_leading_praise(sentence))
        if len(sentence) < min_chars or len(sentence.split()) < min_words:
            continue
        key = normalize_text(sentence)
        if key in seen:
            continue
        seen.add(key)
        out.append(sentence)
    return out


def statements_from_critique(
    text: str,
    *,
    id_prefix: str,
    node: str,
    trace_id: str,
    span_id: str | None = None,
    severity: str = "medium",
    source: str = "",
) -> list[Statement]:
    """`split_critique` wrapped into `Statement`s with ids `f"{id_prefix}:{index}"`."""
    return [
        Statement(id=f"{id_prefix}:{i}", text=s, node=node, trace_id=trace_id, span_id=span_id,
                  severity=severity, source=source)
        for i, s in enumerate(split_critique(text))
    ]


def normalize_text(text: str) -> str:
    """The exact-duplicate key: lowercase, quotes/brackets removed, every token containing a digit (counts,
    ids, order numbers) replaced by "0", whitespace collapsed, trailing punctuation dropped. Two statements
    with the same key are treated as the same statement ("called search 3 times" == "called search 5 times")."""
    text = _NORM_DROP.sub(" ", text.lower())
    text = _NORM_TOKEN_DIGIT.sub("0", text)
    text = _SPACES.sub(" ", text).strip()
    return _NORM_TRAIL.sub("", text)


_CANON_TRAIL = re.compile(r"[\s.!?;:,]+$")
_LEAD_IN = re.compile(
    r"^(?:(?:in|at|during) (?:this|the) (?:step|turn|call|point|span|stage)|here|notably|importantly|again"
    r"|unfortunately|in addition|additionally|also|however|moreover|furthermore)\s*,\s*",
    re.IGNORECASE,
)
# Code identifiers: snake_case, camelCase/PascalCase with an inner capital, dotted paths, `backticked` code.
_IDENTIFIER = re.compile(
    r"`[^`]{1,80}`|\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b|\b[a-z]+[A-Z][A-Za-z0-9]*\b"
    r"|\b[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)+\(?\)?(?=[\s,;:!?)]|\.?$)"
)
IDENTIFIER_PLACEHOLDER = "X"
# A trailing clause that states a generic consequence rather than the failure itself.
_CONSEQUENCE = re.compile(
    r"(?:,\s*|\s+)(?:causing|leading to|resulting in|which (?:caused|led|resulted|confused|frustrated|misled"
    r"|annoyed|made|forced|meant)|so (?:that )?(?:the (?:task|run|answer|result|user|customer|conversation)|it|"
    r"they)\b|and (?:so|this|that|thus|therefore|as a result)\b|and the (?:final )?(?:answer|result|output|task"
    r"|response) (?:was|is|were|failed|ended))[^,;]*$",
    re.IGNORECASE,
)


def canonical_text(text: str, *, strip_consequence: bool = True, mask_identifiers: bool = True) -> str:
    """The form that is embedded: whitespace collapsed, a leading discourse marker ("In this step,", "Here,",
    "Notably,") dropped, a trailing generic consequence clause (", so the task failed", ", causing an extra
    round trip", ", which confused the customer", "and the final answer was wrong") dropped when at least
    `MIN_WORDS` + 1 words remain, and exactly one final period. Consequences are shared by every failure mode,
    so they pull unrelated statements together; and all-MiniLM-L6-v2 moves a vector by up to 0.13 cosine for
    a missing final period alone, which would otherwise split duplicates. With `mask_identifiers`, code
    identifiers (snake_case, camelCase, dotted.paths, `code`) become "X": the model reads "lookup_inventory" as
    the words "lookup inventory", and statements about one tool then cluster by tool instead of by failure
    (the tool stays visible in the text, the names and the node). The displayed text is unchanged."""
    text = _CANON_TRAIL.sub("", _SPACES.sub(" ", text).strip())
    if mask_identifiers:
        text = _IDENTIFIER.sub(IDENTIFIER_PLACEHOLDER, text)
    text = _LEAD_IN.sub("", text)
    if strip_consequence:
        head = _CONSEQUENCE.sub("", text)
        if head != text and len(head.split()) > MIN_WORDS:
            text = _CANON_TRAIL.sub("", head)
    text = text[:1].upper() + text[1:]
    return f"{text}." if text else text
