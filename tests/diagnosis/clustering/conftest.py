"""Fixtures for the clustering library tests: one embedder per session (the model loads once)."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosis.clustering.embeddings import Embedder
from diagnosis.clustering.statements import Statement

from .paraphrases import OUTLIERS, PROBLEMS

NODES = ["planner", "responder", "tool_caller", "researcher"]


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    return Embedder()


def paraphrase_statements(*, spread_nodes: bool = True, prefix: str = "s") -> tuple[list[Statement], list[str]]:
    """Every paraphrase as a Statement (one trace each) and its problem label; outliers labelled uniquely.
    spread_nodes: paraphrases of one problem are put on different nodes (round robin), so that system-level
    clusters must gather statements from several nodes."""
    statements: list[Statement] = []
    labels: list[str] = []
    i = 0
    for problem, (node, texts) in PROBLEMS.items():
        for j, text in enumerate(texts):
            statements.append(Statement(id=f"{prefix}{i}", text=text, node=NODES[j % len(NODES)] if spread_nodes
                                        else node, trace_id=f"t{i}", severity="high", source="llm.step"))
            labels.append(problem)
            i += 1
    for node, text in OUTLIERS:
        statements.append(Statement(id=f"{prefix}{i}", text=text, node=node, trace_id=f"t{i}"))
        labels.append(f"outlier-{i}")
        i += 1
    return statements, labels


@pytest.fixture(scope="session")
def paraphrases(embedder: Embedder) -> tuple[list[Statement], list[str], np.ndarray]:
    statements, labels = paraphrase_statements()
    return statements, labels, embedder.embed([s.text for s in statements])
