"""The Postgres fast paths and the portable paths answer the same: on Postgres both run over the seeded support
desk and are compared; on SQLite (the embedded default) the portable path is what the pages use, and these
selectors must run at all."""

from __future__ import annotations

import pytest
from django.db import connection

from clear.db import on_postgres
from diagnosis.selectors import feedback_failing_spans, node_workflow_get
from traces.models import Span, Trace
from traces.selectors import (
    TraceFilter,
    span_node_figures,
    span_node_list,
    span_node_status_list,
    trace_list_filtered,
    trace_release_list,
    trace_sample_pks,
)
from traces.selectors import traces as trace_reads
from traces.selectors.graph import _workflow_rows

pytestmark = pytest.mark.django_db

DISPATCHED = [trace_reads._distinct, feedback_failing_spans, span_node_figures, span_node_status_list, _workflow_rows]


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
    pks = trace_sample_pks(project=project)
    pairs = feedback_failing_spans(project=project, trace_pks=pks)
    assert pairs, "the seed run leaves failing verdicts on spans"
    return [
        (trace_reads._distinct, (Trace, "release"), {"project": project}),
        (trace_reads._distinct, (Span, "node"), {"project": project}),
        (feedback_failing_spans, (), {"project": project, "trace_pks": pks}),
        (span_node_figures, (), {"project": project, "trace_pks": pks}),
        (span_node_status_list, (), {"project": project, "pairs": pairs}),
        (_workflow_rows, (), {"project": project, "trace_pks": pks}),
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


def test_the_tag_filter_finds_the_traces_with_every_tag(seeded):
    project = seeded.project
    traces = list(Trace.objects.filter(project=project).order_by("pk")[:3])
    for trace, tags in zip(traces, (["vip", "eu"], ["vip"], ["eu", "vip", "beta"]), strict=True):
        Trace.objects.filter(pk=trace.pk).update(tags=tags)
    expected = {("vip",): set(traces), ("vip", "eu"): {traces[0], traces[2]}, ("beta", "eu", "eu"): {traces[2]},
                ("vi",): set(), ("nope", "vip"): set()}
    for tags, wanted in expected.items():
        assert set(trace_list_filtered(project=project, filters=TraceFilter(tags=tags))) == wanted, tags


def test_pages_use_the_path_of_the_database(seeded):
    project = seeded.project
    assert trace_release_list(project=project) == ["r1", "r2"]
    assert "billing_worker" in span_node_list(project=project)
    stats, edges = node_workflow_get(project=project, trace_pks=trace_sample_pks(project=project))
    by_node = {s.node: s for s in stats}
    assert by_node["billing_worker"].bad > 0 and any(e.kind == "handoff" for e in edges)
    assert on_postgres() == (connection.vendor == "postgresql")
