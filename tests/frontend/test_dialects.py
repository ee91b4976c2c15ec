"""The Postgres fast paths and the portable paths answer the same: on Postgres both run over the seeded support
desk and are compared; on SQLite (the embedded default) the portable path is what the pages use, and these
selectors must run at all."""

from __future__ import annotations

import pytest
from django.db import connection

from clear.db import on_postgres
from frontend import graph_queries, queries
from traces.models import Span, Trace

pytestmark = pytest.mark.django_db

DISPATCHED = [queries._distinct, graph_queries.failing_spans, graph_queries._node_rows, graph_queries._spans_at,
              graph_queries._workflow_rows]


def _normalised(value):
    if isinstance(value, list | set):
        return sorted((_normalised(v) for v in value), key=repr)
    if isinstance(value, tuple):
        return tuple(round(v, 3) if isinstance(v, float) else v for v in value)
    if isinstance(value, dict):
        return {k: _normalised(v) for k, v in value.items()}
    return value


def _calls(seeded):
    project = seeded.project
    pks = graph_queries.sample_trace_pks(project=project)
    pairs = graph_queries.failing_spans(project=project, trace_pks=pks)
    assert pairs, "the seed run leaves failing verdicts on spans"
    return [
        (queries._distinct, (Trace, "release"), {"project": project}),
        (queries._distinct, (Span, "node"), {"project": project}),
        (graph_queries.failing_spans, (), {"project": project, "trace_pks": pks}),
        (graph_queries._node_rows, (), {"project": project, "trace_pks": pks}),
        (graph_queries._spans_at, (), {"project": project, "pairs": pairs}),
        (graph_queries._workflow_rows, (), {"project": project, "trace_pks": pks}),
    ]


def test_every_dispatched_query_has_both_paths():
    for function in DISPATCHED:
        assert callable(function.portable) and callable(function.postgres), function.__name__


def test_portable_paths_give_what_the_postgres_paths_give(seeded):
    for function, args, kwargs in _calls(seeded):
        portable = _normalised(function.portable(*args, **kwargs))
        assert portable, function.__name__
        if on_postgres():
            assert portable == _normalised(function.postgres(*args, **kwargs)), function.__name__


def test_pages_use_the_path_of_the_database(seeded):
    project = seeded.project
    assert queries.trace_releases(project=project) == ["r1", "r2"]
    assert "billing_worker" in queries.span_nodes(project=project)
    stats, edges = graph_queries.workflow(project=project,
                                         trace_pks=graph_queries.sample_trace_pks(project=project))
    by_node = {s.node: s for s in stats}
    assert by_node["billing_worker"].bad > 0 and any(e.kind == "handoff" for e in edges)
    assert on_postgres() == (connection.vendor == "postgresql")
