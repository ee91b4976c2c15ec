"""Insights on real agents' traces, no model (issue 28's acceptance): coverage of labelled faults on tau-airline,
association and tickets on a failed-only set.

    .venv/bin/python -m benchmarks.insights_real --dataset tau-airline [--json var/bench/insights_real.json]
    .venv/bin/python -m benchmarks.insights_real --dataset whowhen
    .venv/bin/python benchmarks/insights_real/run.py --help

One process on a throw-away Postgres database (`--db`, dropped and recreated, dropped at the end unless
`--keep-db`), clear.settings.test (Celery eager, nothing queued), CLEAR_JUDGE_MODEL="" (no model: offline names):

1. The dataset's trace files under CLEAR_SHARED_DIR/datasets/ (tau-airline: airline-*.json, 50 tasks x 4 trials;
   whowhen: whowhen-algorithm-generated/Algorithm-Generated-*.json, 126 failed runs) are imported into one project
   through traces_import (the outcome, score and task id come from the root span). Only the trace files are given
   to the importer (through a temporary folder of links): labels.jsonl never reaches the shipped code.
2. One diagnosis run over every trace with the default judges and no model (diagnosis_run_start(judges=None):
   every rule judge, the rubrics, the contrastive judge), executed in-process, then insights_build (which also
   syncs the tickets).
3. Scoring, here only, with labels.jsonl:
   tau-airline: tasks 0-24 are the tune split, 25-49 the report split (the task number of clear.task.id
   `airline-<n>`, checked against the label's task_id). A failing run (reward 0) with at least one labelled
   write-action difference is covered when an eligible insight (associated with failure or of unknown
   association; not an "other" bucket, not rejected, merged insights followed) has a member statement
   (InsightStatement of the run, not excluded, node- or system-level) on that trace that points at a difference:
   * wrong_arguments / unexpected_action: the labelled span is the statement's span, its feedback's target span,
     or a span its evidence cites;
   * missing_action: the statement names the tool (its text, as a whole identifier, or its node) and the trace has
     no TOOL span of that tool.
   Also printed: the same coverage if "other" buckets and not-associated insights counted (what the judges reach),
   each insight (title, failing / succeeding traces, lift, association, label kinds it covers per split, ticket),
   insights "unknown", associated insights whose lift interval is not above 1 or with more than a fifth of their
   traces succeeding, the open list (insight_list status=open) and the overview's Top insights.
   whowhen: each insight's association and its ticket (its own, or the system insight's ticket that tracks it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.throwaway import bench_in_throwaway, dataset_folder, dataset_import, django_start  # noqa: E402

DATASETS = {
    "tau-airline": ("tau-airline", "airline-*.json"),
    "whowhen": ("whowhen-algorithm-generated", "Algorithm-Generated-*.json"),
}
TUNE_TASKS = range(0, 25)
REPORT_TASKS = range(25, 50)
SPAN_KINDS = ("wrong_arguments", "unexpected_action")
ELIGIBLE = ("associated", "unknown")


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", choices=sorted(DATASETS), default="tau-airline")
    p.add_argument("--pg", default=os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432"),
                   help="Postgres server URL without database (default postgres://postgres@127.0.0.1:5432)")
    p.add_argument("--db", default="clear_bench_insights_real", help="benchmark database, dropped and recreated")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/8", help="test Redis URL (nothing is queued)")
    p.add_argument("--keep-db", action="store_true", help="do not drop the database at the end")
    p.add_argument("--json", dest="json_out", metavar="FILE", help="also write the results as JSON to this file")
    return p.parse_args(argv)


def _log(msg: str) -> None:
    print(f"[insights_real] {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def _setup(args: argparse.Namespace) -> None:
    django_start(pg=args.pg, db=args.db, redis=args.redis)


def _git_state() -> dict:
    def git(*cmd: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(REPO), *cmd], capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"head": git("log", "-1", "--format=%h %cI %s"), "status_short": git("status", "--short").splitlines()}


def _machine() -> dict:
    return {"host": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "load_before": [round(x, 2) for x in os.getloadavg()]}


# ---------------------------------------------------------------------------------------------------------------
# ingestion, diagnosis, build


def _dataset_folder(dataset: str) -> Path:
    return dataset_folder(DATASETS[dataset][0])


def _ingest(project, dataset: str) -> dict:
    summary, files, seconds = dataset_import(project=project, folder=_dataset_folder(dataset),
                                             pattern=DATASETS[dataset][1])
    return {"files": files, "seconds": round(seconds, 1),
            "summary": {k: v for k, v in vars(summary).items() if isinstance(v, (int, float, str)) and k != "path"}}


def _diagnose(project) -> tuple:
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


# ---------------------------------------------------------------------------------------------------------------
# the project's insights, their members and tickets (read through the models; nothing here feeds back)


def _root(insight_id: int | None, merged: dict[int, int | None]) -> int | None:
    seen = set()
    while insight_id is not None and merged.get(insight_id) and insight_id not in seen:
        seen.add(insight_id)
        insight_id = merged[insight_id]
    return insight_id


def _insights(project, run) -> tuple[dict[int, dict], list[dict]]:
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
        traces = {s["trace_id"] for s in members.get(insight.pk, [])}
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
            "frequency": insight.frequency, "statements": len(members.get(insight.pk, [])),
            "traces": len(traces), "failing": outcomes.get("failure", 0), "succeeding": outcomes.get("success", 0),
            "no_outcome": sum(n for k, n in outcomes.items() if k not in ("failure", "success")),
            "judges": dict(Counter(s["judge"] for s in members.get(insight.pk, []))),
            "member_tools": dict(Counter(tool_of[(s["trace_id"], s["span_id"])] for s in members.get(insight.pk, [])
                                         if (s["trace_id"], s["span_id"]) in tool_of).most_common()),
            "ticket": ({"id": ticket.pk, "status": ticket.status, "merged_into": ticket.merged_into_id}
                       if ticket is not None else None),
            "ticket_via_system": ({"id": via.pk, "status": via.status} if isinstance(via, Ticket) else None),
        }
    return rows, statements


def _open_list(project) -> dict:
    from diagnosis.models import Insight
    from diagnosis.selectors import insight_list, insight_list_top

    listed = list(insight_list(project=project, status=Insight.Status.OPEN))
    return {"open": len(listed), "open_without_other": sum(1 for i in listed if not i.is_other),
            "open_node": sum(1 for i in listed if i.level == "node" and not i.is_other),
            "open_system": sum(1 for i in listed if i.level == "system" and not i.is_other),
            "open_by_design": [i.pk for i in listed if getattr(i, "by_design", False)],
            "top": [{"id": i.pk, "title": i.title, "association": i.failure_association}
                    for i in insight_list_top(project=project)]}


# ---------------------------------------------------------------------------------------------------------------
# tau-airline scoring


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


def _score_tau(project, run, rows: dict[int, dict], statements: list[dict]) -> dict:
    from traces.models import Span, Trace

    labels = {}
    for line in (_dataset_folder("tau-airline") / "labels.jsonl").read_text().splitlines():
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


# ---------------------------------------------------------------------------------------------------------------
# printing


def _lift(row: dict) -> str:
    if row["lift"] is None:
        return "lift -"
    low = "-" if row["lift_low"] is None else f"{row['lift_low']:.2f}"
    high = "-" if row["lift_high"] is None else f"{row['lift_high']:.2f}"
    return f"lift {row['lift']:.2f} [{low}, {high}]"


def _ordered(rows: dict[int, dict]) -> list[dict]:
    return sorted(rows.values(), key=lambda r: (r["is_other"], r["association"] == "not_associated",
                                                -r["traces"], r["level"], r["id"]))


def _print_header(result: dict) -> None:
    m, g = result["machine"], result["git"]
    print(f"\n== {result['dataset']}: {result['date']} on {m['host']} ({m['cpus']} CPUs, load before "
          f"{m['load_before']}), git {g['head']}")
    if g["status_short"]:
        print("   working tree: " + "; ".join(g["status_short"]))
    i, d = result["ingest"], result["timing"]
    print(f"   imported {i['files']} files in {i['seconds']} s; diagnosis {d['judge_seconds']} s, insights build "
          f"{d['build_seconds']} s; judges {result['run']['judges']}; run status {result['run']['status']}")
    fb = result["run"]["feedback"]
    print("   feedback by judge (fail verdicts / all): " + ", ".join(
        f"{j} {v['fail']}/{v['all']}" for j, v in sorted(fb.items())))
    c = result["run"].get("contrastive") or {}
    if c:
        print(f"   contrastive: {c.get('status')}{' (' + c['reason'] + ')' if c.get('reason') else ''}; "
              f"{c.get('failing')} failing / {c.get('succeeding')} succeeding traces, {c.get('features')} features, "
              f"{c.get('tested')} tested, {len(c.get('findings') or [])} findings")
        # "suggestive": the strongest hypotheses that did not pass the correction, when the judge reports them.
        for key in ("findings", "suggestive"):
            for f in (c.get(key) or [])[:8]:
                p, q = f.get("p_value", f.get("p")), f.get("q_value", f.get("q"))
                print(f"     {key[:-1] if key == 'findings' else key} [{f.get('node')}] {f.get('statement')} "
                      f"(p={_num(p)}, q={_num(q)})")


def _num(value) -> str:
    return f"{value:.2g}" if isinstance(value, (int, float)) else str(value)


def _print_tau(result: dict) -> None:
    _print_header(result)
    s = result["score"]
    print(f"   traces {s['traces']} {s['outcomes']}" + (f"; task id mismatches {s['task_mismatches']}"
                                                       if s["task_mismatches"] else ""))
    print("\n   Coverage of failing runs with a labelled write-action difference (eligible insight = associated "
          "or unknown, not an 'other' bucket):")
    for split in ("report", "tune"):
        c = s["coverage"][split]
        kinds = ", ".join(f"{k} {v['covered']}/{v['runs']}" for k, v in c["by_kind"].items())
        head = "REPORT (tasks 25-49, headline)" if split == "report" else "tune   (tasks 0-24)"
        share = "-" if c["share"] is None else f"{c['share'] * 100:.1f}%"
        print(f"   {head}: {c['covered']}/{c['runs']} = {share}   [{kinds}]")
        print(f"      counting every insight incl. 'other' buckets and not-associated: {c['covered_counting_all']}; "
              f"any statement pointing at a difference (judges' reach): {c['judges_reach']}; runs with no "
              f"statement at all: {c['with_no_statement']}")
    checks = s["checks"]
    o = result["open_list"]
    print(f"\n   insights 'unknown' (goal 0): {len(checks['unknown'])} {checks['unknown']}")
    print(f"   associated: {len(checks['associated'])}; of them lift interval not above 1 or > 1/5 of traces "
          f"succeeding (goal 0): {len(checks['associated_not_above_1_or_over_a_fifth_succeeding'])} "
          f"{checks['associated_not_above_1_or_over_a_fifth_succeeding']}")
    print(f"   open list (insight_list status=open, goal <= 15): {o['open']} ({o['open_node']} node, "
          f"{o['open_system']} system, {o['open'] - o['open_without_other']} 'other' buckets)")
    print(f"   open insights marked by-design (goal 0): {len(o['open_by_design'])} {o['open_by_design']}")
    print("   overview Top insights: " + ("; ".join(f"#{t['id']} {t['title']} ({t['association']})"
                                                    for t in o["top"]) or "none"))
    print("\n   insights (id level [node] title | failing/succeeding traces | lift | association | label kinds "
          "covered report/tune | ticket):")
    for r in _ordered(result["insights"]):
        covers = r.get("covers") or {}
        kinds = " / ".join(",".join(f"{k}x{n}" for k, n in sorted(covers.get(sp, {}).items())) or "-"
                           for sp in ("report", "tune"))
        print(f"   #{r['id']} {r['level']} [{r['node']}] {r['title']}{_flags(r)}"
              f"\n        {r['failing']}/{r['succeeding']} traces | {_lift(r)} | {r['association']} | {kinds} | "
              f"{_ticket(r)} | judges {r['judges']}"
              + (f" | members on tools {r['member_tools']}" if r["member_tools"] else ""))


def _flags(row: dict) -> str:
    flags = [name for name, on in (("other bucket", row["is_other"]), ("by design", row["by_design"]),
                                    (row["status"], row["status"] != "open")) if on]
    return f" ({', '.join(flags)})" if flags else ""


def _ticket(row: dict) -> str:
    if row["ticket"] and not row["ticket"]["merged_into"]:
        return f"ticket #{row['ticket']['id']} {row['ticket']['status']}"
    if row["ticket_via_system"]:
        return f"tracked by system ticket #{row['ticket_via_system']['id']} {row['ticket_via_system']['status']}"
    if row["ticket"]:
        return f"ticket #{row['ticket']['id']} {row['ticket']['status']} (merged)"
    return "no ticket"


def _print_whowhen(result: dict) -> None:
    _print_header(result)
    rows = [r for r in result["insights"].values() if r["review"] != "rejected"]
    patterns = [r for r in rows if not r["is_other"]]
    o = result["open_list"]
    print(f"   insights: {len(patterns)} patterns + {len(rows) - len(patterns)} 'other' buckets; association of the "
          f"patterns: {dict(Counter(r['association'] for r in patterns))}; patterns with a ticket (own or a system "
          f"ticket's): {sum(1 for r in patterns if _ticket(r) != 'no ticket')}; tickets: {result['tickets']}")
    print(f"   open list: {o['open']}; Top insights: {len(o['top'])}")
    print("\n   insights (id level [node] title | traces | lift | association | ticket):")
    for r in _ordered(result["insights"]):
        print(f"   #{r['id']} {r['level']} [{r['node']}] {r['title']}{_flags(r)}"
              f"\n        {r['traces']} traces ({r['failing']} failing) | {_lift(r)} | {r['association']} | "
              f"{_ticket(r)}")


# ---------------------------------------------------------------------------------------------------------------


def bench(args: argparse.Namespace) -> dict:
    from django.db.models import Count, Q

    from clear.projects.services import project_create, user_get_or_create
    from diagnosis.models import Feedback
    from diagnosis.tickets.models import Ticket

    result = {"dataset": args.dataset, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": _machine(),
              "git": _git_state()}
    owner, _ = user_get_or_create(email="bench@example.com", password="correct horse battery staple")
    project = project_create(name=f"insights real {args.dataset}", owner=owner)
    _log(f"import {args.dataset}")
    result["ingest"] = _ingest(project, args.dataset)
    _log(f"imported {result['ingest']['files']} files; diagnosis (default judges, no model) and insights build")
    run, summary, timing = _diagnose(project)
    result["timing"] = timing
    feedback = (Feedback.objects.filter(run=run).values("judge")
                .annotate(all=Count("pk"), fail=Count("pk", filter=Q(verdict="fail"))))
    result["run"] = {"id": str(run.pk), "status": run.status, "judges": list(run.judges),
                     "insights_status": run.insights_status, "insights_summary": summary,
                     "feedback": {f["judge"]: {"all": f["all"], "fail": f["fail"]} for f in feedback},
                     "contrastive": (run.config or {}).get("contrastive")}
    _log(f"run {run.status}, insights {run.insights_status}; scoring")
    rows, statements = _insights(project, run)
    result["insights"] = rows
    result["open_list"] = _open_list(project)
    result["tickets"] = dict(Counter(Ticket.objects.filter(project=project).values_list("status", flat=True)))
    if args.dataset == "tau-airline":
        result["score"] = _score_tau(project, run, rows, statements)
    return result


def main(argv: list[str] | None = None) -> dict:
    args = _args(argv)
    _log(f"database {args.db}: recreate and migrate")
    result = bench_in_throwaway(pg=args.pg, db=args.db, keep=args.keep_db, setup=lambda: _setup(args),
                                bench=lambda: bench(args))
    (_print_tau if args.dataset == "tau-airline" else _print_whowhen)(result)
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(result, indent=1, default=str))
    return result


if __name__ == "__main__":
    main()
