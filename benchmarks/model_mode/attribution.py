"""`--attribution N`: the Who&When LLM attribution methods against the model server, scored like the offline ones.

In a mode's child process (Django set up, its fresh database migrated), after judging: the N smallest Who&When
Algorithm-Generated traces (by file size) go into the project `attribution` through `traces_import`, given the trace
files alone (links in a temporary folder: labels.jsonl never reaches the shipped code). Then `manage.py
attribution_score --json` scores, on the same labels, the offline `learned` method and the LLM methods
`all_at_once` and `step_by_step` against the benchmark's model server (the child's CLEAR_JUDGE_* settings: model,
key, structured-output mode, timeout, retries). Per method: agent and step accuracy (exact, ±1, ±3), errors and
inconclusive results, the model calls and tokens stored on its attributions, its conversations whose first reply
was accepted (from the benchmark's recorder), seconds; and the label-free baselines beside them.
"""

from __future__ import annotations

import io
import json
import tempfile
import time
from pathlib import Path

PROJECT = "attribution"
DATASET = "whowhen-algorithm-generated"
OFFLINE_METHODS = ("learned",)
LLM_METHODS = ("all_at_once", "step_by_step")
ACCURACIES = ("agent_accuracy", "step_accuracy", "step_within_1", "step_within_3")


def whowhen_smallest(*, folder: Path, count: int) -> list[Path]:
    """The `count` smallest Algorithm-Generated traces (size, then name: the same files in every mode)."""
    files = sorted(folder.glob("Algorithm-Generated-*.json"), key=lambda p: (p.stat().st_size, p.name))
    if not files:
        raise FileNotFoundError(f"no Who&When traces at {folder}: lay shared/ next to the checkout or set CLEAR_SHARED_DIR")
    return files[:count]


def attribution_bench(*, count: int, shared_dir: Path, model: str, api_base: str, recorder=None) -> dict:
    """Import the traces, score each method; `recorder` (run.Recorder) gives the methods' conversations."""
    from django.core.management import call_command

    from clear.projects.models import Project
    from diagnosis.attribution.baselines import AGENT_BASELINES
    from traces.services.imports import traces_import

    folder = shared_dir / "datasets" / DATASET
    files = whowhen_smallest(folder=folder, count=count)
    call_command("create_project", PROJECT, "--json", stdout=io.StringIO())
    project = Project.objects.get(name=PROJECT)
    with tempfile.TemporaryDirectory(prefix="clear-model-mode-attribution-") as tmp:
        for path in files:
            (Path(tmp) / path.name).symlink_to(path)
        summary = traces_import(project=project, path=Path(tmp))
    result: dict = {"traces": [p.name for p in files], "imported": summary.requests_accepted, "methods": {},
                    "baselines": {}, "agent_baselines": list(AGENT_BASELINES)}
    for method in OFFLINE_METHODS + LLM_METHODS:
        llm = method in LLM_METHODS
        before = len(recorder.conversations) if recorder is not None else 0
        started = time.perf_counter()
        try:
            report = method_score(project=project, labels=folder / "labels.jsonl", method=method,
                                  model=model if llm else "", api_base=api_base if llm else "")
        except Exception as error:  # noqa: BLE001 - reported beside the other methods, not hidden
            result["methods"][method] = {"error": f"{type(error).__name__}: {error}"[:500]}
            continue
        seconds = time.perf_counter() - started
        result["baselines"] = report.pop("baselines", {}) or result["baselines"]
        report.update(method_spend(project=project, method=method), seconds=round(seconds, 1))
        if recorder is not None:
            report["conversations"] = conversations_summary(recorder.conversations[before:])
        result["methods"][method] = report
    return result


def method_score(*, project, labels: Path, method: str, model: str = "", api_base: str = "") -> dict:
    """`manage.py attribution_score --json` as a user runs it (labels read by the scorer only)."""
    from django.core.management import call_command

    args = ["--project", project.name, "--labels", str(labels), "--method", method, "--json"]
    if model:
        args += ["--model", model]
    if api_base:
        args += ["--api-base", api_base]
    out = io.StringIO()
    call_command("attribution_score", *args, stdout=out)
    return json.loads(out.getvalue())


def method_spend(*, project, method: str) -> dict:
    """Model calls, tokens and cost stored on the method's attributions, and their statuses."""
    from collections import Counter

    from django.db.models import Sum

    from diagnosis.attribution.models import Attribution

    rows = Attribution.objects.filter(project=project, method=method)
    totals = rows.aggregate(calls=Sum("calls"), input_tokens=Sum("input_tokens"), output_tokens=Sum("output_tokens"),
                            cost=Sum("cost"))
    spend = {key: value or 0 for key, value in totals.items()}
    spend["statuses"] = dict(Counter(rows.values_list("status", flat=True)))
    spend["error_examples"] = list(rows.filter(status="error").values_list("error", flat=True)[:3])
    return spend


def conversations_summary(conversations: list[dict]) -> dict:
    """The recorder's JSON conversations of one method: how many, first reply accepted, accepted in the end."""
    return {"count": len(conversations),
            "first_valid": sum(1 for c in conversations if c["rounds"] and c["rounds"][0]["ok"]),
            "accepted": sum(1 for c in conversations if c["outcome"] == "accepted"),
            "requests": sum(len(c["requests"]) for c in conversations)}


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def attribution_lines(modes: dict) -> list[str]:
    """The printed table: per mode, each method's accuracies and spend, then the baselines."""
    lines = []
    for mode, result in modes.items():
        bench = result.get("attribution") if isinstance(result, dict) else None
        if not bench:
            continue
        if "error" in bench:
            lines.append(f"\nattribution ({mode}): {bench['error']}")
            continue
        lines.append(f"\nattribution ({mode}), {bench['imported']} smallest Who&When Algorithm-Generated traces:")
        lines.append(f"  {'method':<38}{'agent':>8}{'step':>8}{'±1':>8}{'±3':>8}{'err':>5}{'inc':>5}{'calls':>7}"
                     f"{'tokens in/out':>18}{'first ok':>10}{'s':>7}")
        for method, report in bench["methods"].items():
            if "error" in report:
                lines.append(f"  {method:<38}{report['error'][:90]}")
                continue
            conv = report.get("conversations") or {}
            first = f"{conv['first_valid']}/{conv['count']}" if conv.get("count") else "-"
            lines.append(f"  {method:<38}" + "".join(f"{_pct(report[k]):>8}" for k in ACCURACIES)
                         + f"{report['errors']:>5}{report['inconclusive']:>5}{report['calls']:>7}"
                         + f"{report['input_tokens']:>9} / {report['output_tokens']:<6}{first:>10}"
                         + f"{report['seconds']:>7}")
        for name, rates in bench["baselines"].items():
            cells = ([_pct(rates["agent"])] + ["-"] * 3 if name in bench["agent_baselines"] else
                     ["-"] + [_pct(rates[k]) for k in ("step_exact", "step_within_1", "step_within_3")])
            lines.append(f"  {'baseline ' + name:<38}" + "".join(f"{c:>8}" for c in cells))
    return lines
