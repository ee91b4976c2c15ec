"""Final statement groups as library Clusters, so they can be named (offline or by the LLM) and fingerprinted
after identity matching has pooled, split or merged the run's raw clusters."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import replace

import numpy as np

from diagnosis.clustering.statements import normalize_text
from diagnosis.insights.identity import Group
from diagnosis.insights.statements import SEVERITY_RANK, Draft

N_EXAMPLES = 5
TITLE_MAX_CHARS = 80
PATTERN_TITLE_MAX_CHARS = 140  # a rule finding's title: the tool or span, and its error's message without values
_RUBRIC_NAME_MAX = 60  # characters of the name of the rubric an insight's title says it violates
_VIOLATES = re.compile(r" \(violates \u201c([^\u201d]*)\u201d\)$")


def group_centroid(rows: list[int], vectors: np.ndarray) -> np.ndarray:
    mean = vectors[rows].astype(np.float64).mean(axis=0)
    norm = float(np.linalg.norm(mean)) or 1.0
    return (mean / norm).astype(np.float32)


def group_cluster(*, key: str, group: Group, drafts: list[Draft], vectors: np.ndarray, medoid: str = ""):
    """A diagnosis.clustering.Cluster for the group (medoid and examples nearest the centroid, distinct texts);
    `medoid`, when one of the group's statements, comes first (the clustering's choice: a problem's first
    symptom)."""
    from diagnosis.clustering import Cluster

    rows = group.rows
    centroid = group_centroid(rows, vectors)
    sims = vectors[rows] @ centroid
    first = np.asarray([drafts[r].key != medoid for r in rows])
    order = np.lexsort((np.asarray(rows), -sims, first))
    examples: list[str] = []
    seen: set[str] = set()
    for j in order:
        draft = drafts[rows[j]]
        norm = normalize_text(draft.text)
        if norm in seen:
            continue
        seen.add(norm)
        if len(examples) < N_EXAMPLES:
            examples.append(draft.key)
    return Cluster(
        id=key, level=group.level, node=group.node, member_ids=[drafts[r].key for r in rows], centroid=centroid,
        medoid_id=examples[0], size=len(rows), distinct_count=len(seen), cohesion=float(sims.mean()),
        example_ids=examples, trace_ids=sorted({drafts[r].trace_id for r in rows}),
        nodes=dict(Counter(drafts[r].node for r in rows).most_common()),
        severities=dict(Counter(drafts[r].severity for r in rows).most_common()),
    )


def group_severity(rows: list[int], drafts: list[Draft]) -> str:
    """The highest severity carried by at least a quarter of the statements (else the most common one)."""
    counts = Counter(drafts[r].severity for r in rows)
    total = sum(counts.values())
    for severity in sorted(SEVERITY_RANK, key=SEVERITY_RANK.get, reverse=True):
        if counts.get(severity, 0) * 4 >= total:
            return severity
    return counts.most_common(1)[0][0] if counts else "medium"


def groups_name(*, groups: list[Group], drafts: list[Draft], vectors: np.ndarray, llm=None,
                medoids: dict[str, str] | None = None) -> dict[int, tuple]:
    """group index -> (Cluster, ClusterName) for every group that is not an "other" bucket. Names are computed per
    (level, node) so that the distinctive terms are distinctive against the sibling insights. medoids: the run's
    cluster id -> its medoid statement key (a group is named after the medoid of its first cluster)."""
    from diagnosis.clustering import name_clusters
    from diagnosis.clustering.naming import title_generalize

    texts = {d.key: d.text for d in drafts}
    by_scope: dict[tuple[str, str], list[tuple[int, object]]] = {}
    for index, group in enumerate(groups):
        if group.is_other or not group.rows:
            continue
        medoid = (medoids or {}).get(group.clusters[0], "") if group.clusters else ""
        cluster = group_cluster(key=f"g{index}", group=group, drafts=drafts, vectors=vectors, medoid=medoid)
        by_scope.setdefault((group.level, group.node), []).append((index, cluster))
    titles = {d.key: d.title for d in drafts if d.title}
    out: dict[int, tuple] = {}
    for items in by_scope.values():
        names = name_clusters([c for _, c in items], texts, llm=llm)
        for index, cluster in items:
            name = names[cluster.id]
            shared = group_pattern(groups[index].rows, drafts)
            if shared and name.source == "offline":
                # Every statement is one rule finding (a tool's error with its values taken out): the title is that
                # finding, so it says what all its members share, and is not cut before the error's message.
                name = replace(name, title=pattern_title(shared))
            elif name.source == "offline" and cluster.medoid_id in titles:
                name = replace(name, title=clip(title_generalize(titles[cluster.medoid_id])))
            out[index] = (cluster, name)
    return out


def group_pattern(rows: list[int], drafts: list[Draft]) -> str:
    """The one pattern every statement of the group shares as a rule finding, else ""."""
    patterns = {drafts[r].pattern for r in rows}
    if len(patterns) != 1 or "" in patterns:
        return ""
    return patterns.pop()


def groups_fingerprints(*, groups: list[Group], names: dict[int, tuple], drafts: list[Draft]) -> dict[int, str]:
    """group index -> its fingerprint: the pattern's when all its statements share one, else the distinctive terms'."""
    from diagnosis.clustering import fingerprint

    out = {}
    for i, (_, name) in names.items():
        group = groups[i]
        shared = group_pattern(group.rows, drafts)
        out[i] = pattern_fingerprint(pattern=shared, node=group.node, level=group.level) if shared \
            else fingerprint(name.terms, group.node, group.level)
    return out


def pattern_fingerprint(*, pattern: str, node: str, level: str) -> str:
    """The fingerprint of an insight whose statements all share this pattern: the pattern says which insight it is
    from run to run (identity.py step 5), whoever named it."""
    # "p" and 39 hex digits: a terms fingerprint (sha1 hex) never starts with "p", so a pattern's insight is known
    # for one (incremental.py keeps other statements out of it).
    return "p" + hashlib.sha1(f"{level}|{node}|pattern|{pattern}".encode()).hexdigest()[:39]


def is_pattern_fingerprint(value: str) -> bool:
    return value.startswith("p")


def pattern_title(pattern: str) -> str:
    """The title of an insight whose statements all share this pattern ("judge|generalised title")."""
    return clip(pattern.split("|", 1)[-1], PATTERN_TITLE_MAX_CHARS)


def clip(text: str, limit: int = TITLE_MAX_CHARS) -> str:
    """A judge's issue title as an insight title: whitespace collapsed, cut at a word boundary."""
    from diagnosis.clustering.naming import cut_at_word

    text = " ".join(text.split()).rstrip(" .")
    # A rubric's issue ends with the rubric it breaks (judges/rubric_checks.py), which says what was expected: what
    # went wrong and the rubric's name are each cut to fit, so neither pushes the other out of the title.
    rubric = _VIOLATES.search(text)
    if rubric:
        name = cut_at_word(rubric.group(1), _RUBRIC_NAME_MAX)
        return f"{cut_at_word(text[:rubric.start()], limit)} (violates \u201c{name}\u201d)"
    return cut_at_word(text, limit)
