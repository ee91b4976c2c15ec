"""A ticket's content from its insight: the evidence and affected traces it cites, and its Markdown body.

Everything that comes from traces or judges (quotes, statements, titles, node and task names) is untrusted: it is
HTML-escaped (no raw HTML reaches a Markdown renderer) and Markdown's inline syntax is backslash-escaped, so a quote
cannot become a link, an image, a heading or a table cell. Our own markup (headings, the fingerprint comment) is
the only raw text in the body.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from diagnosis.models import Insight, InsightOccurrence
from traces.models import Trace

from .links import insight_url, span_url

FINGERPRINT_COMMENT = "<!-- clear-fingerprint: {} -->"
FINGERPRINT_RE = re.compile(r"<!--\s*clear-fingerprint:\s*([0-9a-zA-Z_-]{8,64})\s*-->")
EVIDENCE_MAX = 8  # quotes in a body, one per trace first
QUOTE_MAX_CHARS = 600
TRACES_MAX = 25  # affected traces listed to reproduce
EVIDENCE_LINKS = 3  # evidence spans linked (absolute URLs into the trace viewer)
# With [ and ] escaped no link or image can form, so ( ) and ! stay readable.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]#|~])")


def md_escape(text: str) -> str:
    """Untrusted text as inert Markdown: HTML escaped, inline syntax backslash-escaped, one line."""
    text = html.escape(" ".join(str(text or "").split()), quote=False)
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def md_quote(text: str) -> str:
    """A blockquote of untrusted text, line breaks kept, cut at QUOTE_MAX_CHARS."""
    text = str(text or "").strip()
    if len(text) > QUOTE_MAX_CHARS:
        text = text[:QUOTE_MAX_CHARS].rstrip() + " …"
    lines = [md_escape(line) for line in text.splitlines() if line.strip()] or [""]
    return "\n".join(f"> {line}" for line in lines)


def plain_title(text: str) -> str:
    """Issue titles are plain text on trackers: one line, no control characters."""
    return " ".join("".join(c for c in str(text or "") if c.isprintable() or c.isspace()).split())[:300]


@dataclass
class Content:
    evidence: list[dict]
    traces: list[dict]
    trace_total: int
    judged_count: int = 0
    releases: dict = field(default_factory=dict)
    nodes: list[dict] = field(default_factory=list)
    suggested_fix: dict = field(default_factory=dict)


def _nodes(insight: Insight) -> list[dict]:
    """Where the pattern shows: its nodes by statements; a system insight's node insights (InsightLink) too."""
    from diagnosis.models import InsightLink

    linked = {}
    if insight.level == Insight.Level.SYSTEM:
        for link in (InsightLink.objects.filter(system=insight).select_related("node")
                     .order_by("-shared", "node_id")):
            linked.setdefault(link.node.node, link.node)
    counts = dict(insight.affected_nodes or {}) or ({insight.node: insight.count} if insight.node else {})
    names = list(counts) + [n for n in linked if n not in counts]
    return [{"node": n, "statements": counts.get(n, 0), "insight_id": linked[n].pk if n in linked else None,
             "title": linked[n].title if n in linked else ""} for n in names]


def _expired_evidence(*, insight: Insight, room: int) -> list[dict]:
    """Citations of traces retention removed, frozen on the insight (their quotes gone unless kept), after the live
    ones: a later sync keeps them on the ticket, saying the trace expired."""
    from diagnosis.selectors.expired_evidence import insight_evidence_expired_list

    if room <= 0:
        return []
    entries = []
    for e in insight_evidence_expired_list(project=insight.project, insight=insight, limit=room):
        entry = {"trace_id": e["trace_id"], "task_id": e.get("task_id", ""), "release": e.get("release", ""),
                 "span_id": e["span_id"], "quote": e["quote"], "statement": e.get("statement", ""),
                 "outcome": e.get("outcome", ""), "retention_days": e.get("retention_days"),
                 "expired_at": e["expired_at"].isoformat() if e["expired_at"] else ""}
        entries.append({**entry, "quote_removed": True} if e["quote_removed"] else entry)
    return entries


