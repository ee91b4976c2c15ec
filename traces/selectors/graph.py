"""Per-node span figures and the workflow's transitions, over the newest traces of a project.

The workflow and nodes pages look at the newest GRAPH_TRACE_SAMPLE traces: enough to see every path the agent takes
and its current health, bounded so a project with millions of spans costs what one with thousands does. The sampled
traces are passed to Postgres as one array of pks, so their spans are read by index, never by a scan of every span,
together with the traces' first-received days (`trace_days_for`), so only those days' span partitions are read.
What the judges said about those spans is added by `diagnosis.selectors` (node figures with failing verdicts).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.db import connection
from django.db.models import Count, Q

from clear.db import postgres_fast_path
from clear.projects.models import Project
from traces.models import Span
from traces.selectors.traces import TraceFilter, release_filter_value, trace_days_for, trace_list_filtered

GRAPH_TRACE_SAMPLE = 2000
_SIBLING_GROUP_MAX = 200


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    kind: str  # "call" (parent span → child span) | "handoff" (one sibling agent span, then the next)
    count: int


def trace_sample_pks(*, project: Project, release: str = "", sample: int = GRAPH_TRACE_SAMPLE) -> list[int]:
    """The pks of the newest `sample` traces (of `release`, as the lists name it): one index scan."""
    traces = trace_list_filtered(project=project, filters=TraceFilter(release=release_filter_value(release)))
    pks = list(traces.filter(start_time__isnull=False).order_by("-start_time", "-pk")
               .values_list("pk", flat=True)[:sample])
    if len(pks) < sample:  # a small project: traces with no start time yet (still arriving) too
        pks += traces.filter(start_time__isnull=True).order_by("-pk").values_list("pk", flat=True)[:sample - len(pks)]
    return pks


def _node_figures_postgres(*, project: Project, trace_pks: list[int]) -> dict[str, dict]:
    # Raw SQL for one array parameter: `trace_id__in` would send (and psycopg split) 2,000 placeholders.
    col = {f.name: f.column for f in Span._meta.concrete_fields}
    sql = (f"SELECT {col['node']}, count(*), count(DISTINCT {col['trace']}), "
           f"count(*) FILTER (WHERE {col['status']} = 'error'), count(*) FILTER (WHERE {col['kind']} = %s) "
           f"FROM {Span._meta.db_table} WHERE {col['project']} = %s AND {col['trace']} = ANY(%s) "
           f"AND {col['trace_day']} = ANY(%s) GROUP BY 1")
    days = trace_days_for(project=project, trace_pks=trace_pks)
    with connection.cursor() as cursor:
        cursor.execute(sql, [Span.Kind.AGENT, project.pk, trace_pks, days])
        return {node: {"spans": n, "traces": traces, "errors": errors, "agent_spans": agents}
                for node, n, traces, errors, agents in cursor.fetchall()}


@postgres_fast_path(_node_figures_postgres)
def span_node_figures(*, project: Project, trace_pks: list[int]) -> dict[str, dict]:
    """{node: {spans, traces, errors, agent_spans}} over these traces' spans; one grouped query (after the traces'
    days)."""
    days = trace_days_for(project=project, trace_pks=trace_pks)
    rows = (Span.objects.filter(project=project, trace_id__in=trace_pks, trace_day__in=days).order_by().values("node")
            .annotate(spans=Count("pk"), traces=Count("trace", distinct=True),
                      errors=Count("pk", filter=Q(status="error")),
                      agent_spans=Count("pk", filter=Q(kind=Span.Kind.AGENT))))
    return {r.pop("node"): r for r in rows}


def _node_status_list_postgres(*, project: Project, pairs: set[tuple[int, str]]) -> list[tuple[str, str]]:
    """One probe of the (trace, span id) unique index per pair (an IN list on each column would be planned as a
    scan)."""
    if not pairs:
        return []
    col = {f.name: f.column for f in Span._meta.concrete_fields}
    sql = (f"SELECT s.{col['node']}, s.{col['status']} FROM unnest(%s::bigint[], %s::text[]) AS f(t, sid) "
           f"JOIN {Span._meta.db_table} AS s ON s.{col['trace']} = f.t AND s.{col['span_id']} = f.sid "
           f"WHERE s.{col['project']} = %s AND s.{col['trace_day']} = ANY(%s)")
    traces, span_ids = zip(*sorted(pairs), strict=True)
    days = trace_days_for(project=project, trace_pks=set(traces))
    with connection.cursor() as cursor:
        cursor.execute(sql, [list(traces), list(span_ids), project.pk, days])
        return cursor.fetchall()


@postgres_fast_path(_node_status_list_postgres)
def span_node_status_list(*, project: Project, pairs: set[tuple[int, str]]) -> list[tuple[str, str]]:
    """(node, status) of the spans named by (trace pk, span id) pairs."""
    if not pairs:
        return []
    traces = {t for t, _ in pairs}
    rows = (Span.objects.filter(project=project, trace_id__in=traces,
                                trace_day__in=trace_days_for(project=project, trace_pks=traces))
            .values_list("trace_id", "span_id", "node", "status"))
    return [(node, status) for trace, span_id, node, status in rows if (trace, span_id) in pairs]


def _handoffs(group: list[tuple]) -> list[tuple[str, str]]:
    """(from node, to node) for one set of sibling agent spans [(node, start, end)] in start order: each span's
    immediate predecessors are the siblings that ended before it started with no other such sibling in between,
    so two agents running side by side hand off to whoever runs after both, never to each other."""
    if len(group) > _SIBLING_GROUP_MAX:  # pathological fan-out: consecutive pairs only
        return [(a[0], b[0]) for a, b in zip(group, group[1:], strict=False)]
    pairs = []
    for index, (node, start, _end) in enumerate(group):
        before = [p for p in group[:index] if p[2] <= start]
        for previous in before:
            if not any(other is not previous and previous[2] <= other[1] for other in before):
                pairs.append((previous[0], node))
    return pairs


def _workflow_rows_postgres(*, project: Project, trace_pks: list[int]) -> list[tuple]:
    """One statement (after the traces' days), one read of these traces' spans (a materialised CTE), with a hash
    self-join for the calls; times as epoch seconds: tens of thousands of timezone-aware datetimes cost more to load
    than the rest of the page."""
    table, col = Span._meta.db_table, {f.name: f.column for f in Span._meta.concrete_fields}
    sql = (f"WITH s AS MATERIALIZED (SELECT {col['id']} AS id, {col['trace']} AS t, {col['span_id']} AS sid, "
           f"{col['parent_span_id']} AS parent, {col['node']} AS node, {col['kind']} AS kind, "
           f"{col['status']} AS status, extract(epoch FROM {col['start_time']})::float8 AS t0, "
           f"extract(epoch FROM coalesce({col['end_time']}, {col['start_time']}))::float8 AS t1 "
           f"FROM {table} WHERE {col['project']} = %s AND {col['trace']} = ANY(%s) AND {col['trace_day']} = ANY(%s)) "
           "SELECT 'n', node, NULL, count(*), count(DISTINCT t), count(*) FILTER (WHERE status = 'error'), "
           "count(*) FILTER (WHERE kind = %s), NULL::float8, NULL::float8 FROM s GROUP BY node "
           "UNION ALL SELECT 'c', p.node, c.node, count(*), NULL, NULL, NULL, NULL, NULL FROM s AS c "
           "JOIN s AS p ON p.t = c.t AND p.sid = c.parent WHERE c.parent <> '' GROUP BY p.node, c.node "
           "UNION ALL SELECT 'a', node, parent, t, id, NULL, NULL, t0, t1 FROM s WHERE kind = %s")
    days = trace_days_for(project=project, trace_pks=trace_pks)
    with connection.cursor() as cursor:
        cursor.execute(sql, [project.pk, trace_pks, days, Span.Kind.AGENT, Span.Kind.AGENT])
        return cursor.fetchall()


@postgres_fast_path(_workflow_rows_postgres)
def _workflow_rows(*, project: Project, trace_pks: list[int]) -> list[tuple]:
    """From one read of these traces' spans: per node ("n", node, None, spans, traces, errors, agent spans, None,
    None), calls ("c", parent node, node, spans, None...) and the AGENT spans ("a", node, parent span id, trace pk,
    pk, None, None, start, end; times as epoch seconds)."""
    days = trace_days_for(project=project, trace_pks=trace_pks)
    spans = list(Span.objects.filter(project=project, trace_id__in=trace_pks, trace_day__in=days).values_list(
        "pk", "trace_id", "span_id", "parent_span_id", "node", "kind", "status", "start_time", "end_time"))
    node_of = {(trace, span_id): node for _pk, trace, span_id, _parent, node, *_rest in spans}
    nodes: dict[str, list] = defaultdict(lambda: [0, set(), 0, 0])
    calls: dict[tuple[str, str], int] = defaultdict(int)
    agents = []
    for pk, trace, _span_id, parent, node, kind, status, start, end in spans:
        figures = nodes[node]
        figures[0] += 1
        figures[1].add(trace)
        figures[2] += status == "error"
        figures[3] += kind == Span.Kind.AGENT
        if parent and (trace, parent) in node_of:
            calls[(node_of[(trace, parent)], node)] += 1
        if kind == Span.Kind.AGENT:
            t0 = start.timestamp()
            agents.append(("a", node, parent, trace, pk, None, None, t0, end.timestamp() if end else t0))
    rows: list[tuple] = [("n", node, None, n, len(traces), errors, agent_spans, None, None)
                         for node, (n, traces, errors, agent_spans) in nodes.items()]
    rows += [("c", parent, child, n, None, None, None, None, None) for (parent, child), n in calls.items()]
    return rows + agents


def span_workflow(*, project: Project, trace_pks: list[int]) -> tuple[dict[str, dict], list[Edge]]:
    """The node figures ({node: {spans, traces, errors, agent_spans}}, as span_node_figures) and the transitions of
    these traces, from one read of their spans: a span of node A with a child of node B is a call; sequential AGENT
    spans under one parent are a hand-off (B started after A ended, with no sibling agent in between).
    Self-transitions are left out."""
    rows: dict[str, dict] = {}
    edges: list[Edge] = []
    siblings: dict[tuple[int, str], list[tuple]] = defaultdict(list)
    for what, a, b, n1, n2, n3, n4, t0, t1 in _workflow_rows(project=project, trace_pks=trace_pks):
        if what == "n":
            rows[a] = {"spans": n1, "traces": n2, "errors": n3, "agent_spans": n4}
        elif what == "c":
            if a != b:
                edges.append(Edge(a, b, "call", n1))
        else:  # an agent span: node a, parent span id b, trace n1, pk n2
            siblings[(n1, b)].append((t0, n2, a, max(t1, t0)))
    handoffs: dict[tuple[str, str], int] = defaultdict(int)
    for group in siblings.values():
        group.sort()
        for pair in _handoffs([(node, start, end) for start, _pk, node, end in group]):
            handoffs[pair] += 1
    edges += [Edge(a, b, "handoff", n) for (a, b), n in handoffs.items() if a and b and a != b]
    return rows, sorted(edges, key=lambda e: (e.kind, -e.count, e.source, e.target))
