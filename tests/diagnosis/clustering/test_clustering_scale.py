"""Scalability smoke test on synthetic vectors (no embedding): 20k statements, no n x n matrix."""

import time
import tracemalloc

import numpy as np
from sklearn.metrics import adjusted_rand_score

from diagnosis.clustering.cluster import cluster_statements
from diagnosis.clustering.statements import Statement

N = 20_000
DIM = 384
K = 60


def _letters(i: int) -> str:
    return "".join(chr(97 + int(d)) for d in str(i))


def test_20k_synthetic_vectors_cluster_quickly_without_a_dense_matrix():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(K, DIM))
    labels = rng.integers(0, K, size=N)
    labels[: N // 100] = -1  # 1% pure noise
    vectors = np.where(labels[:, None] >= 0, centres[np.maximum(labels, 0)], rng.normal(size=(N, DIM)) * 3)
    vectors = vectors + rng.normal(scale=0.9, size=(N, DIM))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    statements = [Statement(id=str(i), text=f"statement {_letters(i)}", node="n", trace_id=f"t{i % 5000}")
                  for i in range(N)]

    dense_bytes = N * N * 4  # a float32 n x n matrix: 1.6 GB
    tracemalloc.start()
    start = time.perf_counter()
    result = cluster_statements(statements, vectors)
    elapsed = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    assert elapsed < 120, f"took {elapsed:.1f}s"
    assert peak < dense_bytes / 8, f"peak {peak / 1e6:.0f} MB"
    assert result.n_units < N  # went through micro-clusters
    assert sum(c.size for c in result.clusters) + len(result.other) == N
    pred = [result.assignment[s.id] or f"o{s.id}" for s in statements]
    keep = labels >= 0
    assert adjusted_rand_score(labels[keep], np.asarray(pred)[keep]) > 0.9
    noise = {s.id for s, lab in zip(statements, labels) if lab < 0}
    assert len(noise & set(result.other)) > 0.9 * len(noise)
