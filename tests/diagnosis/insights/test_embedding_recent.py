"""The statement vectors a process read or computed stay in its memory (diagnosis/insights/embedding.py): a refresh
or a second project that embeds the same statements neither runs the model nor reads the table again."""

import numpy as np
import pytest

from diagnosis.insights import embedding
from diagnosis.insights.embedding import embedder_get, statement_vectors
from diagnosis.models import EmbeddingCache

pytestmark = pytest.mark.django_db

TEXTS = ["The mediator drops the order id the tracking tool returned.",
         "invoice_lookup is called three times with identical arguments."]


@pytest.fixture
def recent(monkeypatch):
    monkeypatch.setattr(embedding, "_RECENT", type(embedding._RECENT)())
    return embedding._RECENT


def test_vectors_computed_once_are_served_from_memory_even_with_the_table_emptied(recent, django_assert_num_queries):
    embedder = embedder_get()
    first, keys, _ = statement_vectors(TEXTS, embedder)
    computed = embedder.computed
    assert set(keys) <= set(recent) and EmbeddingCache.objects.filter(text_hash__in=keys).count() == 2
    EmbeddingCache.objects.all().delete()

    with django_assert_num_queries(0):
        again, again_keys, _ = statement_vectors(TEXTS, embedder)
    assert embedder.computed == computed and again_keys == keys
    np.testing.assert_array_equal(again, first)


def test_vectors_read_from_the_table_are_kept_and_the_oldest_leave_first(recent, monkeypatch):
    embedder = embedder_get()
    _, keys, _ = statement_vectors(TEXTS, embedder)
    recent.clear()
    for key in keys:
        assert set(embedder.cache.get_many([key])) == {key}  # from the table
    assert list(recent) == keys

    monkeypatch.setattr(embedding, "_RECENT_MAX", 2)
    _, third, _ = statement_vectors(["A write passes a value the user never gave."], embedder)
    assert list(recent) == [keys[1], third[0]]


@pytest.mark.parametrize("setting, expected", [(1, 1), (0, None)])
def test_the_embedding_model_runs_on_the_threads_the_setting_names(settings, monkeypatch, setting, expected):
    import os

    monkeypatch.setattr(embedding, "_EMBEDDERS", {})
    settings.CLEAR_EMBEDDING_THREADS = setting
    assert embedder_get().num_threads == (expected or os.cpu_count())
