"""Rendering trace content (escaped, quotes marked, long text folded) and the server-side chart and graph layout."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from frontend.charts import volume_chart, workflow_graph
from diagnosis.selectors import NodeStats
from frontend.render import FOLD_CHARS, highlight, quote_pattern, render_value
from traces.selectors import Edge, VolumeBucket, VolumeSeries
from traces.selectors.graph import _handoffs


def test_highlight_escapes_everything_and_marks_quotes():
    html, marked = highlight('<b>x</b> said "INV-1" <script>', [quote_pattern('said "inv-1"')])
    assert marked
    assert str(html) == '&lt;b&gt;x&lt;/b&gt; <mark>said &quot;INV-1&quot;</mark> &lt;script&gt;'


def test_a_quote_matches_across_json_layout():
    html, marked = render_value({"invoice_id": "INV-9011", "n": 1}, ['{"invoice_id": "INV-9011"'])
    assert marked and "<mark>{\n  &quot;invoice_id&quot;: &quot;INV-9011&quot;</mark>" in html


def test_a_quote_that_is_html_is_marked_as_text():
    payload = '<img src=x onerror="alert(1)">'
    html, marked = render_value("before " + payload + " after", [payload])
    assert marked and "<img" not in html and "<mark>&lt;img src=x onerror=&quot;alert(1)&quot;&gt;</mark>" in html


def test_chat_messages_render_by_role_with_text_as_text():
    messages = [{"role": "user", "parts": [{"type": "text", "content": "Line one\nLine <two>"}]},
                {"role": "assistant", "parts": [{"type": "tool_call", "name": "lookup", "arguments": {"id": 7}}]}]
    html, _ = render_value(messages)
    assert 'class="role role-user">user<' in html and "Line one\nLine &lt;two&gt;" in html
    assert "tool call lookup" in html and "&quot;id&quot;: 7" in html


def test_long_text_is_folded_and_opened_when_evidence_is_inside():
    text = "x" * (FOLD_CHARS + 10) + " the needle"
    folded, _ = render_value(text)
    assert '<details class="fold">' in folded
    opened, marked = render_value(text, ["the needle"])
    assert marked and '<details class="fold" open>' in opened and "evidence inside" in opened
    short, _ = render_value("short")
    assert "<details" not in short and '<pre class="text">short</pre>' in short


def test_empty_and_odd_values():
    assert "empty" in render_value(None)[0]
    assert "&quot;a&quot;" in render_value(["a", 1, None])[0]
    assert quote_pattern(" ") is None and quote_pattern("a") is None


def test_volume_chart_geometry():
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    series = VolumeSeries(unit="hour", buckets=[
        VolumeBucket(start=start, total=10, failures=5, successes=5),
        VolumeBucket(start=start + timedelta(hours=1)),
        VolumeBucket(start=start + timedelta(hours=2), total=4, failures=0, successes=2),
    ])
    chart = volume_chart(series)
    assert len(chart["bars"]) == 3 and chart["bars"][1]["stack"] == []
    first = {s["css"]: s for s in chart["bars"][0]["stack"]}
    assert set(first) == {"fail", "ok"} and first["fail"]["h"] == first["ok"]["h"]
    assert [p["title"].split(": ")[0] for p in chart["points"]] == ["01-01 00:00", "01-01 02:00"]  # no rate, no point
    assert chart["points"][0]["y"] < chart["points"][1]["y"]  # 50% is above 0%
    assert volume_chart(None) is None


def _stats(name, spans=10, bad=0):
    return NodeStats(node=name, spans=spans, traces=spans, errors=bad, failing=0, bad=bad)


def test_workflow_layout_layers_follow_the_flow_and_survive_cycles():
    stats = [_stats("desk"), _stats("planner"), _stats("worker", bad=5), _stats("writer")]
    edges = [Edge("desk", "planner", "call", 10), Edge("desk", "worker", "call", 10),
             Edge("desk", "writer", "call", 10),
             Edge("planner", "worker", "handoff", 10), Edge("worker", "writer", "handoff", 10),
             Edge("writer", "planner", "handoff", 1)]  # a retry loop back to the planner
    graph = workflow_graph(stats, edges)
    layer = {n.name: n.layer for n in graph.nodes}
    assert layer == {"desk": 0, "planner": 1, "worker": 2, "writer": 3}
    nodes = {n.name: n for n in graph.nodes}
    assert nodes["worker"].hue == 0 and nodes["desk"].hue == 120  # 50% pass is red, 100% green
    back = [e for e in graph.edges if e.back]
    assert [(e.source, e.target) for e in back] == [("writer", "planner")]
    assert all(e.path.startswith("M") for e in graph.edges)
    assert all(0 <= n.x and n.x + n.w <= graph.width and n.y + n.h <= graph.height for n in graph.nodes)
    assert workflow_graph([], []) is None


def test_handoffs_skip_siblings_that_ran_side_by_side():
    t = datetime(2025, 1, 1, tzinfo=timezone.utc)

    def s(node, start, end):
        return node, t + timedelta(seconds=start), t + timedelta(seconds=end)

    group = [s("planner", 0, 1), s("orders", 1, 3), s("billing", 1, 4), s("mediator", 4, 5), s("writer", 5, 6)]
    assert sorted(_handoffs(group)) == sorted([("planner", "orders"), ("planner", "billing"),
                                               ("orders", "mediator"), ("billing", "mediator"),
                                               ("mediator", "writer")])
