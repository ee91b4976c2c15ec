"""Offline names for clusters: the medoid statement, shortened, plus the cluster's distinctive terms (c-TF-IDF),
and a hook for an LLM namer supplied by the caller.

c-TF-IDF (class-based TF-IDF, as in BERTopic): all statements of a cluster form one document; a term's weight
in cluster c is tf(t, c) / |c| * log(1 + A / f(t)), with tf counted over the cluster's statements including
duplicates, |c| the cluster's token count, A the mean token count per cluster and f(t) the term's frequency
over all clusters. Terms frequent in this cluster and rare in the others rank first. Unigrams and bigrams,
stop words removed; bigrams need to occur in >= 2 statements of the cluster.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .cluster import Cluster

__all__ = ["ClusterName", "NamingRequest", "LLMNamer", "distinctive_terms", "shorten", "name_clusters",
           "title_generalize"]

TITLE_MAX_CHARS = 80
N_TERMS = 8

_STOP = frozenset("""
a about above after again against all also am an and any are aren't as at be because been before being below
between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each few
for from further had hadn't has hasn't have haven't having he her here hers herself him himself his how i if in
into is isn't it it's its itself just let's me more most mustn't my myself no nor not of off on once only or
other ought our ours ourselves out over own same shan't she should shouldn't so some such than that that's the
their theirs them themselves then there there's these they this those through to too under until up very was
wasn't we were weren't what when where which while who whom why with won't would wouldn't you your yours
yourself yourselves agent assistant step response reply answer model user instead rather even though without
also still yet however made make makes using used use uses one two three first second via per
""".split())
_TOKEN = re.compile(r"[a-z][a-z0-9_'-]*[a-z0-9]|[a-z]")
_LEAD = re.compile(r"^(?:the (?:agent|assistant|model|response|reply|step)\s+|it\s+)", re.IGNORECASE)

# Instance values in a title (see title_generalize), most specific first. A value must stand alone: a digit or id
# glued to a name by a letter, "_", "-", "." or "/" belongs to the name (gpt-4o-mini, claude-3-5, v2, app.py,
# invoice_lookup). Typographic quotes are Clear's own for names (a rubric's name), so only ASCII quotes count.
_EDGE_L, _EDGE_R = r"(?<![\w./-])", r"(?![\w/-]|\.\w)"
_INSTANCE_VALUES = [
    ("<id>", re.compile(_EDGE_L + r"[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}" + _EDGE_R, re.IGNORECASE)),  # uuid
    ("<id>", re.compile(_EDGE_L + r"#?[A-Z][A-Z0-9]{0,5}[-_]\d[\w-]*" + _EDGE_R)),  # O-5012, INV-9011, ORD_77
    ("<id>", re.compile(_EDGE_L + r"[A-Z]{1,5}\d{3,}" + _EDGE_R)),  # ORD12345
    # hex ids: a digit and a letter, so neither a number nor a word such as "deadbeef"
    ("<id>", re.compile(_EDGE_L + r"(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}" + _EDGE_R, re.IGNORECASE)),
    ("<id>", re.compile(r"#\d+\b")),  # "#123"
    ('"…"', re.compile(r"(?<!\w)'[^'\n]{1,120}'(?!\w)|\"[^\"\n]{1,120}\"")),
    ("N", re.compile(_EDGE_L + r"[-+]?\d[\d,]*(?:\.\d+)?" + _EDGE_R)),
]


@dataclass(frozen=True, slots=True)
class ClusterName:
    title: str
    description: str
    terms: list[str] = field(default_factory=list)
    source: str = "offline"  # "offline" | "llm"
    root_cause: str = ""
    recommendation: str = ""
    note: str = ""  # offline only: why the model's name was not used (it echoed the prompt or was not grounded)


@dataclass(frozen=True, slots=True)
class NamingRequest:
    """What an LLM namer is given: the cluster, its medoid and example texts, its terms, the offline name."""

    cluster: Cluster
    medoid_text: str
    example_texts: list[str]
    terms: list[str]
    offline: ClusterName


LLMNamer = Callable[[NamingRequest], ClusterName | None]
"""Caller-supplied naming: return a ClusterName (source "llm") or None to keep the offline one. Exceptions are
caught and the offline name kept, so a flaky LLM never breaks clustering."""


def _tokens(text: str) -> list[str]:
    return [t.strip("'-") for t in _TOKEN.findall(text.lower())]


def _terms_of(text: str) -> list[str]:
    toks = _tokens(text)
    words = [t for t in toks if t not in _STOP and len(t) > 2 and not t.isdigit()]
    bigrams = [f"{a} {b}" for a, b in zip(toks, toks[1:]) if a not in _STOP and b not in _STOP
               and len(a) > 2 and len(b) > 2]
    return words + bigrams


def distinctive_terms(
    cluster_texts: Sequence[Sequence[tuple[str, int]]], *, top: int = N_TERMS,
) -> list[list[str]]:
    """c-TF-IDF top terms per cluster. cluster_texts[c] is a list of (distinct text, count) for cluster c."""
    tf: list[Counter[str]] = []
    doc_freq: list[Counter[str]] = []
    for texts in cluster_texts:
        counts: Counter[str] = Counter()
        docs: Counter[str] = Counter()
        for text, n in texts:
            terms = _terms_of(text)
            for t in terms:
                counts[t] += n
            for t in set(terms):
                docs[t] += n
        tf.append(counts)
        doc_freq.append(docs)
    total: Counter[str] = Counter()
    for counts in tf:
        total.update(counts)
    sizes = [sum(c.values()) for c in tf]
    avg = (sum(sizes) / len(sizes)) if sizes else 1.0
    out: list[list[str]] = []
    for counts, docs, size in zip(tf, doc_freq, sizes):
        scored = []
        for term, n in counts.items():
            if " " in term and docs[term] < 2:
                continue
            scored.append((n / max(size, 1) * math.log(1 + avg / total[term]), term))
        scored.sort(key=lambda x: (-x[0], x[1]))
        chosen: list[str] = []
        for _, term in scored:
            # skip a unigram already covered by a chosen bigram and vice versa
            if any(term in c.split(" ") or c in term.split(" ") for c in chosen):
                continue
            chosen.append(term)
            if len(chosen) == top:
                break
        out.append(chosen)
    return out


def title_generalize(text: str) -> str:
    """A title that names the pattern, not one occurrence of it: instance values become placeholders, ids
    (O-5012, INV-9011, uuids, hex ids, #12) "<id>", ASCII-quoted values '"…"', numbers "N" ("invoice_lookup called N
    times with identical arguments"). Names stay: tools, nodes, models and files (invoice_lookup, billing_worker,
    gpt-4o-mini, app.py, v2), and “typographic” quotes, which Clear's own templates use for names. Idempotent."""
    for placeholder, pattern in _INSTANCE_VALUES:
        text = pattern.sub(placeholder, text)
    # The same placeholder repeated by a list of values ("<id>, <id> and <id>") says it once.
    text = re.sub(r"(<id>|N|\"…\")(?:(?:,\s*|\s+and\s+|\s+or\s+)\1)+", r"\1", text)
    # A unit around its value ("tokens N tokens", a template's measure and unit) says it once.
    text = re.sub(r"\b(\w+) N \1\b", r"N \1", text)
    return " ".join(text.split())


