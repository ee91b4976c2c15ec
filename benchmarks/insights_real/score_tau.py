"""tau-airline scoring under issue 28's definition (a statement points at a labelled difference: its span, its
feedback's target or a span its evidence cites is the labelled span; a missing action is named on a run without that
call), kept beside issue 41's turn-based figures (turns.py) so the two can be read side by side; and the labelled
failing runs issue 41's figures are computed over (`tau_labelled`)."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

from benchmarks.insights_real.turns import Labelled

TUNE_TASKS = range(0, 25)
REPORT_TASKS = range(25, 50)
SPAN_KINDS = ("wrong_arguments", "unexpected_action")
ELIGIBLE = ("associated", "unknown")


def labels_read(*, folder: Path) -> dict[str, dict]:
    labels = {}
    for line in (folder / "labels.jsonl").read_text().splitlines():
        if line.strip():
            label = json.loads(line)
            labels[label["trace_id"].lower()] = label
    return labels


def split_of(task: int) -> str | None:
    return "tune" if task in TUNE_TASKS else "report" if task in REPORT_TASKS else None


def tau_labelled(*, project, folder: Path, splits: tuple[str, ...] = ("tune", "report")) -> list[Labelled]:
    """The failing runs (reward < 1) with at least one write-action difference: the span of each wrong or unexpected
    write, and a missing write hit as issue 28 scored it (a statement naming the tool on a run without that call)."""
    from traces.models import Span, Trace

    labels = labels_read(folder=folder)
    tools = defaultdict(set)
    for trace_pk, tool, name in Span.objects.filter(trace__project=project, kind="TOOL").values_list(
            "trace_id", "tool_name", "name"):
        tools[trace_pk] |= {tool or name}
    out = []
    for trace in Trace.objects.filter(project=project):
        label = labels.get(trace.trace_id.lower())
        if label is None or label["reward"] >= 1 or not label["write_action_differences"]:
            continue
        split = split_of(label["task_id"])
        if split not in splits:
            continue
        differences = label["write_action_differences"]
        missing = [d for d in differences if d["kind"] == "missing_action"]
        called = tools[trace.pk]

        def extra_hit(statement: dict, missing=missing, called=called) -> bool:
            return any(_points_at(statement, d, called) for d in missing)

        out.append(Labelled(trace_pk=trace.pk, split=split, kinds=sorted({d["kind"] for d in differences}),
                            spans={d["span_id"] for d in differences if d["kind"] in SPAN_KINDS and d.get("span_id")},
                            extra_hit=extra_hit if missing else None))
    return out


def _names(text: str, tool: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(tool)}(?![A-Za-z0-9_])", text or "") is not None


def _points_at(statement: dict, difference: dict, tools_called: set[str]) -> bool:
    if difference["kind"] in SPAN_KINDS:
        spans = {statement["span_id"], statement["feedback__target_span_id"]}
        spans |= {e.get("span_id") for e in statement["evidence"] or [] if isinstance(e, dict)}
        return difference.get("span_id") in spans - {None, ""}
    if difference["kind"] == "missing_action":
        tool = difference["action"]
        return tool not in tools_called and (statement["node"] == tool or _names(statement["text"], tool))
    return False


def score_tau(*, project, rows: dict[int, dict], statements: list[dict], folder: Path) -> dict:
    from traces.models import Span, Trace

    labels = {}
    for line in (folder / "labels.jsonl").read_text().splitlines():
        if line.strip():
            label = json.loads(line)
            labels[label["trace_id"].lower()] = label
    traces = {t.pk: t for t in Trace.objects.filter(project=project)}
    tools = defaultdict(set)
    for trace_pk, tool, name in Span.objects.filter(trace__project=project, kind="TOOL").values_list(
            "trace_id", "tool_name", "name"):
        tools[trace_pk] |= {tool or name}
    by_trace = defaultdict(list)
    for s in statements:
        by_trace[s["trace_id"]].append(s)

    def eligible(pk: int, *, everything: bool = False) -> bool:
        row = rows.get(pk)
        if row is None or row["review"] == "rejected":
            return False
        return everything or (not row["is_other"] and row["association"] in ELIGIBLE)

    splits = {"tune": [], "report": []}
    kinds_by_insight: dict[int, dict[str, Counter]] = defaultdict(lambda: {"tune": Counter(), "report": Counter()})
    mismatched_task = []
    for pk, trace in traces.items():
        label = labels.get(trace.trace_id.lower())
        if label is None:
            continue
        match = re.fullmatch(r"airline-(\d+)", trace.task_id or "")
        task = int(match.group(1)) if match else label["task_id"]
        if task != label["task_id"]:
            mismatched_task.append(trace.trace_id)
        split = "tune" if task in TUNE_TASKS else "report" if task in REPORT_TASKS else None
        failing = label["reward"] < 1
        differences = label["write_action_differences"]
        # Label kinds each insight points at, on every failing run (whether or not the insight is eligible).
        pointed: dict[int, set[str]] = defaultdict(set)
        reached = set()
        hits = []
        for s in by_trace.get(pk, []):
            for d in differences:
                if _points_at(s, d, tools[pk]):
                    reached.add(d["kind"])
                    hits.append({"kind": d["kind"], "action": d["action"], "insights": sorted(s["insights"]),
                                 "judge": s["judge"], "statement": s["text"][:200]})
                    for insight in s["insights"]:
                        pointed[insight].add(d["kind"])
        if split is None or not failing:
            continue
        for insight, kinds in pointed.items():
            kinds_by_insight[insight][split].update(kinds)
        if not differences:
            continue
        covering = sorted(i for i in pointed if eligible(i))
        splits[split].append({
            "trace_id": trace.trace_id, "file": label["file"], "task": task, "outcome": trace.outcome,
            "kinds": sorted({d["kind"] for d in differences}), "covered": bool(covering), "by": covering,
            "covered_counting_all": any(eligible(i, everything=True) for i in pointed),
            "judges_reach": bool(reached), "statements": len(by_trace.get(pk, [])), "hits": hits[:4],
        })
    coverage = {}
    for split, runs in splits.items():
        n = len(runs)
        by_kind = {}
        for kind in ("missing_action", "wrong_arguments", "unexpected_action"):
            having = [r for r in runs if kind in r["kinds"]]
            by_kind[kind] = {"runs": len(having), "covered": sum(r["covered"] for r in having)}
        coverage[split] = {
            "runs": n, "covered": sum(r["covered"] for r in runs),
            "share": round(sum(r["covered"] for r in runs) / n, 4) if n else None,
            "covered_counting_all": sum(r["covered_counting_all"] for r in runs),
            "judges_reach": sum(r["judges_reach"] for r in runs),
            "with_no_statement": sum(1 for r in runs if not r["statements"]),
            "by_kind": by_kind,
        }
    for pk, row in rows.items():
        row["covers"] = {split: dict(c) for split, c in kinds_by_insight.get(pk, {}).items() if c}
    listed = [r for r in rows.values() if r["review"] != "rejected"]
    patterns = [r for r in listed if not r["is_other"]]
    bad_associated = [r["id"] for r in patterns if r["association"] == "associated"
                      and ((r["lift_low"] is None or r["lift_low"] <= 1)
                           or r["succeeding"] * 5 > r["failing"] + r["succeeding"])]
    outcomes = Counter(t.outcome or "none" for t in traces.values())
    return {
        "traces": len(traces), "outcomes": dict(outcomes), "task_mismatches": mismatched_task,
        "coverage": coverage, "runs": splits,
        "checks": {
            "unknown": [r["id"] for r in patterns if r["association"] == "unknown"],
            "associated": [r["id"] for r in patterns if r["association"] == "associated"],
            "associated_not_above_1_or_over_a_fifth_succeeding": bad_associated,
        },
    }
