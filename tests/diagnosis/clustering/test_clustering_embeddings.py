import os
import socket
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from diagnosis.clustering.embeddings import Embedder, InMemoryCache, default_model_path


def test_default_model_is_the_one_shipped_in_site_packages():
    path = Path(default_model_path())
    assert (path / "model.safetensors").is_file()
    assert Path(sysconfig.get_paths()["purelib"]).resolve() in path.resolve().parents


def test_loads_offline_and_caches(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def no_network(*args, **kwargs):
        raise AssertionError("the embedder tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    cache = InMemoryCache()
    emb = Embedder(cache=cache)
    texts = ["The agent looped on the same search.", "It invented a refund policy.",
             "The agent looped on the same search."]
    first = emb.embed(texts)
    assert first.dtype == np.float32 and first.shape == (3, 384)
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(first[0], first[2])
    assert emb.computed == 2  # the repeated text is computed once
    assert len(cache) == 2

    again = emb.embed(list(reversed(texts)))
    assert emb.computed == 2  # nothing computed the second time
    assert np.array_equal(again[::-1], first)

    # a fresh embedder on the same cache never even loads the model
    fresh = Embedder(cache=cache)
    assert np.array_equal(fresh.embed(texts), first)
    assert fresh.computed == 0 and not fresh.loaded
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_paraphrases_are_closer_than_unrelated(embedder):
    v = embedder.embed([
        "The agent never looked up the order before answering.",
        "It answered about the shipment without calling the order lookup tool first.",
        "The user wrote in Spanish but the agent replied in English.",
    ])
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2


class CountingCache(InMemoryCache):
    def __init__(self):
        super().__init__()
        self.gets = 0
        self.puts = 0

    def get_many(self, hashes):
        self.gets += 1
        return super().get_many(hashes)

    def put_many(self, items):
        self.puts += 1
        super().put_many(items)


def test_pluggable_cache_interface_and_model_identity_in_keys(embedder):
    cache = CountingCache()
    emb = Embedder(cache=cache)
    emb.embed(["One statement about retries.", "Another statement about timeouts."])
    assert cache.gets == 1 and cache.puts == 1
    other = Embedder(model=default_model_path(), cache=cache)  # same files, different id: no reuse
    assert other.hashes(["x"]) != emb.hashes(["x"])


def test_empty_input(embedder):
    assert embedder.embed([]).shape[0] == 0


@pytest.mark.parametrize("bad", [None])
def test_cache_default_is_in_memory(bad):
    assert isinstance(Embedder(cache=bad).cache, InMemoryCache)


def test_model_setting_falls_back_to_the_bundled_model():
    # the Django layer passes settings.CLEAR_EMBEDDING_MODEL, which may be unset
    for value in (None, ""):
        emb = Embedder(model=value)
        assert emb.model_name == default_model_path() and emb.model_id == "all-MiniLM-L6-v2"
        assert not emb.loaded
    assert Embedder(model="some/other-model").model_id == "some/other-model"
    assert Embedder(quantize=True).model_id == "all-MiniLM-L6-v2+int8"
