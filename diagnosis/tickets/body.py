"""A ticket's content from its insight: the evidence and affected traces it cites, and its Markdown body.

Everything that comes from traces or judges (quotes, statements, titles, node and task names) is untrusted: it is
HTML-escaped (no raw HTML reaches a Markdown renderer) and Markdown's inline syntax is backslash-escaped, so a quote
cannot become a link, an image, a heading or a table cell. Our own markup (headings, the fingerprint comment) is
the only raw text in the body.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from diagnosis.models import Insight, InsightOccurrence
from traces.models import Trace

FINGERPRINT_COMMENT = "<!-- clear-fingerprint: {} -->"
FINGERPRINT_RE = re.compile(r"<!--\s*clear-fingerprint:\s*([0-9a-zA-Z_-]{8,64})\s*-->")
EVIDENCE_MAX = 8  # quotes in a body, one per trace first
QUOTE_MAX_CHARS = 600
TRACES_MAX = 25  # affected traces listed to reproduce
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


def content_collect(*, insight: Insight) -> Content:
    """Evidence quotes (newest run first, one per trace before a second from the same trace) and the traces the
    insight occurred in (newest run first), with their task ids and releases."""
    from diagnosis.selectors import insight_evidence_list

    rows = list(insight_evidence_list(project=insight.project, insight=insight)[:200])
    first, more, seen = [], [], set()
    for row in rows:
        (more if row.trace_id in seen else first).append(row)
        seen.add(row.trace_id)
    evidence = [{"trace_id": e.trace.trace_id, "task_id": e.trace.task_id, "release": e.trace.release,
                 "span_id": e.span_id, "quote": e.quote, "statement": e.statement_text}
                for e in (first + more)[:EVIDENCE_MAX]]
    trace_ids: list[str] = []
    occurrences = InsightOccurrence.objects.filter(insight=insight).order_by("-run__created_at", "-pk")
    for ids in occurrences.values_list("trace_ids", flat=True):
        trace_ids.extend(t for t in ids or [] if t not in trace_ids)
    found = {t.trace_id: t for t in Trace.objects.filter(project_id=insight.project_id,
                                                          trace_id__in=trace_ids[:TRACES_MAX])}
    traces = [{"trace_id": t.trace_id, "task_id": t.task_id, "release": t.release, "outcome": t.outcome or ""}
              for t in (found.get(i) for i in trace_ids[:TRACES_MAX]) if t is not None]
    return Content(evidence=evidence, traces=traces, trace_total=len(trace_ids))


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _lift(low: float | None, value: float | None, high: float | None) -> str:
    if value is None:
        return "n/a (no trace without the issue to compare with)"
    interval = f" (95% interval {low:.2f}–{high:.2f})" if low is not None and high is not None else ""
    return f"{value:.2f}×{interval}: failure rate of traces with the issue over traces without it"


def body_render(*, ticket) -> str:
    """The ticket's Markdown body from its copied fields (see Ticket)."""
    node = md_escape(ticket.node) if ticket.node else "— (system level: across nodes)"
    frequency = _percent(ticket.frequency)
    lines = [
        FINGERPRINT_COMMENT.format(ticket.fingerprint),
        "## What happens",
        "",
        md_escape(ticket.description) or md_escape(ticket.title),
        "",
        f"- **Node:** {node}",
        f"- **Level:** {md_escape(ticket.level)} · **Severity:** {md_escape(ticket.severity)}",
        f"- **Frequency:** {frequency} of judged traces ({ticket.trace_count} traces in the latest run)",
        f"- **Lift:** {_lift(ticket.lift_low, ticket.lift, ticket.lift_high)}",
    ]
    if ticket.first_seen and ticket.last_seen:
        # Dates only: the body (and the pushed issue) should change when the problem does, not at every run.
        lines.append(f"- **First seen:** {ticket.first_seen:%Y-%m-%d} · **last seen:** {ticket.last_seen:%Y-%m-%d}")
    if ticket.merged_into_id:
        lines.append(f"- **Merged into ticket {ticket.merged_into_id}**: the pattern is tracked there.")
    lines += ["", "## Evidence", ""]
    if not ticket.evidence:
        lines.append("_No verified quote yet._")
    for item in ticket.evidence:
        where = (f"trace {md_escape(item['trace_id'])}, span {md_escape(item['span_id'])}, task "
                 f"{md_escape(item['task_id']) or '—'}, release {md_escape(item['release']) or '—'}")
        lines += [md_quote(item["quote"] or item["statement"]), "",
                  f"— {where}: {md_escape(item['statement'])}", ""]
    lines += ["## Reproduce", "", "Affected traces (newest run first):", "",
              "| trace id | task id | release | outcome |", "| --- | --- | --- | --- |"]
    for t in ticket.traces:
        lines.append(f"| {md_escape(t['trace_id'])} | {md_escape(t['task_id']) or '—'} | "
                     f"{md_escape(t['release']) or '—'} | {md_escape(t['outcome']) or '—'} |")
    if ticket.trace_total > len(ticket.traces):
        lines += ["", f"…and {ticket.trace_total - len(ticket.traces)} more traces."]
    lines += ["", "## Suggested fix", "",
              f"**Likely root cause:** {md_escape(ticket.root_cause) or 'unknown'}", "",
              f"**Recommendation:** {md_escape(ticket.recommendation) or '—'}", "",
              f"<sub>Made by Clear from insight {ticket.insight_id or '(deleted)'}; status: {ticket.status}.</sub>"]
    return "\n".join(lines) + "\n"
