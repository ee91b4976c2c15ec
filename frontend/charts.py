"""Geometry for the server-rendered SVG: the overview's volume and failure-rate charts and the workflow graph's
layered layout. Only numbers and plain strings come out; the templates render them (auto-escaped)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from diagnosis.selectors import NodeStats
from traces.selectors import Edge, VolumeSeries

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
    if unit == "month":
        return moment.strftime("%Y-%m")
    return moment.strftime("%m-%d %H:%M" if unit in ("minute", "hour") else "%Y-%m-%d")


_LABEL_ROOM = 70  # px an axis label needs


def _duration_words(gap) -> str:
    days = gap.total_seconds() / 86400
    if days >= 60:
        return f"about {round(days / 30.44)} months"
    if days >= 1:
        return f"{round(days)} day{'s' if round(days) != 1 else ''}"
    hours = max(1, round(gap.total_seconds() / 3600))
    return f"{hours} hour{'s' if hours != 1 else ''}"


def volume_chart(series: VolumeSeries | None) -> dict | None:
    """Stacked bars (failed / succeeded / no outcome) per bucket and the failure-rate line over the same axis. A
    stretch without traces cut out of the series takes one slot, drawn as a break, and the rate line stops at it."""
    if series is None or not series.buckets:
        return None
    buckets = series.buckets
    slots = len(buckets) + series.skips
    plot_w, plot_h = CHART_W - PAD_L - PAD_R, CHART_H - PAD_T - PAD_B
    slot = plot_w / slots
    bar_w = max(1.0, min(28.0, slot * 0.72))
    top = _nice_ceiling(max(b.total for b in buckets))
    scale = plot_h / top
    bars, breaks, lines, x_labels = [], [], [[]], []
    label_every = max(1, math.ceil(slots / 6))
    last_label = -label_every
    index = 0
    for bucket in buckets:
        if bucket.skipped_before is not None:
            centre = round(PAD_L + index * slot + slot / 2, 2)
            breaks.append({"x": centre, "title": f"no traces for {_duration_words(bucket.skipped_before)}"})
            lines.append([])
            index += 1
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
            lines[-1].append({"x": round(PAD_L + index * slot + slot / 2, 2),
                              "y": round(PAD_T + plot_h * (1 - rate), 2), "title": tip})
        # The first bucket after a break is labelled, since the axis jumps there: a label too close before it gives
        # way.
        if index - last_label >= label_every or bucket.skipped_before is not None:
            if x_labels and (index - last_label) * slot < _LABEL_ROOM:
                x_labels.pop()
            centre = PAD_L + index * slot + slot / 2
            anchor = "end" if centre > CHART_W - _LABEL_ROOM / 2 else "middle"  # not cut off at the right edge
            x_labels.append({"x": round(CHART_W - 1 if anchor == "end" else centre, 2), "anchor": anchor,
                             "text": _label(bucket.start, series.unit)})
            last_label = index
        index += 1
    points = [p for line in lines for p in line]
    y_ticks = [{"y": round(PAD_T + plot_h * (1 - f), 2), "text": f"{top * f:g}"} for f in (0, 0.5, 1)]
    rate_ticks = [{"y": round(PAD_T + plot_h * (1 - f), 2), "text": f"{f:.0%}"} for f in (0, 0.5, 1)]
    return {
        "w": CHART_W, "h": CHART_H, "pad_l": PAD_L, "plot_right": CHART_W - PAD_R, "baseline": PAD_T + plot_h,
        "top": PAD_T, "label_y": CHART_H - 6, "unit": series.unit, "bars": bars, "breaks": breaks,
        "x_labels": x_labels, "y_ticks": y_ticks, "rate_ticks": rate_ticks, "points": points,
        "lines": [" ".join(f"{p['x']},{p['y']}" for p in line) for line in lines if len(line) > 1],
        "buckets": buckets, "undated": series.undated,
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
    insights: int = 0  # listed node-level insights at this node (the node links to them when there are any)

    @property
    def pass_rate(self) -> float | None:
        return self.stats.pass_rate if self.stats else None

    @property
    def label(self) -> str:
        return self.name if len(self.name) <= 22 else self.name[:21] + "…"

    @property
    def hue(self) -> int | None:
        """Red at a 50% pass rate or below, amber at 75%, green at 100%: the range where nodes differ."""
        rate = self.pass_rate
        return None if rate is None else round(120 * max(0.0, min(1.0, (rate - 0.5) / 0.5)))

    @property
    def fill(self) -> str:
        return "hsl(220, 14%, 94%)" if self.hue is None else f"hsl({self.hue}, 80%, 90%)"

    @property
    def stroke(self) -> str:
        return "hsl(220, 10%, 60%)" if self.hue is None else f"hsl({self.hue}, 70%, 35%)"

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
    label_anchor: str = "start"


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
    # Edges between adjacent layers go straight down; longer calls run in lanes on the left, back edges and longer
    # hand-offs in lanes on the right, each lane one step further out, shortest innermost.
    long_left, long_right = [], []
    for edge in edges:
        source, target = nodes[edge.source], nodes[edge.target]
        span = target.layer - source.layer
        if span == 1:
            continue
        if span > 1 and edge.kind == "call":
            long_left.append(edge)
        else:
            long_right.append(edge)
    long_left.sort(key=lambda e: (nodes[e.target].layer - nodes[e.source].layer, nodes[e.target].layer))
    long_right.sort(key=lambda e: (abs(nodes[e.target].layer - nodes[e.source].layer), nodes[e.target].layer))
    lane = 14
    left_room = (lane * len(long_left) + 24) if long_left else 0
    right_room = (lane * len(long_right) + 24) if long_right else 0
    widest = max(len(row) for row in rows.values())
    inner = widest * NODE_W + (widest - 1) * GAP_X
    width = 2 * MARGIN + left_room + inner + right_room
    for layer_id, row in rows.items():
        row_w = len(row) * NODE_W + (len(row) - 1) * GAP_X
        left = MARGIN + left_room + (inner - row_w) / 2
        for index, node in enumerate(row):
            node.x = round(left + index * (NODE_W + GAP_X), 1)
            node.y = MARGIN + layer_id * (NODE_H + GAP_Y)
    height = 2 * MARGIN + (max(rows) + 1) * NODE_H + max(rows) * GAP_Y
    left_edge = MARGIN + left_room
    right_edge = MARGIN + left_room + inner
    top_count = max((e.count for e in edges), default=1)
    lanes = {id(e): i for i, e in enumerate(long_left)} | {id(e): i for i, e in enumerate(long_right)}
    left_ids = {id(e) for e in long_left}
    graph_edges = []
    r = 8  # corner radius
    for edge in edges:
        source, target = nodes[edge.source], nodes[edge.target]
        shift = -12 if edge.kind == "call" else 12  # calls enter on the left half, hand-offs on the right
        item = GraphEdge(edge.source, edge.target, edge.kind, edge.count,
                         back=target.layer <= source.layer,
                         width=round(1 + 2.5 * math.log1p(edge.count) / math.log1p(top_count), 2))
        tx, ty = target.cx + shift, target.y
        if target.layer - source.layer == 1:
            x1, y1 = source.cx + shift, source.y + source.h
            bend = (ty - y1) / 2
            item.path = f"M{x1},{y1} C{x1},{y1 + bend} {tx},{ty - bend} {tx},{ty - 2}"
            item.label_x, item.label_y = (x1 + tx) / 2 + 5, (y1 + ty) / 2
        elif id(edge) in left_ids:
            out = left_edge - 16 - lane * lanes[id(edge)]
            sy, gap_y = source.y + source.h / 2, ty - GAP_Y / 2 + 6 * (lanes[id(edge)] % 3)
            item.path = (f"M{source.x},{sy} L{out + r},{sy} Q{out},{sy} {out},{sy + r} L{out},{gap_y - r} "
                         f"Q{out},{gap_y} {out + r},{gap_y} L{tx - r},{gap_y} Q{tx},{gap_y} {tx},{gap_y + r} "
                         f"L{tx},{ty - 2}")
            item.label_x, item.label_y = out - 3, (sy + gap_y) / 2
            item.label_anchor = "end"
        else:
            out = right_edge + 16 + lane * lanes[id(edge)]
            sx, sy = source.x + source.w, source.y + source.h / 2
            ex, ey = target.x + target.w, target.y + target.h / 2
            item.path = (f"M{sx},{sy} L{out - r},{sy} Q{out},{sy} {out},{sy + (r if ey > sy else -r)} "
                         f"L{out},{ey - (r if ey > sy else -r)} Q{out},{ey} {out - r},{ey} L{ex + 2},{ey}")
            item.label_x, item.label_y = out + 3, (sy + ey) / 2
        graph_edges.append(item)
    return Graph(nodes=list(nodes.values()), edges=graph_edges, width=width, height=height)
