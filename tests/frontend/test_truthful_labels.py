"""Labels that say what is true (issue 26, items 3 and 12): the Insights list's Level column holds the level and the
node has its own column; an insight's trend by release says it counts traces; Markdown in titles is rendered (code
spans as <code>, escaped), never shown raw, on every page kind; no "tokens 202 tokens"; the heat map's run picker
names runs in words and opens on a run with node-level insights; the Releases page formats its times."""

from __future__ import annotations

import json
import re
from datetime import datetime
from html import unescape
from html.parser import HTMLParser

import pytest

from diagnosis.models import DiagnosisRun, Feedback, Insight, InsightOccurrence
from diagnosis.services.insights import insights_build
from diagnosis.tickets.models import Ticket
from evolution.models import EvolutionJob, EvolutionTarget
from evolution.selectors import evolution_target_releases_root
# Artifacts and release roots in tmp (the evolution tests' autouse fixture).
from tests.evolution.conftest import evolution_dir  # noqa: F401
from tests.evolution.fixture_repo import CONFIG
from tests.frontend.conftest import Seeded, client_for
from tests.frontend.test_evolution_pages import HOT_SWAP, releases_made

pytestmark = pytest.mark.django_db

HOSTILE = "<img src=x onerror=alert(1)>"


@pytest.fixture
def insighted(seeded) -> Seeded:
    assert insights_build(run=seeded.run) is not None
    return seeded