def content_collect(*, insight: Insight) -> Content:
    """Evidence quotes (newest run first, failing traces first, one per trace before a second from the same trace;
    each with its trace's outcome; then those of expired traces), the traces the
    insight occurred in (newest run first) with their task ids and releases, its judged traces and releases, its
    nodes, and the suggested fix drawn from its evidence."""
    from diagnosis.selectors import insight_evidence_of_figures_run

    from .fix import suggested_fix

    # the citations of the run the insight's figures come from, as its page shows them
    rows = list(insight_evidence_of_figures_run(project=insight.project, insight=insight)[:200])
    first, more, seen = [], [], set()
    for row in rows:
        (more if row.trace_id in seen else first).append(row)
        seen.add(row.trace_id)
    evidence = [{"trace_id": e.trace.trace_id, "task_id": e.trace.task_id, "release": e.trace.release,
                 "span_id": e.span_id, "quote": e.quote, "statement": e.statement_text,
                 "outcome": e.trace.outcome or ""}
                for e in (first + more)[:EVIDENCE_MAX]]
    evidence += _expired_evidence(insight=insight, room=EVIDENCE_MAX - len(evidence))
    trace_ids: list[str] = []
    releases: dict[str, int] = {}
    judged = 0
    occurrences = InsightOccurrence.objects.filter(insight=insight).order_by("-run__created_at", "-pk")
    if occurrences.filter(run_id=insight.last_run_id).exists():  # the traces of the run its figures come from
        occurrences = occurrences.filter(run_id=insight.last_run_id)
    for occurrence in occurrences.only("trace_ids", "releases", "judged", "run_id"):
        trace_ids.extend(t for t in occurrence.trace_ids or [] if t not in trace_ids)
        for release, count in (occurrence.releases or {}).items():
            releases.setdefault(release, count)  # the newest run that judged the release counts
        if occurrence.run_id == insight.last_run_id:
            judged = occurrence.judged
    found = {t.trace_id: t for t in Trace.objects.filter(project_id=insight.project_id,
                                                          trace_id__in=trace_ids[:TRACES_MAX])}
    traces = [{"trace_id": t.trace_id, "task_id": t.task_id, "release": t.release, "outcome": t.outcome or ""}
              for t in (found.get(i) for i in trace_ids[:TRACES_MAX]) if t is not None]
    return Content(evidence=evidence, traces=traces, trace_total=len(trace_ids), judged_count=judged,
                   releases=dict(sorted(releases.items())), nodes=_nodes(insight),
                   suggested_fix=suggested_fix(insight=insight, evidence=first + more))


def percent(value: float | None) -> str:
    """A share as people read it: 27.3%, never 0.2727272727272727."""
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _lift(low: float | None, value: float | None, high: float | None) -> str:
    if value is None:
        return ("n/a: association unknown (fewer than 10 judged traces succeeded, or no trace without the issue, to "
                "compare with)")
    interval = f" (95% interval {low:.2f}–{high:.2f})" if low is not None and high is not None else ""
    return f"{value:.2f}×{interval}: failure rate of traces with the issue over traces without it"


def expired_note(entry: dict) -> str:
    """"trace expired on 2026-01-31, retention 30 days": an evidence entry whose trace retention removed
    (diagnosis/services/evidence_expiry.py marks it)."""
    days = entry.get("retention_days")
    return f"trace expired on {str(entry['expired_at'])[:10]}" + (f", retention {days} days" if days else "")


def _link(text: str, url: str) -> str:
    """A Markdown link to one of Clear's pages; the URL is ours (links.py), the text is escaped."""
    return f"[{md_escape(text)}]({url})"


