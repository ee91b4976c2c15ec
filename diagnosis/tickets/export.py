"""The bug list as Markdown, CSV or JSON: the project's tickets (unresolved ones by default) with their evidence.

Every ticket carries absolute links (CLEAR_PUBLIC_URL, links.py): `url`, its insight's page, and `evidence_urls`,
the trace viewer at its first evidence spans; frequencies are percentages ("27.3%"; JSON also keeps the share,
rounded).

CSV cells that a spreadsheet would run as a formula (starting with =, +, -, @, tab or carriage return) are prefixed
with an apostrophe: trace content is untrusted. Markdown bodies are escaped when they are made (body.py).
"""

from __future__ import annotations

import csv
import io
import json
import re

from django.utils import timezone

from clear.projects.models import Project

from .body import EVIDENCE_LINKS, md_escape, percent
from .errors import TicketInvalidError
from .links import insight_url, span_url
from .models import Ticket
from .selectors import ticket_list

OUTPUTS = ("md", "csv", "json")
CONTENT_TYPES = {"md": "text/markdown; charset=utf-8", "csv": "text/csv; charset=utf-8",
                 "json": "application/json"}
CSV_COLUMNS = ("id", "fingerprint", "status", "title", "url", "description", "level", "node", "nodes", "severity",
               "frequency", "statement_count", "trace_count", "judged_count", "lift", "lift_low", "lift_high",
               "failure_association", "insight_id", "trace_ids", "task_ids", "releases", "evidence", "evidence_urls",
               "suggested_fix", "root_cause", "recommendation", "external_url", "first_seen", "last_seen",
               "updated_at")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_SAFE_URL = re.compile(r"^https?://[^\s()<>\[\]]+$")


def _url(ticket: Ticket) -> str:
    return insight_url(slug=ticket.project.slug, insight_id=ticket.insight_id) if ticket.insight_id else ""


def _evidence_urls(ticket: Ticket) -> list[str]:
    return [span_url(slug=ticket.project.slug, trace_id=e["trace_id"], span_id=e["span_id"])
            for e in ticket.evidence[:EVIDENCE_LINKS]]


def ticket_record(ticket: Ticket) -> dict:
    """One ticket as plain data (the JSON export's shape)."""
    return {
        "id": ticket.pk, "fingerprint": ticket.fingerprint, "status": ticket.status, "title": ticket.title,
        "url": _url(ticket), "evidence_urls": _evidence_urls(ticket),
        "level": ticket.level, "node": ticket.node, "nodes": ticket.nodes, "severity": ticket.severity,
        "insight_id": ticket.insight_id,
        "description": ticket.description, "root_cause": ticket.root_cause, "recommendation": ticket.recommendation,
        "suggested_fix": (ticket.suggested_fix or {}).get("text") or ticket.recommendation,
        "frequency": round(ticket.frequency, 4), "frequency_percent": percent(ticket.frequency),
        "statement_count": ticket.statement_count, "trace_count": ticket.trace_count,
        "judged_count": ticket.judged_count, "releases": ticket.releases,
        "failure_association": ticket.failure_association, "candidate": ticket.candidate, "lift": ticket.lift,
        "lift_low": ticket.lift_low, "lift_high": ticket.lift_high,
        "first_seen": ticket.first_seen.isoformat() if ticket.first_seen else None,
        "last_seen": ticket.last_seen.isoformat() if ticket.last_seen else None,
        "evidence": ticket.evidence, "traces": ticket.traces, "trace_total": ticket.trace_total,
        "merged_into": ticket.merged_into_id, "external_number": ticket.external_number,
        "external_url": ticket.external_url, "body": ticket.body,
        "created_at": ticket.created_at.isoformat(), "updated_at": ticket.updated_at.isoformat(),
    }


def _cell(value) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_START) and not _is_number(text) else text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _csv(tickets: list[Ticket]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for t in tickets:
        record = ticket_record(t)
        record["frequency"] = record["frequency_percent"]
        record["nodes"] = " ".join(n["node"] for n in t.nodes) or t.node
        record["trace_ids"] = " ".join(x["trace_id"] for x in t.traces)
        record["task_ids"] = " ".join(sorted({x["task_id"] for x in t.traces if x["task_id"]}))
        record["releases"] = " ".join(sorted(t.releases) or sorted({x["release"] for x in t.traces if x["release"]}))
        record["evidence_urls"] = " ".join(record["evidence_urls"])
        record["evidence"] = json.dumps([{k: e[k] for k in ("trace_id", "span_id", "quote")} for e in t.evidence],
                                        ensure_ascii=False)
        writer.writerow([_cell(record[c]) for c in CSV_COLUMNS])
    return out.getvalue()


def _markdown(project: Project, tickets: list[Ticket], status: str) -> str:
    lines = [f"# Bug list: {md_escape(project.name)}", "",
             f"{len(tickets)} tickets ({status}), exported {timezone.now():%Y-%m-%d %H:%M} UTC by Clear.", ""]
    if tickets:
        lines += ["| ticket | status | node | severity | frequency | lift |", "| --- | --- | --- | --- | --- | --- |"]
    for t in tickets:
        lift = "n/a" if t.lift is None else f"{t.lift:.2f}×"
        url = _url(t)
        title = f"[{md_escape(t.title)}]({url})" if url else md_escape(t.title)
        where = md_escape(t.node) or md_escape(", ".join(n["node"] for n in t.nodes)) or "system"
        lines.append(f"| {t.pk}: {title} | {t.status} | {where} | {t.severity} | {percent(t.frequency)} | {lift} |")
    for t in tickets:
        safe_url = _SAFE_URL.match(t.external_url or "")
        external = f" ([issue {t.external_number}]({t.external_url}))" if safe_url else ""
        lines += ["", "---", "", f"# Ticket {t.pk}: {md_escape(t.title)}{external}", "",
                  f"Status: **{t.status}**" + (f" · [open in Clear]({_url(t)})" if t.insight_id else ""), "",
                  t.body.replace("\n## ", "\n### ")]
    return "\n".join(lines).rstrip() + "\n"


def tickets_export(*, project: Project, output: str, status: str = "open") -> str:
    """The bug list of `project` in `output` (md, csv or json); status "open" (unresolved: open and in_progress),
    "all", or one status."""
    if output not in OUTPUTS:
        raise TicketInvalidError(f"output must be one of {', '.join(OUTPUTS)}; got {output!r}")
    tickets = list(ticket_list(project=project, status=status).select_related("project")
                   .order_by("-frequency", "pk"))
    if output == "csv":
        return _csv(tickets)
    if output == "json":
        return json.dumps({"project": project.name, "status": status, "exported_at": timezone.now().isoformat(),
                           "count": len(tickets), "tickets": [ticket_record(t) for t in tickets]},
                          ensure_ascii=False, indent=2) + "\n"
    return _markdown(project, tickets, status)