def cut_at_word(text: str, max_chars: int = TITLE_MAX_CHARS) -> str:
    """`text` cut at a word boundary to `max_chars` with an ellipsis; never inside a `code` span (cut before it)."""
    if len(text) <= max_chars:
        return text
    cut = text[: max_chars - 1].rsplit(" ", 1)[0].rstrip(" ,;:")
    if cut.count("`") % 2:
        cut = cut[: cut.rfind("`")].rstrip(" ,;:")
    return cut + "\u2026"


def shorten(text: str, max_chars: int = TITLE_MAX_CHARS) -> str:
    """A title from a statement: the leading "The agent"/"It" dropped, the first clause kept, cut at a word
    boundary to `max_chars` with an ellipsis, capitalised (unless it starts with an identifier), no final period."""
    text = _LEAD.sub("", text.strip()).strip()
    # The first clause, found with `code` spans masked: a separator inside one ("`intent: refund`") is not a clause's.
    masked = re.sub(r"`[^`]*`", lambda m: "\0" * len(m.group(0)), text)
    first = text[:len(re.split(r"(?<=[a-z0-9)\0])[;:]\s|,\s(?:so|and|which|because|causing)\s|\.\s", masked,
                               maxsplit=1)[0])]
    if len(first) >= 20:
        text = first
    text = text.rstrip(" .;:,")
    text = cut_at_word(text, max_chars)
    first_word = text.split(" ", 1)[0]
    if not re.fullmatch(r"[a-z]+", first_word):  # an identifier (invoice_lookup, gpt-4o, <id>) keeps its case
        return text
    return text[:1].upper() + text[1:]


def name_clusters(
    clusters: Sequence[Cluster],
    texts: Mapping[str, str],
    *,
    llm: LLMNamer | None = None,
    n_terms: int = N_TERMS,
    n_examples: int = 3,
    title_max_chars: int = TITLE_MAX_CHARS,
) -> dict[str, ClusterName]:
    """Names for `clusters` (of one level, so that terms are distinctive against the sibling clusters).

    texts: statement id -> text for at least every member. Returns cluster id -> ClusterName. With `llm`,
    each cluster is offered to it and its answer replaces the offline name when it returns one.
    """
    per_cluster: list[list[tuple[str, int]]] = []
    for c in clusters:
        counter = Counter(texts[sid] for sid in c.member_ids)
        per_cluster.append(list(counter.items()))
    terms = distinctive_terms(per_cluster, top=n_terms)
    names: dict[str, ClusterName] = {}
    for c, top in zip(clusters, terms):
        medoid = texts[c.medoid_id]
        examples = [texts[i] for i in c.example_ids[:n_examples]]
        where = ", ".join(f"{node} ({n})" for node, n in list(c.nodes.items())[:4] if node) or "trace level"
        description = (
            f"{c.size} statements ({c.distinct_count} distinct) from {len(c.trace_ids)} traces; nodes: {where}. "
            f"Typical: \u201c{medoid}\u201d"
        )  # the distinctive terms are kept in `terms`: listed here they read as a finding, which they are not
        offline = ClusterName(title=shorten(title_generalize(medoid), title_max_chars), description=description,
                              terms=top)
        name = offline
        if llm is not None:
            try:
                answer = llm(NamingRequest(cluster=c, medoid_text=medoid, example_texts=examples, terms=top,
                                           offline=offline))
            except Exception:  # noqa: BLE001 - an LLM failure must not lose the cluster
                answer = None
            if answer is not None and answer.note:
                name = answer  # the namer kept the offline name, saying why (its model's text failed the checks)
            elif answer is not None:
                name = ClusterName(
                    title=answer.title or offline.title, description=answer.description or offline.description,
                    terms=top, source="llm", root_cause=answer.root_cause,
                    recommendation=answer.recommendation,
                )
        names[c.id] = name
    return names
