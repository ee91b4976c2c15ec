"""One project per measured set of runs: import the chosen trace files, diagnose them with the default judges and no
model, build the insights, then read back what the scorer needs (insights, their member statements, tickets, the
open list). Nothing here reads labels, and nothing read here feeds back into the project."""

from __future__ import annotations

import json
import random
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path


def _root_attribute(*, path: Path, key: str) -> str:
    """A root span attribute of a trace file, as text ("" when the file has none)."""
    try:
        request = json.loads(path.read_text())
    except (OSError, ValueError):
        return ""
    for resource in request.get("resourceSpans") or []:
        for scope in resource.get("scopeSpans") or []:
            for span in scope.get("spans") or []:
                if span.get("parentSpanId"):
                    continue
                for attribute in span.get("attributes") or []:
                    if attribute.get("key") == key:
                        value = attribute.get("value") or {}
                        return str(next(iter(value.values()), ""))
    return ""


def task_of_file(*, path: Path) -> str:
    """The task id a trace file's root span names (`clear.task.id`); the file name when it names none. Sampling one
    run per task needs it before import, and the root span is what the product reads it from too."""
    return _root_attribute(path=path, key="clear.task.id") or path.name


def sample_one_per_task(*, files: list[Path], seed: int, prefer: str = "any") -> list[Path]:
    """One file per task, drawn with `seed`: tasks and their files are sorted first, so a seed always draws the same
    runs whatever order the folder lists them in. prefer="succeeding" draws among a task's succeeding runs when it
    has one (`clear.outcome` of the root span, as the product reads it; never the labels): on tau-airline 14 of 50
    tasks then fail, about the quarter that issue 41's held-out runs have, against about 30 of 50 drawn at random."""
    by_task: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(files):
        by_task[task_of_file(path=path)].append(path)
    rng = random.Random(seed)
    chosen = []
    for task in sorted(by_task):
        runs = by_task[task]
        if prefer == "succeeding":
            runs = [p for p in runs if _root_attribute(path=p, key="clear.outcome") == "success"] or runs
        chosen.append(rng.choice(runs))
    return chosen


def import_files(*, project, files: list[Path], fmt: str = "") -> dict:
    """Import exactly `files` (links in a temporary folder: the labels file beside them never reaches the importer);
    with `fmt`, copies re-encoded in that instrumentation's shape (formats.py)."""
    from benchmarks.insights_real.formats import reencode_file
    from traces.services.imports import traces_import

    with tempfile.TemporaryDirectory(prefix="clear-bench-") as tmp:
        for path in files:
            if fmt:
                reencode_file(source=path, target=Path(tmp) / path.name, fmt=fmt)
            else:
                (Path(tmp) / path.name).symlink_to(path.resolve())
        started = time.monotonic()
        summary = traces_import(project=project, path=Path(tmp))
    return {"files": len(files), "seconds": round(time.monotonic() - started, 1),
            "summary": {k: v for k, v in vars(summary).items() if isinstance(v, (int, float, str)) and k != "path"}}


def diagnose(*, project) -> tuple:
    """One diagnosis run with the default judges and no model, executed in-process, then the insights build."""
    from diagnosis.services import diagnosis_run_execute, diagnosis_run_start
    from diagnosis.services.insights import insights_build

    started = time.monotonic()
    run = diagnosis_run_execute(run=diagnosis_run_start(project=project, enqueue=False))
    judged = time.monotonic() - started
    started = time.monotonic()
    summary = insights_build(run=run)
    built = time.monotonic() - started
    run.refresh_from_db()
    return run, summary, {"judge_seconds": round(judged, 1), "build_seconds": round(built, 1)}


def run_summary(*, run, summary) -> dict:
    from django.db.models import Count, Q

    from diagnosis.models import Feedback

    feedback = (Feedback.objects.filter(run=run).values("judge")
                .annotate(all=Count("pk"), fail=Count("pk", filter=Q(verdict="fail"))))
    return {"id": str(run.pk), "status": run.status, "judges": list(run.judges),
            "insights_status": run.insights_status, "insights_summary": summary,
            "feedback": {f["judge"]: {"all": f["all"], "fail": f["fail"]} for f in feedback},
            "contrastive": (run.config or {}).get("contrastive")}


def _root(insight_id: int | None, merged: dict[int, int | None]) -> int | None:
    seen = set()
    while insight_id is not None and merged.get(insight_id) and insight_id not in seen:
        seen.add(insight_id)
        insight_id = merged[insight_id]
    return insight_id


