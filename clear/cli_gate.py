"""`clearctl gate`: fail a CI build on new or worse insights of a release against a baseline release.

    clearctl gate --release "$GITHUB_SHA" --baseline-release main --wait --junit clear.xml --markdown clear.md

1. For each release, start a diagnosis run over its traces, or reuse one (POST /api/v1/runs/ with `reuse`: a
   queued, running or succeeded run of the same release and judge configuration, unless traces arrived since).
   Runs it starts have purpose "gate": their insights are compared, but never become the dashboard's figures.
2. With --wait, wait for the runs and their insights builds (progress bars on stderr); without it, runs that are
   not ready are an error.
3. GET /api/v1/compare/ (the rule for new / worse / resolved / better is documented there), print a summary, write
   the JUnit XML (one testcase per problem; new and worse ones are failures when their count is over the limit)
   and the Markdown summary. Problems are counted, not insights: a node insight a system insight holds is listed
   under it (`nodes`) and counts with it, so one bug is one new insight.
4. Exit 0 (passed), 1 (more new or worse insights than allowed), 2 (anything else went wrong: bad URL or key,
   a release without traces, a run that failed, a timeout...).

Standard library only, like clear/cli.py.
"""

from __future__ import annotations

import argparse
import sys
import time
import xml.etree.ElementTree as ET
from typing import Any

from clear.cli import FINAL_STATUSES, CliError, Client, _client, _split, _wait, _write_file

EXIT_PASSED, EXIT_FAILED, EXIT_ERROR = 0, 1, 2
CHANGE_ORDER = ("new", "worse", "resolved", "better", "unchanged")


def _start_or_reuse(client: Client, *, release: str, judges: list[str], model: str) -> dict:
    # purpose "gate": the server keeps the dashboard's figures on its full diagnosis runs, so gating a pull request
    # (or its baseline, judged last) does not rewrite them; a server without the field ignores it.
    body: dict[str, Any] = {"release": release, "judges": judges, "reuse": True, "name": f"clearctl gate {release}",
                            "purpose": "gate"}
    if model:
        body["model"] = model
    no_traces = (f"Release {release!r} has no traces in this project. Did the tests export them with "
                 f"service.version={release} (OTEL_RESOURCE_ATTRIBUTES) to this Clear and project?")
    try:
        run = client.request("POST", "/api/v1/runs/", body=body)
    except CliError as exc:
        if exc.code == "release_without_traces":  # the server refused to make a run that would judge nothing
            raise CliError(no_traces, EXIT_ERROR, code=exc.code) from None
        raise
    if run["total_count"] == 0:  # a server from before that refusal made an empty run
        raise CliError(no_traces, EXIT_ERROR)
    how = "reusing" if client.last_status == 200 else "started"
    print(f"Release {release}: {how} run {run['id']} ({run['total_count']} traces, {run['status']}).",
          file=sys.stderr)
    return run


def _ready(client: Client, run: dict, *, release: str, wait: bool, interval: float, deadline: float | None) -> dict:
    """The run once it succeeded and its insights are built; CliError (exit 2) otherwise."""
    def remaining() -> float | None:
        return None if deadline is None else max(0.001, deadline - time.monotonic())

    if run["status"] not in FINAL_STATUSES:
        if not wait:
            raise CliError(f"Run {run['id']} of release {release} is still {run['status']}; pass --wait to wait "
                           "for it.", EXIT_ERROR)
        try:
            run = _wait(client, run["id"], interval=interval, timeout=remaining())
        except CliError as exc:
            raise CliError(str(exc) + " Raise --timeout, or check that a Celery worker is running.", EXIT_ERROR) \
                from None
    if run["status"] != "succeeded":
        detail = f": {run['failure_message']}" if run.get("failure_message") else ""
        raise CliError(f"Run {run['id']} of release {release} ended {run['status']}{detail}.", EXIT_ERROR)
    announced = False
    while True:
        run = client.request("GET", f"/api/v1/runs/{run['id']}/")
        state = run.get("insights_status", "")
        if state == "done":
            return run
        if state == "failed":
            raise CliError(f"The insights build of run {run['id']} (release {release}) failed; see the worker's log "
                           "and rebuild it with `manage.py build_insights --force`.", EXIT_ERROR)
        if not wait:
            raise CliError(f"The insights of run {run['id']} (release {release}) are not built yet "
                           f"({state or 'not requested'}); pass --wait to wait for them.", EXIT_ERROR)
        if deadline is not None and time.monotonic() > deadline:
            raise CliError(f"The insights of run {run['id']} (release {release}) were still {state or 'pending'} "
                           "at the timeout. Raise --timeout, or check that a Celery worker is running.", EXIT_ERROR)
        if not announced:
            print(f"Release {release}: building insights of run {run['id']}…", file=sys.stderr)
            announced = True
        time.sleep(interval)


def _share(side: dict) -> str:
    return f"{side['trace_count']}/{side['judged']} ({side['frequency']:.1%})"


def _limits(args: argparse.Namespace) -> dict[str, int]:
    return {"new": args.max_new, "worse": args.max_worse}


