"""Contrastive judge: precision and recall of its findings and insights against the example agent's planted bugs.

    .venv/bin/python -m benchmarks.contrastive                 # the demo's data: v1 all bugs seed 0, v2 seed 1
    .venv/bin/python benchmarks/contrastive/run.py --seeds 0,1 3,7 1234,5

Data: as scripts/demo.sh sends it, the example agent's 22 tasks as release v1 with every planted bug and as v2
with `mediator_race,retry_loop` (examples/support_desk/BUGS.md), stored through the ingestion service in a
throw-away SQLite database, then one diagnosis run over both releases with the rubrics off (`--judges
contrastive`, in-process) and its insights built.

Scoring (BUGS.md, "node whose spans show it": mediator_race → mediator, retry_loop → billing_worker, misroute →
planner): a finding, or an insight holding contrastive statements, is a true positive when all its failing traces
belong to the tasks of one planted bug and it sits at that bug's node; anything else is a false positive. A bug is
recalled when at least one true positive names it. Precision = TP / (TP + FP), recall = bugs recalled / 3.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

TOUCHED_BY = {
    "mediator_race": {"two-orders-status", "track-two-packages", "two-how-to-questions", "orders-and-next-bill"},
    "retry_loop": {"compare-two-invoices", "two-charges-this-month", "invoices-and-next-charge"},
    "misroute": {"refund-damaged-item", "refund-status", "refund-cancelled-order", "refund-late-delivery"},
}
BUG_NODE = {"mediator_race": "mediator", "retry_loop": "billing_worker", "misroute": "planner"}


def _setup() -> None:
    # The unit tests' settings on a fresh SQLite database in a throw-away var dir: nothing of a real install is
    # touched, and no service is needed.
    os.environ["CLEAR_VAR_DIR"] = tempfile.mkdtemp(prefix="clear-bench-contrastive-")
    os.environ["CLEAR_TEST_DATABASE"] = "sqlite"
    os.environ["DJANGO_SETTINGS_MODULE"] = "clear.settings.test"
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ["CLEAR_JUDGE_MODEL"] = ""
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def _bug(task_ids: set[str], node: str) -> str | None:
    """The planted bug a finding or insight is, or None (a false positive)."""
    for bug, touched in TOUCHED_BY.items():
        if task_ids and task_ids <= touched and node == BUG_NODE[bug]:
            return bug
    return None


def _score(items: list[tuple[str, str, set[str]]]) -> dict:
    """items: (label, node, failing task ids)."""
    matched = [(label, node, _bug(tasks, node)) for label, node, tasks in items]
    tp = sum(1 for *_, bug in matched if bug)
    recalled = {bug for *_, bug in matched if bug}
    return {"tp": tp, "fp": len(items) - tp, "precision": tp / len(items) if items else 0.0,
            "recall": len(recalled) / len(TOUCHED_BY), "items": matched}


def evaluate(seed_v1: int, seed_v2: int, index: int) -> dict:
    from clear.projects.services import project_create, user_get_or_create
    from diagnosis.models import Feedback, InsightStatement
    from diagnosis.services import diagnosis_run_execute, diagnosis_run_start
    from diagnosis.services.insights import insights_build
    from tests.diagnosis.support import support_desk_ingest

    owner, _ = user_get_or_create(email=f"bench{index}@example.com", password="correct horse battery staple")
    project = project_create(name=f"contrastive bench {index}", owner=owner)
    support_desk_ingest(project=project, bugs="all", release="v1", seed=seed_v1)
    support_desk_ingest(project=project, bugs="mediator_race,retry_loop", release="v2", seed=seed_v2)
    started = time.monotonic()
    run = diagnosis_run_execute(run=diagnosis_run_start(project=project, enqueue=False, judges=["contrastive"]))
    judged = time.monotonic() - started
    insights_build(run=run)
    report = run.config["contrastive"]
    feedback = list(Feedback.objects.filter(run=run, judge="contrastive").values_list("trace__task_id", "details"))
    findings = []
    for finding in report["findings"]:
        tasks = {task for task, details in feedback
                 if any(f["feature"] == finding["feature"] for f in details["findings"])}
        findings.append((finding["statement"], finding["node"], tasks))
    insights: dict[int, tuple[str, str, set[str]]] = {}
    statements = InsightStatement.objects.filter(run=run, feedback__judge="contrastive", excluded=False)
    for insight_id, title, node, task in statements.exclude(node_insight=None).values_list(
            "node_insight", "node_insight__title", "node_insight__node", "trace__task_id"):
        insights.setdefault(insight_id, (title, node, set()))[2].add(task)
    return {"seeds": (seed_v1, seed_v2), "report": report, "seconds": judged,
            "findings": _score(findings), "insights": _score(list(insights.values()))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", nargs="*", default=["0,1"], help="v1,v2 seed pairs (default: the demo's 0,1)")
    args = parser.parse_args(argv)
    _setup()
    for index, pair in enumerate(args.seeds):
        seed_v1, seed_v2 = (int(s) for s in pair.split(","))
        result = evaluate(seed_v1, seed_v2, index)
        report = result["report"]
        print(f"seeds v1={seed_v1} v2={seed_v2}: {report['failing']} failing, {report['succeeding']} succeeding "
              f"traces; {report['features']} features, {report['tested']} hypotheses tested; "
              f"run {result['seconds']:.1f} s")
        for level in ("findings", "insights"):
            score = result[level]
            print(f"  {level}: precision {score['precision']:.2f} ({score['tp']} TP, {score['fp']} FP), "
                  f"recall {score['recall']:.2f}")
            for label, node, bug in score["items"]:
                print(f"    [{node}] {label}  -> {bug or 'FALSE POSITIVE'}")


if __name__ == "__main__":
    main()