def _nodes_line(ticket) -> str:
    parts = []
    for item in ticket.nodes:
        text = f"{md_escape(item['node'])} ({item['statements']} statements)"
        if item.get("insight_id"):
            url = insight_url(slug=ticket.project.slug, insight_id=item["insight_id"])
            text += f": {_link(item['title'] or 'node insight', url)}"
        parts.append(text)
    return "; ".join(parts) or (md_escape(ticket.node) or "—")


def _attribution_lines(ticket) -> list[str]:
    """"Where it went wrong" from the insight's attributions (diagnosis/attribution): the agent most confident
    answers blame, or, when there is none, "no confident answer" and the candidates with their evidence, never a
    single blamed agent. Nothing when no failing trace of the insight is attributed."""
    if not ticket.insight_id:
        return []
    from diagnosis.attribution.selectors import attribution_summary_map

    summary = attribution_summary_map(project=ticket.project, insight_ids=[ticket.insight_id], top=0).get(
        ticket.insight_id)
    if not summary or not summary["attributed"]:
        return []
    lines = ["", "## Where it went wrong", ""]
    if summary["confident"]:
        count = summary["agents"][0]["count"]
        lines.append(f"**Blamed:** {md_escape(summary['blamed'])} ({count} of {summary['confident_count']} confident "
                     f"answers; {summary['unconfident_count']} of {summary['attributed']} attributed failing traces "
                     "without a confident answer)")
        return lines
    lines += [f"**No confident answer** in {summary['unconfident_count']} of {summary['attributed']} attributed "
              "failing traces; the candidates:", ""]
    for candidate in summary["candidates"][:3]:
        evidence = "; ".join(md_escape(e) for e in candidate["evidence"])
        lines.append(f"- {md_escape(candidate['agent'])}: top candidate in {candidate['first']}, mean share "
                     f"{candidate['mean_share']:.2f}" + (f" ({evidence})" if evidence else ""))
    return lines


