"""Geometry for the server-rendered SVG: the overview's volume and failure-rate charts and the workflow graph's
layered layout. Only numbers and plain strings come out; the templates render them (auto-escaped)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from frontend.queries import Edge, NodeStats, VolumeSeries

# ---------------------------------------------------------------------------------------------------------------
# time series

CHART_W, CHART_H = 760, 170
PAD_L, PAD_R, PAD_T, PAD_B = 44, 10, 10, 24


def _nice_ceiling(value: float) -> float:
    if value <= 0:
        return 1
    exponent = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * exponent:
            return step * exponent
    return 10 * exponent


def _label(moment, unit: str) -> str:
    return moment.strftime("%m-%d %H:%M" if unit in ("minute", "hour") else "%Y-%m-%d")


def volume_chart(series: VolumeSeries | None) -> dict | None:
    """Stacked bars (failed / succeeded / no outcome) per bucket and the failure-rate line over the same axis."""
    if series is None or not series.buckets:
        return None
    buckets = series.buckets
    plot_w, plot_h = CHART_W - PAD_L - PAD_R, CHART_H - PAD_T - PAD_B
    slot = plot_w / len(buckets)
    bar_w = max(1.0, min(28.0, slot * 0.72))
    top = _nice_ceiling(max(b.total for b in buckets))
    scale = plot_h / top
    bars, points = [], []
    for index, bucket in enumerate(buckets):
        x = PAD_L + index * slot + (slot - bar_w) / 2
        base = PAD_T + plot_h
        stack = []
        for css, count in (("fail", bucket.failures), ("ok", bucket.successes),
                           ("none", bucket.total - bucket.judged)):
            height = count * scale
            if count:
                stack.append({"css": css, "y": round(base - height, 2), "h": round(height, 2)})
            base -= height
        rate = bucket.failure_rate
        tip = (f"{_label(bucket.start, series.unit)}: {bucket.total} traces, {bucket.failures} failed"
               + (f" ({rate:.0%})" if rate is not None else ""))
        bars.append({"x": round(x, 2), "w": round(bar_w, 2), "stack": stack, "title": tip})
        if rate is not None:
            points.append({"x": round(PAD_L + index * slot + slot / 2, 2),
                           "y": round(PAD_T + plot_h * (1 - rate), 2), "title": tip})
    label_every = max(1, math.ceil(len(buckets) / 6))
    x_labels = [{"x": round(PAD_L + i * slot + slot / 2, 2), "text": _label(b.start, series.unit)}
                for i, b in enumerate(buckets) if i % label_every == 0]
    y_ticks = [{"y": round(PAD_T + plot_h * (1 - f), 2), "text": f"{top * f:g}"} for f in (0, 0.5, 1)]
    rate_ticks = [{"y": round(PAD_T + plot_h * (1 - f), 2), "text": f"{f:.0%}"} for f in (0, 0.5, 1)]
    return {
        "w": CHART_W, "h": CHART_H, "pad_l": PAD_L, "plot_right": CHART_W - PAD_R, "baseline": PAD_T + plot_h,
        "label_y": CHART_H - 6, "unit": series.unit, "bars": bars, "x_labels": x_labels, "y_ticks": y_ticks,
        "rate_ticks": rate_ticks, "points": points,
        "line": " ".join(f"{p['x']},{p['y']}" for p in points),
        "buckets": buckets,
    }


# ---------------------------------------------------------------------------------------------------------------
# workflow graph

NODE_W, NODE_H = 168, 48
GAP_X, GAP_Y = 36, 70
MARGIN = 24


@dataclass
class GraphNode:
    name: str
    stats: NodeStats | None
    layer: int = 0
    order: float = 0.0
    barycentre: float = 0.0
    x: float = 0.0
    y: float = 0.0
    w: float = NODE_W
    h: float = NODE_H

    @property
    def pass_rate(self) -> float | None:
        return self.stats.pass_rate if self.stats else None

    @property
    def label(self) -> str:
        return self.name if len(self.name) <= 22 else self.name[:21] + "…"

    @property
    def fill(self) -> str:
        rate = self.pass_rate
        if rate is None:
            return "hsl(220, 14%, 94%)"
        return f"hsl({round(120 * rate)}, 72%, 92%)"

    @property
    def stroke(self) -> str:
        rate = self.pass_rate
        if rate is None:
            return "hsl(220, 10%, 60%)"
        return f"hsl({round(120 * rate)}, 62%, 36%)"

    @property
    def cx(self) -> float:
        return self.x + self.w / 2


@dataclass
class GraphEdge:
    source: str
    target: str
    kind: str
    count: int
    path: str = ""
    label_x: float = 0.0
    label_y: float = 0.0
    width: float = 1.0
    back: bool = False


@dataclass
class Graph:
    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[GraphEdge] = field(default_factory=list)
    width: float = 0
    height: float = 0


def _layers(names: list[str], edges: list[Edge], weight: dict[str, int]) -> tuple[dict[str, int], set]:
    """Longest-path layering after dropping the edges that close a cycle (found by a DFS from the entry nodes)."""
    out: dict[str, list[str]] = {n: [] for n in names}
    incoming_calls = {e.target for e in edges if e.kind == "call"}
    for edge in sorted(edges, key=lambda e: (-e.count, e.target)):
        if edge.target not in out[edge.source]:
            out[edge.source].append(edge.target)
    starts = sorted(names, key=lambda n: (n in incoming_calls, -weight.get(n, 0), n))
    state: dict[str, int] = {}
    back: set[tuple[str, str]] = set()
    order: list[str] = []
    for start in starts:
        if start in state:
            continue
        stack = [(start, iter(out[start]))]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                order.append(node)
                stack.pop()
            elif state.get(child) == 1:
                back.add((node, child))
            elif child not in state:
                state[child] = 1
                stack.append((child, iter(out[child])))
    layer = {n: 0 for n in names}
    for node in reversed(order):  # reverse post-order is a topological order of the DAG without back edges
        for child in out[node]:
            if (node, child) not in back:
                layer[child] = max(layer[child], layer[node] + 1)
    return layer, back


def workflow_graph(stats: list[NodeStats], edges: list[Edge]) -> Graph | None:
    by_name = {s.node: s for s in stats if s.node}
    edges = [e for e in edges if e.source and e.target]
    names = sorted(set(by_name) | {e.source for e in edges} | {e.target for e in edges})
    if not names:
        return None
    weight = {n: s.spans for n, s in by_name.items()}
    layer, back = _layers(names, edges, weight)
    nodes = {n: GraphNode(name=n, stats=by_name.get(n), layer=layer[n]) for n in names}
    rows: dict[int, list[GraphNode]] = {}
    for node in sorted(nodes.values(), key=lambda n: (-weight.get(n.name, 0), n.name)):
        rows.setdefault(node.layer, []).append(node)
    for row in rows.values():
        for index, node in enumerate(row):
            node.order = index
    neighbours: dict[str, list[str]] = {n: [] for n in names}
    for edge in edges:
        neighbours[edge.source].append(edge.target)
        neighbours[edge.target].append(edge.source)
    for sweep in range(6):  # barycentre ordering: each node moves towards the mean position of its neighbours
        layer_ids = sorted(rows) if sweep % 2 == 0 else sorted(rows, reverse=True)
        for layer_id in layer_ids:
            row = rows[layer_id]
            for node in row:
                others = [nodes[m].order for m in neighbours[node.name] if nodes[m].layer != layer_id]
                node.barycentre = sum(others) / len(others) if others else node.order
            row.sort(key=lambda n: (n.barycentre, n.order))
            centre = (len(row) - 1) / 2
            for index, node in enumerate(row):
                node.order = index - centre
    widest = max(len(row) for row in rows.values())
    width = 2 * MARGIN + widest * NODE_W + (widest - 1) * GAP_X
    for layer_id, row in rows.items():
        row_w = len(row) * NODE_W + (len(row) - 1) * GAP_X
        left = (width - row_w) / 2
        for index, node in enumerate(row):
            node.x = round(left + index * (NODE_W + GAP_X), 1)
            node.y = MARGIN + layer_id * (NODE_H + GAP_Y)
    height = 2 * MARGIN + (max(rows) + 1) * NODE_H + max(rows) * GAP_Y
    top_count = max((e.count for e in edges), default=1)
    graph_edges = []
    for edge in edges:
        source, target = nodes[edge.source], nodes[edge.target]
        is_back = (edge.source, edge.target) in back or target.layer <= source.layer
        item = GraphEdge(edge.source, edge.target, edge.kind, edge.count, back=is_back,
                         width=round(1 + 2.5 * math.log1p(edge.count) / math.log1p(top_count), 2))
        if not is_back:
            # Calls leave from the left half, hand-offs from the right half, so parallel edges stay apart.
            shift = -12 if edge.kind == "call" else 12
            x1, y1 = source.cx + shift, source.y + source.h
            x2, y2 = target.cx + shift, target.y
            bend = (y2 - y1) / 2
            item.path = f"M{x1},{y1} C{x1},{y1 + bend} {x2},{y2 - bend} {x2},{y2 - 6}"
            item.label_x, item.label_y = (x1 + x2) / 2 + 4, (y1 + y2) / 2
        else:
            x1, y1 = source.x + source.w, source.y + source.h / 2
            x2, y2 = target.x + target.w, target.y + target.h / 2
            reach = max(x1, x2) + 40 + 10 * abs(source.layer - target.layer)
            item.path = f"M{x1},{y1} C{reach},{y1} {reach},{y2} {x2 + 6},{y2}"
            item.label_x, item.label_y = reach - 8, (y1 + y2) / 2
            width = max(width, reach + MARGIN)
        graph_edges.append(item)
    return Graph(nodes=list(nodes.values()), edges=graph_edges, width=width, height=height)