def _over(comparison: dict, limits: dict[str, int]) -> dict[str, bool]:
    return {change: comparison["counts"][change] > limit for change, limit in limits.items()}


def _print_summary(comparison: dict, args: argparse.Namespace, over: dict[str, bool]) -> None:
    counts = comparison["counts"]
    base, head = comparison["base"], comparison["head"]
    print(f"Clear gate: release {args.release} against baseline {args.baseline_release}")
    print(f"  head run {head['id']} ({head['judged']} traces judged), base run {base['id']} ({base['judged']})")
    print(f"  new {counts['new']} (max {args.max_new}), worse {counts['worse']} (max {args.max_worse}), "
          f"resolved {counts['resolved']}, better {counts['better']}, unchanged {counts['unchanged']}")
    for change in ("new", "worse", "resolved", "better"):
        for row in comparison[change]:
            print(f"  {change.upper():9} {row['level']:6} {row['node'] or '-':20} {row['title'][:90]}  "
                  f"{_share(row['base'])} → {_share(row['head'])}")
            for node in row.get("nodes") or []:  # part of this problem, not counted on its own
                print(f"  {'':9}   └ {node['node'] or '-':20} {node['title'][:86]}  ({node['change']})")
    failed = [f"{counts[c]} {c} (max {_limits(args)[c]})" for c in ("new", "worse") if over[c]]
    print(f"FAILED: {', '.join(failed)}" if failed else "PASSED")


def _label(row: dict) -> str:
    return f"[{row['level']} {row['node'] or 'system'}] {row['title']}"


def junit_xml(comparison: dict, args: argparse.Namespace, over: dict[str, bool]) -> bytes:
    """One testcase per insight of either run, plus the gate itself; new / worse insights are failures when their
    count is over its limit."""
    rows = [(change, row) for change in CHANGE_ORDER for row in comparison[change]]
    failures = sum(1 for change, _ in rows if over.get(change)) + (1 if any(over.values()) else 0)
    suites = ET.Element("testsuites", name="clear-gate", tests=str(len(rows) + 1), failures=str(failures),
                        errors="0")
    suite = ET.SubElement(suites, "testsuite", name=_xml(f"clear gate {args.release} vs {args.baseline_release}"),
                          tests=str(len(rows) + 1), failures=str(failures), errors="0", skipped="0", time="0")
    properties = ET.SubElement(suite, "properties")
    for name, value in (("release", args.release), ("baseline_release", args.baseline_release),
                        ("head_run", comparison["head"]["id"]), ("base_run", comparison["base"]["id"]),
                        ("max_new", args.max_new), ("max_worse", args.max_worse),
                        *((f"threshold.{k}", v) for k, v in comparison["thresholds"].items())):
        ET.SubElement(properties, "property", name=name, value=_xml(str(value)))
    counts = comparison["counts"]
    gate = ET.SubElement(suite, "testcase", classname="clear.gate", name="new and worse insights within limits",
                         time="0")
    if any(over.values()):
        message = ", ".join(f"{counts[c]} {c} insight(s) (max {_limits(args)[c]})" for c in over if over[c])
        ET.SubElement(gate, "failure", message=message, type="gate").text = message
    for change, row in rows:
        case = ET.SubElement(suite, "testcase", name=_xml(_label(row)), time="0",
                             classname=_xml(f"clear.insights.{row['level']}.{row['node'] or 'system'}"))
        detail = (f"{change}: {row['title']}\nnode {row['node'] or '-'}, severity {row['severity']}, insight "
                  f"{row['id'] or '(not in the Insights list)'}\nbaseline {_share(row['base'])}, this release "
                  f"{_share(row['head'])}")
        detail += "".join(f"\n  node insight at {n['node']}: {n['title']} ({n['change']})"
                          for n in row.get("nodes") or [])
        if over.get(change):
            ET.SubElement(case, "failure", message=_xml(f"{change} insight: {row['title']}"),
                          type=change).text = _xml(detail)
        else:
            ET.SubElement(case, "system-out").text = _xml(detail)
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)


def _xml(text: str) -> str:
    """XML 1.0 cannot hold most control characters, which a trace-derived title may contain."""
    return "".join(c if c in "\t\n\r" or ord(c) >= 0x20 else "\ufffd" for c in text)


def _code(text: str) -> str:
    return "`" + " ".join(text.replace("`", "'").split()) + "`"


def md_escape(text: str) -> str:
    """Insight titles come from traces: nothing in them may become Markdown or HTML."""
    for char in "\\`*_{}[]<>()#+!|~":
        text = text.replace(char, "\\" + char)
    return " ".join(text.split())