def insights_read(*, project, run) -> tuple[dict[int, dict], list[dict]]:
    """({insight pk: row}, statements of the run with the root insights they are members of)."""
    from diagnosis.models import Insight, InsightStatement
    from diagnosis.tickets.models import Ticket
    from diagnosis.tickets.selectors import ticket_by_insight_map
    from traces.models import Span, Trace

    every = list(Insight.objects.filter(project=project))
    merged = {i.pk: i.merged_into_id for i in every}
    outcome = dict(Trace.objects.filter(project=project).values_list("pk", "outcome"))
    # The tool of each TOOL span: an insight whose members sit on several tools holds several causes (issue 28, 1).
    tool_of = {(t, span): tool or name for t, span, tool, name in Span.objects.filter(
        trace__project=project, kind="TOOL").values_list("trace_id", "span_id", "tool_name", "name")}
    statements = []
    for row in (InsightStatement.objects.filter(run=run, excluded=False)
                .values("pk", "trace_id", "node_insight_id", "system_insight_id", "span_id", "evidence", "text",
                        "node", "judge", "feedback__target_span_id")):
        row["insights"] = {r for r in (_root(row["node_insight_id"], merged), _root(row["system_insight_id"], merged))
                           if r is not None}
        statements.append(row)
    members: dict[int, list[dict]] = defaultdict(list)
    for s in statements:
        for pk in s["insights"]:
            members[pk].append(s)
    tickets = ticket_by_insight_map(project=project, insight_ids=[i.pk for i in every])
    links = defaultdict(list)
    for insight in every:
        if insight.level == Insight.Level.SYSTEM:
            for link in insight.node_links.all():
                links[link.node_id].append(insight.pk)
    rows = {}
    for insight in every:
        if insight.merged_into_id:
            continue
        mine = members.get(insight.pk, [])
        traces = {s["trace_id"] for s in mine}
        outcomes = Counter(outcome.get(t) or "none" for t in traces)
        ticket = tickets.get(insight.pk)
        via = None
        if ticket is None or ticket.merged_into_id:
            # A node insight that a system insight's ticket tracks (the ticket sync closes the node's own one).
            target = ticket.merged_into if ticket is not None and ticket.merged_into_id else None
            if target is None:
                target = next((tickets[s] for s in links.get(insight.pk, []) if s in tickets), None)
            via = target
        rows[insight.pk] = {
            "id": insight.pk, "level": insight.level, "node": insight.node, "title": insight.title,
            "is_other": insight.is_other, "status": insight.status, "review": insight.review,
            "severity": insight.severity, "association": insight.failure_association,
            # by_design: an output property its step shows on every call (issue 28), where the model has the field.
            "by_design": getattr(insight, "by_design", None),
            "lift": insight.lift, "lift_low": insight.lift_low, "lift_high": insight.lift_high,
            "frequency": insight.frequency, "statements": len(mine),
            "traces": len(traces), "failing": outcomes.get("failure", 0), "succeeding": outcomes.get("success", 0),
            "no_outcome": sum(n for k, n in outcomes.items() if k not in ("failure", "success")),
            "judges": dict(Counter(s["judge"] for s in mine)),
            "member_tools": dict(Counter(tool_of[(s["trace_id"], s["span_id"])] for s in mine
                                         if (s["trace_id"], s["span_id"]) in tool_of).most_common()),
            "ticket": ({"id": ticket.pk, "status": ticket.status, "merged_into": ticket.merged_into_id}
                       if ticket is not None else None),
            "ticket_via_system": ({"id": via.pk, "status": via.status} if isinstance(via, Ticket) else None),
        }
    return rows, statements


def open_list(*, project) -> dict:
    from diagnosis.models import Insight
    from diagnosis.selectors import insight_list, insight_list_top

    listed = list(insight_list(project=project, status=Insight.Status.OPEN))
    return {"open": len(listed), "open_without_other": sum(1 for i in listed if not i.is_other),
            "open_node": sum(1 for i in listed if i.level == "node" and not i.is_other),
            "open_system": sum(1 for i in listed if i.level == "system" and not i.is_other),
            "open_by_design": [i.pk for i in listed if getattr(i, "by_design", False)],
            "top": [{"id": i.pk, "title": i.title, "association": i.failure_association}
                    for i in insight_list_top(project=project)]}


def spans_read(*, project) -> dict[int, list[dict]]:
    """Trace pk -> its spans (span_id, parent, kind, start, tool) in start order: what the turn numbering needs."""
    from traces.models import Span

    spans: dict[int, list[dict]] = defaultdict(list)
    for trace_pk, span_id, parent, kind, start, tool, name in (
            Span.objects.filter(trace__project=project).order_by("start_time", "pk")
            .values_list("trace_id", "span_id", "parent_span_id", "kind", "start_time", "tool_name", "name")):
        spans[trace_pk].append({"span_id": span_id, "parent": parent or "", "kind": kind, "start": start,
                                "tool": tool or name})
    return spans
