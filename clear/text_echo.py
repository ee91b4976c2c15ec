"""Echo check: a model-written field that copies the prompt (a description, an instruction, the example) instead of
saying something about the data.

Small models fill a reply template with its own wording ("short label of one problem", "4-8 sentences: what the
agent did, what went wrong, why"; issue 43), and large ones copy an example when they have nothing to say. A
schema-valid reply is not a true one, so every free-text field of a judge's or namer's reply is compared with the
prompt it answered:

* Normalisation: lower case, every run of characters other than letters and digits one space.
* The prompt's pieces: each double-quoted value (a template value or an example's field), each sentence and each
  clause (split at `.`, `:`, `;`, new lines and brackets) of at least MIN_PIECE_WORDS words.
* A field echoes when its normalised text is one of the pieces (2 words or more), has a difflib similarity ratio
  (2·matches / total length) of at least ECHO_SIMILARITY (0.8) with a piece (3 words or more: a near copy, "4–8
  sentences, what the agent did…", is still a copy), or is contained in the normalised prompt (4 words or more).
  Only prose fields are compared (titles, details, critiques, reasons, summaries, names; `text_fields` `keys`):
  ids, enums and evidence quotes come from the data or the schema.

A reply with an echo is asked for once more with the reason (the problem text names the field and the piece); one
that still echoes is recorded as `invalid_output:echo` (clear/llm_errors.py ECHO), never a verdict or a statement.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from difflib import SequenceMatcher

ECHO_SIMILARITY = 0.8
MIN_EQUAL_WORDS = 2  # "short label": one word copied from a prompt is a coincidence, not an echo
MIN_SIMILAR_WORDS = 3
MIN_CONTAINED_WORDS = 4  # "the agent" is in every prompt and in many a true critique
MIN_PIECE_WORDS = 2
PROSE_KEYS = frozenset({"title", "detail", "critique", "feedback", "justification", "reason", "summary", "name",
                        "text", "description", "root_cause", "recommendation"})
ECHO_MARK = "copies the prompt"  # in every echo problem: clear.llm_errors.invalid_output_cause reads it
_NON_WORD = re.compile(r"[^a-z0-9]+")
_QUOTED = re.compile(r'"([^"\\]{6,}?)"')
_CLAUSES = re.compile(r"[.:;\n()\[\]{}]+|\s[-–]\s")


def normalised(text: str) -> str:
    return " ".join(_NON_WORD.sub(" ", str(text).lower()).split())


@dataclass(frozen=True)
class EchoReference:
    """The prompt, normalised whole and cut into pieces, that replies are compared with."""

    whole: str
    pieces: tuple[str, ...]


def echo_reference(*, texts: Iterable[str]) -> EchoReference:
    """The reference of a prompt made of `texts` (its system message, its example, its instructions)."""
    pieces: dict[str, None] = {}
    wholes = []
    for text in texts:
        wholes.append(normalised(text))
        for raw in [*_QUOTED.findall(text), *_CLAUSES.split(text), *re.split(r"(?<=[.!?])\s+", text)]:
            piece = normalised(raw)
            if len(piece.split()) >= MIN_PIECE_WORDS:
                pieces[piece] = None
    return EchoReference(whole=" | ".join(wholes), pieces=tuple(pieces))


def echo_of(*, text: str, reference: EchoReference) -> tuple[str, float] | None:
    """(the prompt piece `text` copies, similarity) or None when it says something of its own."""
    field = normalised(text)
    words = len(field.split())
    if words < MIN_EQUAL_WORDS:
        return None
    if field in reference.pieces or (words >= MIN_CONTAINED_WORDS and f" {field} " in f" {reference.whole} "):
        return field, 1.0
    if words < MIN_SIMILAR_WORDS:
        return None
    best: tuple[str, float] | None = None
    for piece in reference.pieces:
        matcher = SequenceMatcher(None, field, piece, autojunk=False)
        if matcher.real_quick_ratio() < ECHO_SIMILARITY or matcher.quick_ratio() < ECHO_SIMILARITY:
            continue
        ratio = matcher.ratio()
        if ratio >= ECHO_SIMILARITY and (best is None or ratio > best[1]):
            best = (piece, ratio)
    return best


def echo_problems(*, fields: Iterable[tuple[str, str]], reference: EchoReference) -> list[str]:
    """One problem per (path, text) field that copies the prompt, in words the repair request can carry."""
    problems = []
    for path, text in fields:
        found = echo_of(text=text, reference=reference)
        if found is None:
            continue
        piece, ratio = found
        shown = piece if len(piece) <= 60 else piece[:59] + "…"
        problems.append(f"{path}: {ECHO_MARK} (\"{shown}\", similarity {ratio:.2f} >= {ECHO_SIMILARITY}); write "
                        "what this data shows in your own words, not the instructions or the example")
    return problems


def text_fields(value: object, *, path: str = "$", keys: frozenset[str] = PROSE_KEYS) -> Iterator[tuple[str, str]]:
    """Every string of a reply under one of `keys` (at any depth), with its JSON path."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, str):
                if key in keys:
                    yield f"{path}.{key}", item
            else:
                yield from text_fields(item, path=f"{path}.{key}", keys=keys)
    elif isinstance(value, list):
        for position, item in enumerate(value):
            yield from text_fields(item, path=f"{path}[{position}]", keys=keys)