def markdown_summary(comparison: dict, args: argparse.Namespace, over: dict[str, bool], *, ui_base: str = "") -> str:
    counts = comparison["counts"]
    verdict = "failed" if any(over.values()) else "passed"
    lines = [f"## Clear gate {verdict}: {_code(args.release)} against {_code(args.baseline_release)}", "",
             f"Runs: this release {comparison['head']['id']} ({comparison['head']['judged']} traces judged), "
             f"baseline {comparison['base']['id']} ({comparison['base']['judged']}).", "",
             "| insights | count | limit |", "| --- | ---: | ---: |"]
    for change in ("new", "worse", "resolved", "better", "unchanged"):
        limit = _limits(args).get(change)
        mark = " **over**" if over.get(change) else ""
        lines.append(f"| {change} | {counts[change]}{mark} | {'' if limit is None else limit} |")
    for change in ("new", "worse", "resolved", "better"):
        if not comparison[change]:
            continue
        lines += ["", f"### {change.capitalize()} insights", "",
                  "| insight | level | node | severity | baseline | this release |",
                  "| --- | --- | --- | --- | ---: | ---: |"]
        for row in comparison[change]:
            title = f"**{md_escape(row['title'])}**"
            if ui_base and row["id"]:  # a pattern of the gate's runs alone is no stored insight (no page)
                title = f"[{title}]({ui_base}/insights/{row['id']}/)"
            lines.append(f"| {title} | {row['level']} | {md_escape(row['node']) or '-'} | {row['severity']} | "
                         f"{_share(row['base'])} | {_share(row['head'])} |")
    thresholds = comparison["thresholds"]
    lines += ["", f"Worse / better: frequency change of at least {thresholds['min_delta']:g} and outside "
                  f"chance at {thresholds['confidence']:g} confidence; new: in at least {thresholds['min_traces']} "
                  "trace(s) of this release and none of the baseline.", ""]
    return "\n".join(lines)


def cmd_gate(args: argparse.Namespace) -> int:
    try:
        return _gate(args)
    except CliError as exc:
        exc.exit_code = EXIT_ERROR  # whatever went wrong, the build did not get a verdict
        raise


def _gate(args: argparse.Namespace) -> int:
    client = _client(args)
    deadline = time.monotonic() + args.timeout if args.timeout else None
    judges = _split(args.judges)
    head = _start_or_reuse(client, release=args.release, judges=judges, model=args.model or "")
    base = head if args.baseline_release == args.release else _start_or_reuse(
        client, release=args.baseline_release, judges=judges, model=args.model or "")
    head = _ready(client, head, release=args.release, wait=args.wait, interval=args.interval, deadline=deadline)
    base = head if base["id"] == head["id"] else _ready(client, base, release=args.baseline_release, wait=args.wait,
                                                        interval=args.interval, deadline=deadline)
    params = {"base_run": base["id"], "head_run": head["id"], "min_delta": args.min_delta,
              "confidence": args.confidence, "min_traces": args.min_traces, "level": args.level}
    comparison = client.request("GET", "/api/v1/compare/", params=params)
    over = _over(comparison, _limits(args))
    _print_summary(comparison, args, over)
    if args.junit:
        _write_file(args.junit, junit_xml(comparison, args, over))
        print(f"Wrote {args.junit}.", file=sys.stderr)
    if args.markdown:
        slug = (client.request("GET", "/api/v1/project/") or {}).get("slug", "")
        ui_base = f"{client.url}/p/{slug}" if slug else ""
        _write_file(args.markdown, markdown_summary(comparison, args, over, ui_base=ui_base))
        print(f"Wrote {args.markdown}.", file=sys.stderr)
    return EXIT_FAILED if any(over.values()) else EXIT_PASSED


def add_gate_parser(groups) -> None:
    gate = groups.add_parser(
        "gate", help="fail the build on new or worse insights of a release against a baseline release",
        description="Diagnose a release and a baseline release (or reuse their runs), compare their insights and "
                    "exit 0 (passed), 1 (more new or worse insights than allowed) or 2 (error).")
    gate.add_argument("--release", required=True, help="the release under test (its traces' service.version)")
    gate.add_argument("--baseline-release", required=True, help="the release to compare with, e.g. main's")
    gate.add_argument("--max-new", type=int, default=0, help="new insights allowed (default 0)")
    gate.add_argument("--max-worse", type=int, default=0, help="worse insights allowed (default 0)")
    gate.add_argument("--wait", action="store_true", help="wait for the runs and their insights (else they must "
                                                          "be ready)")
    gate.add_argument("--junit", metavar="FILE", help="write a JUnit XML report (one testcase per insight)")
    gate.add_argument("--markdown", metavar="FILE", help="write a Markdown summary (e.g. $GITHUB_STEP_SUMMARY)")
    gate.add_argument("--judges", action="append", help="judge names or aliases (default: the project's defaults)")
    gate.add_argument("--model", help="the LLM judges' model (default: the server's CLEAR_JUDGE_MODEL)")
    gate.add_argument("--level", choices=["node", "system"], help="compare only node or system insights")
    gate.add_argument("--min-delta", type=float, default=0.05,
                      help="smallest frequency change that counts as worse (default 0.05)")
    gate.add_argument("--confidence", type=float, default=0.95,
                      help="confidence of the frequency change's interval (default 0.95)")
    gate.add_argument("--min-traces", type=int, default=1, help="traces a new insight needs (default 1)")
    gate.add_argument("--interval", type=float, default=2.0, help="seconds between polls (default 2)")
    gate.add_argument("--timeout", type=float, default=1800.0, help="give up after this many seconds (default 1800)")
    gate.set_defaults(func=cmd_gate)