def body_render(*, ticket) -> str:
    """The ticket's Markdown body from its copied fields (see Ticket)."""
    slug = ticket.project.slug
    node = md_escape(ticket.node) if ticket.node else "— (system level: across nodes)"
    judged = f" of {ticket.judged_count} judged" if ticket.judged_count else ""
    releases = ", ".join(f"{md_escape(r) or '—'} ({n} traces)" for r, n in ticket.releases.items()) or "—"
    lines = [
        FINGERPRINT_COMMENT.format(ticket.fingerprint),
        "## What happens",
        "",
        md_escape(ticket.description) or md_escape(ticket.title),
        "",
    ]
    if ticket.insight_id:
        lines += [f"**Insight:** {insight_url(slug=slug, insight_id=ticket.insight_id)}", ""]
    if ticket.failure_association == "not_associated" and ticket.insight_id and ticket.insight.failure_inconclusive:
        lines += [(f"> **Candidate, not yet shown to go with failure:** traces with this pattern fail more often "
                   f"(lift {ticket.lift:.2f}×), but with this few traces its interval, {ticket.lift_low:.2f}–"
                   f"{ticket.lift_high or 0:.2f}, still includes 1. Check the evidence before working on it; more "
                   "runs will tell."), ""]
    elif ticket.failure_association == "not_associated":
        lines += [("> **Not associated with failure:** traces with this pattern fail about as often as traces "
                   "without it (the lift interval includes 1). Kept open as it was; check it matters before "
                   "working on it."), ""]
    lines += [
        f"- **Node:** {node}",
        f"- **Level:** {md_escape(ticket.level)} · **Severity:** {md_escape(ticket.severity)}",
        f"- **Frequency:** {percent(ticket.frequency)} of judged traces",
        (f"- **Counts:** {ticket.statement_count} statements · {ticket.trace_count} traces{judged} (in the run "
         "the figures come from)"),
        f"- **Lift:** {_lift(ticket.lift_low, ticket.lift, ticket.lift_high)}",
        f"- **Affected nodes:** {_nodes_line(ticket)}",
        f"- **Releases:** {releases}",
    ]
    if ticket.first_seen and ticket.last_seen:
        # Dates only: the body (and the pushed issue) should change when the problem does, not at every run.
        lines.append(f"- **First seen:** {ticket.first_seen:%Y-%m-%d} · **last seen:** {ticket.last_seen:%Y-%m-%d}")
    if ticket.merged_into_id:
        target = ticket.merged_into
        if ticket.level == "node" and target is not None and target.level == "system":
            lines.append(f"- **Duplicate of ticket {ticket.merged_into_id}**: the problem spans several nodes and is "
                         "tracked there, at system level.")
        else:
            lines.append(f"- **Merged into ticket {ticket.merged_into_id}**: the pattern is tracked there.")
    lines += ["", "## Evidence", ""]
    if not ticket.evidence:
        lines.append("_No verified quote yet._")
    for item in ticket.evidence:
        ran = {"failure": "run failed", "success": "run succeeded"}.get(item.get("outcome", ""), "outcome unknown")
        where = (f"trace {md_escape(item['trace_id'])} ({ran}), span {md_escape(item['span_id'])}, task "
                 f"{md_escape(item['task_id']) or '—'}, release {md_escape(item['release']) or '—'}")
        if item.get("expired_at"):
            where += f" ({expired_note(item)})"
        quote = "> _Quote removed: its trace expired._" if item.get("quote_removed") else md_quote(
            item["quote"] or item["statement"])
        lines += [quote, "", f"— {where}: {md_escape(item['statement'])}", ""]
    if ticket.evidence:
        lines += ["Open the evidence in Clear:", ""]
        for item in ticket.evidence[:EVIDENCE_LINKS]:
            label = "trace {trace_id}, span {span_id}".format(**item)
            if item.get("expired_at"):  # the trace page would only say this, with a 410
                lines.append(f"- {md_escape(label)}: {expired_note(item)}")
                continue
            url = span_url(slug=slug, trace_id=item["trace_id"], span_id=item["span_id"])
            lines.append(f"- {_link(label, url)}")
        lines.append("")
    lines += ["## Reproduce", "", "Affected traces (newest run first):", "",
              "| trace id | task id | release | outcome |", "| --- | --- | --- | --- |"]
    for t in ticket.traces:
        lines.append(f"| {md_escape(t['trace_id'])} | {md_escape(t['task_id']) or '—'} | "
                     f"{md_escape(t['release']) or '—'} | {md_escape(t['outcome']) or '—'} |")
    if ticket.trace_total > len(ticket.traces):
        lines += ["", f"…and {ticket.trace_total - len(ticket.traces)} more traces."]
    lines += _attribution_lines(ticket)
    fix = ticket.suggested_fix or {}
    lines += ["", "## Suggested fix", "", md_escape(fix.get("text") or ticket.recommendation) or "—", ""]
    if fix.get("span_id") and fix.get("expired_at"):
        label = "trace {trace_id}, span {span_id}".format(**fix)
        lines += [f"Where it fired: {md_escape(label)} ({expired_note(fix)})", ""]
    elif fix.get("span_id"):
        url = span_url(slug=slug, trace_id=fix["trace_id"], span_id=fix["span_id"])
        lines += [f"Where it fires: {_link('trace {trace_id}, span {span_id}'.format(**fix), url)}", ""]
    # Offline, the recommendation says where the pattern first appears (insights/facts.py), not what to change: the
    # fix drawn from the evidence replaces it (fix.py).
    lines += [f"**Likely root cause:** {md_escape(ticket.root_cause) or 'unknown'}", "",
              f"<sub>Made by Clear from insight {ticket.insight_id or '(deleted)'}; status: {ticket.status}.</sub>"]
    return "\n".join(lines) + "\n"