class _Table(HTMLParser):
    """The header texts and the rows' cell texts of the table carrying data-testid=`testid`; `keys` has each body
    row's data-insight."""

    def __init__(self, testid: str):
        super().__init__()
        self.testid, self.depth, self.headers, self.rows, self.keys = testid, 0, [], [], []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and (self.depth or attrs.get("data-testid") == self.testid):
            self.depth += 1
        elif self.depth and tag == "tr":
            self.rows.append([])
            self.keys.append(attrs.get("data-insight"))
        elif self.depth and tag in ("th", "td"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "table" and self.depth:
            self.depth -= 1
        elif self.depth and tag in ("th", "td") and self._cell is not None:
            text = " ".join("".join(self._cell).split())
            (self.headers if tag == "th" and len(self.rows) <= 1 else self.rows[-1]).append(text)
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _table(html: str, testid: str) -> tuple[list[str], list[list[str]]]:
    parser = _Table(testid)
    parser.feed(html)
    return parser.headers, [row for row in parser.rows if row]


def _live(project):
    return Insight.objects.filter(project=project, is_other=False, merged_into=None).order_by("pk")


def _system_insight(project, run) -> Insight:
    """A system-level insight of the run, spanning two nodes (made here: the seed need not produce one)."""
    insight = Insight.objects.create(project=project, level="system", title="Refunds routed to the orders worker",
                                     frequency=0.2, count=4, trace_count=3, fingerprint="truthful-system",
                                     affected_nodes={"planner": 3, "orders_worker": 1}, last_run=run)
    InsightOccurrence.objects.create(insight=insight, run=run, count=4, trace_count=3)
    return insight


# ---- (3) level column and trend header ---------------------------------------------------------------------------


def test_the_level_column_holds_the_level_and_the_node_has_its_own_column(insighted, owner):
    project = insighted.project
    system = _system_insight(project, insighted.run)
    by_pk = {}
    for level in ("node", "system"):  # the flat lists: by default a system insight's node insights are in its row
        html = client_for(owner).get(f"/p/{project.slug}/insights/?level={level}").content.decode()
        headers, _ = _table(html, "insight-table")
        level_at, node_at = headers.index("Level"), headers.index("Node")
        parser = _Table("insight-table")
        parser.feed(html)
        by_pk.update({int(key): row for key, row in zip(parser.keys, parser.rows) if key})
    assert {i.level for i in _live(project)} == {"node", "system"}
    for insight in _live(project):
        row = by_pk[insight.pk]
        assert row[level_at] == f"{insight.level}-level", (insight.title, row)
        if insight.level == "node":
            assert row[node_at] == insight.node and insight.node not in row[level_at]
        else:  # the nodes it spans, the one with the most statements first
            nodes = sorted(insight.affected_nodes.items(), key=lambda kv: (-kv[1], kv[0]))
            assert row[node_at] == ", ".join(node for node, _ in nodes), row
    assert by_pk[system.pk][node_at] == "planner, orders_worker"


def test_the_trend_by_release_says_it_counts_traces(insighted, owner):
    project = insighted.project
    insight = max(_live(project), key=lambda i: (i.count - i.trace_count, i.pk))
    html = client_for(owner).get(f"/p/{project.slug}/insights/{insight.pk}/").content.decode()
    trend = html[html.index('data-testid="insight-trend"'):]
    trend = trend[:trend.index("</section>")]
    headers = [unescape(h) for h in re.findall(r"<th(?: [^>]*)?>(.*?)</th>", trend)]
    assert headers[:2] == ["Release", "Traces with it"], headers
    assert "Statements" not in headers
    # The column is the number of traces of the release with the pattern (InsightOccurrence.releases).
    counts = [int(n) for n in re.findall(r"</code></td><td>(\d+)</td>", trend)]
    assert counts == [r["count"] for r in insight.trend] and max(counts) <= insight.trace_count


# ---- (12a) Markdown in titles rendered, never raw -----------------------------------------------------------------


def _title_of(pk: int) -> str:
    return f"`planner` writes `{HOSTILE}` more often #{pk}"  # the code spans fit the heat map's 48 characters


def _assert_rendered(html: str, where: str) -> None:
    assert "`planner`" not in html and "`" + HOSTILE not in html, where
    assert "<code>planner</code>" in html, where
    assert "<img src=x" not in html, where  # the code span's content is escaped
    assert "<code>&lt;img src=x onerror=alert(1)&gt;</code>" in html, where


def test_backticks_in_titles_are_rendered_as_code_on_every_page(insighted, owner, tmp_path):
    project, client = insighted.project, client_for(owner)
    for insight in _live(project):
        Insight.objects.filter(pk=insight.pk).update(title=_title_of(insight.pk))
    for ticket in Ticket.objects.filter(project=project):
        Ticket.objects.filter(pk=ticket.pk).update(title=_title_of(ticket.insight_id or 0))
    failing = Feedback.objects.filter(project=project, run=insighted.run, verdict="fail").exclude(issues=[]).first()
    issues = [{**failing.issues[0], "title": _title_of(0), "detail": "fails 80% vs 10% when `planner` writes"}]
    _system_insight(project, insighted.run)
    Feedback.objects.filter(pk=failing.pk).update(issues=issues)
    node_insight = _live(project).filter(level="node").first()
    job = EvolutionJob.objects.create(project=project, insight=node_insight, backend_name="scripted", state="FAILED",
                                      target=EvolutionTarget.objects.create(project=project, name="router",
                                                                            source="/x", config=CONFIG))
    base = f"/p/{project.slug}"
    pages = {
        "insights list": f"{base}/insights/",
        "insight page": f"{base}/insights/{node_insight.pk}/",
        "overview top insights": f"{base}/",
        "tickets": f"{base}/tickets/?status=all",
        "trace page feedback": f"{base}/traces/{failing.trace.trace_id}/?run={insighted.run.pk}",
        "nodes heat map": f"{base}/nodes/?run={insighted.run.pk}&level=node",
        "evolve form": f"{base}/evolution/new/?insight={node_insight.pk}",
        "evolution jobs": f"{base}/evolution/",
        "evolution job": f"{base}/evolution/jobs/{job.pk}/",
    }
    for where, url in pages.items():
        response = client.get(url)
        assert response.status_code == 200, (where, response.status_code)
        _assert_rendered(response.content.decode(), where)
    overview = client.get(f"{base}/").content.decode()
    top = overview[overview.index('data-testid="top-insights"'):]
    assert "<code>planner</code>" in top[:top.index("</section>")]
    trace = client.get(pages["trace page feedback"]).content.decode()
    assert "fails 80% vs 10% when <code>planner</code> writes" in trace
    # The page's <title> has the title as plain text: no markers, no markup.
    page_title = re.search(r"<title>(.*?)</title>", client.get(pages["insight page"]).content.decode(), re.S).group(1)
    assert f"planner writes {HOSTILE} more often" in unescape(page_title) and "`" not in page_title
    assert "<code>" not in page_title


def test_the_title_filters_escape_everything_and_cut_outside_markers():
    from frontend.templatetags.clear_ui import md_inline, md_plain

    assert md_inline("a `<b>` **<i>** <s>") == "a <code>&lt;b&gt;</code> <strong>&lt;i&gt;</strong> &lt;s&gt;"
    cut = md_inline("Fails more often when `planner` writes `intent: refund`", 30)
    assert cut == "Fails more often when <code>planner</code>…"
    assert md_plain("`planner` sends refunds to `orders_worker`") == "planner sends refunds to orders_worker"
    assert md_inline("no `closing marker") == "no `closing marker"  # not a code span: text as it is


# ---- (12b) no "tokens 202 tokens" ---------------------------------------------------------------------------------


def test_a_token_outlier_says_its_tokens_once(insighted, owner):
    project, client = insighted.project, client_for(owner)
    # The example's own token spread is no outlier (diagnosis/RUNS.md): record what the rule says of a blow-up.
    from diagnosis.judges.rules.outliers import node_stats_compute, rule_token_outlier
    from diagnosis.services.trace_view import trace_view_build

    trace = Feedback.objects.filter(run=insighted.run).first().trace
    view = trace_view_build(trace=trace)
    llm = [s for s in view.spans if s.kind == "LLM"]
    baseline = [(s.node, s.kind, s.tool_name, 1.0, 100.0 + i) for i, s in enumerate(llm * 8)]
    llm[0].input_tokens, llm[0].output_tokens = 5000, 0
    view.outcome = "failure"
    (result,) = [r for r in rule_token_outlier(view, node_stats_compute(baseline))
                 if r.verdict == "fail" and r.target_span_id == llm[0].span_id]
    Feedback.objects.create(project=project, run=insighted.run, trace=trace, judge="rule.token_outlier",
                            judge_kind="rule", verdict="fail", target_span_id=result.target_span_id,
                            critique=result.critique, issues=[{"title": i.title, "detail": i.detail,
                                                               "severity": i.severity, "evidence": []}
                                                              for i in result.issues])
    outliers = Feedback.objects.filter(project=project, run=insighted.run, judge="rule.token_outlier", verdict="fail")
    assert outliers.exists()
    for feedback in outliers:
        title = feedback.issues[0]["title"]
        assert not re.search(r"\btokens [\d,]+ tokens\b", title), title
        assert re.search(r": [\d,]+ tokens is far above the node's median$", title), title
    html = client.get(f"/p/{project.slug}/traces/{outliers[0].trace.trace_id}/?run={insighted.run.pk}")
    assert not re.search(r"\btokens [\d,]+ tokens\b", html.content.decode())
    assert re.search(r"[\d,]+ tokens is far above", html.content.decode())


# ---- (12c) the heat map's run picker ------------------------------------------------------------------------------


def test_the_heat_map_picker_names_runs_and_opens_on_node_level_insights(insighted, owner):
    project = insighted.project
    # A newer run whose only insight is system-level, without a name: the old default (one "System" column).
    newer = DiagnosisRun.objects.create(project=project, status="succeeded", insights_status="done",
                                        total_count=3, done_count=3, judges=["rule.span_error", "rubrics"])
    _system_insight(project, newer)
    html = client_for(owner).get(f"/p/{project.slug}/nodes/").content.decode()
    picker = re.search(r'<select id="id_heatmap_run" name="run">(.*?)</select>', html, re.S).group(1)
    options = dict(re.findall(r'<option value="([^"]+)"[^>]*>(.*?)</option>', picker))
    label = unescape(options[str(newer.pk)])
    assert str(newer.pk) not in label and str(newer.pk)[:8] not in label, label
    assert label.startswith("Run · ") and newer.created_at.strftime("%Y-%m-%d") in label, label
    assert "3 traces" in label and "rules, rubrics" in label, label
    assert unescape(options[str(insighted.run.pk)]).startswith("seed run · ")
    # The default: the newest run with node-level insights (the seed run), at the node level.
    selected = re.search(r'<option value="([^"]+)" selected>', picker).group(1)
    assert selected == str(insighted.run.pk)
    assert re.search(r'<option value="node" selected>Node-level</option>', html)
    node_insights = set(_live(project).filter(level="node").values_list("pk", flat=True))
    columns = {int(pk) for pk in re.findall(r'<th scope="col" class="heat-col"><a href="/p/[^/]+/insights/(\d+)/"',
                                            html)}
    assert len(columns) > 1 and columns <= node_insights, (columns, node_insights)
    # Asked for, the newer run still shows at its own level.
    asked = client_for(owner).get(f"/p/{project.slug}/nodes/?run={newer.pk}").content.decode()
    assert re.search(r'<option value="system" selected>System-level</option>', asked)


# ---- (12d) the Releases page's times ------------------------------------------------------------------------------


def test_the_releases_page_formats_its_times(project, owner, tmp_path):
    hot = EvolutionTarget.objects.create(project=project, name="desk", source="/x",
                                         config={**CONFIG, "hot_swap": HOT_SWAP})
    releases_made(target=hot, tmp_path=tmp_path)
    state = json.loads((evolution_target_releases_root(target=hot) / "state.json").read_text())
    html = client_for(owner).get(f"/p/{project.slug}/evolution/releases/").content.decode()
    # No ISO timestamp in the text a reader sees (a <time datetime="..."> attribute keeps the exact one).
    assert not re.search(r">[^<]*\d{4}-\d\d-\d\dT\d\d:\d\d", html), re.findall(r">[^<]*\d{4}-\d\d-\d\dT[^<]*", html)
    assert not re.search(r">[^<]*:\d\d\.\d{3}", html)
    for stamp in [h["at"] for h in state["history"]] + [r["staged_at"] for r in state["releases"].values()]:
        shown = datetime.fromisoformat(stamp).strftime("%Y-%m-%d %H:%M:%S")
        assert f'<time datetime="{stamp}">{shown}</time>' in html, stamp
