import pytest

from diagnosis.models import Insight, InsightStatement
from diagnosis.services import diagnosis_run_execute, diagnosis_run_start, rubric_create
from diagnosis.services.insights import insights_build

TOUCHED_BY = {
    "mediator_race": {"two-orders-status", "track-two-packages", "two-how-to-questions", "orders-and-next-bill"},
    "retry_loop": {"compare-two-invoices", "two-charges-this-month", "invoices-and-next-charge"},
    "misroute": {"refund-damaged-item", "refund-status", "refund-cancelled-order", "refund-late-delivery"},
}
# The node whose spans show each fault (examples/support_desk/BUGS.md).
BUG_NODE = {"mediator_race": "mediator", "retry_loop": "billing_worker", "misroute": "planner"}


@pytest.fixture
def desk_rubrics(project, settings):
    """The rubrics of tests/diagnosis/test_support_desk_diagnosis.py, plus BUGS.md's routing rubric on the
    planner's output (intent → worker)."""
    settings.CLEAR_JUDGE_MODEL = ""
    return [
        rubric_create(
            project=project, name="The mediator keeps every fact a tool returned", kind="coverage",
            config={"path": ["$.order_id", "$.tracking_number", "$.invoice_id", "$.articles[*].id"],
                    "sources": {"kind": "TOOL"}, "target": {"node": "mediator", "kind": "LLM"}},
        ),
        rubric_create(
            project=project, name="Refund tickets are not answered from the order records", kind="tool_never",
            config={"tool": "order_lookup", "when": {"goal_regex": r"\brefund"}},
        ),
        rubric_create(
            project=project, name="A refund for an order looks the refund up", kind="tool_order",
            config={"first": "refund_lookup", "when": {"goal_regex": r"refund.*\bO-\d+|\bO-\d+.*refund"}},
        ),
        rubric_create(
            project=project, name="Refund requests are routed to billing", kind="regex",
            config={"pattern": r'"intent":\s*"refund"[^}]*"worker":\s*"orders_worker"', "expect": "absent",
                    "spans": {"node": "planner", "kind": "LLM"}},
        ),
    ]


def diagnose(project, release: str, **options):
    """A diagnosis run executed in this process, then its insights built (as `diagnose --inline` does)."""
    run = diagnosis_run_execute(run=diagnosis_run_start(project=project, release=release, enqueue=False, **options))
    assert run.status == "succeeded", run.failure_message
    summary = insights_build(run=run)
    assert summary is not None
    run.refresh_from_db()
    return run


def demo_diagnose(project, settings):
    """The demo's traces judged as scripts/demo.sh judges them: release v1 with the three planted bugs (seed 0) and
    v2 with misroute fixed (seed 1), the demo's rubrics, the default judges and no model; insights built."""
    from diagnosis.services import rubric_create_demo_set
    from tests.diagnosis.support import support_desk_ingest

    settings.CLEAR_JUDGE_MODEL = ""
    rubric_create_demo_set(project=project)
    support_desk_ingest(project=project, bugs="all", release="v1", seed=0)
    support_desk_ingest(project=project, bugs="mediator_race,retry_loop", release="v2", seed=1)
    return diagnose(project, "")


def held(insight: Insight, run=None):
    field = "node_insight" if insight.level == Insight.Level.NODE else "system_insight"
    statements = InsightStatement.objects.filter(excluded=False, **{field: insight})
    return statements.filter(run=run) if run is not None else statements


def tasks_of(insight: Insight, run=None) -> set[str]:
    return set(held(insight, run).values_list("trace__task_id", flat=True))


def node_insights(project, node: str, *, run=None, **filters):
    insights = Insight.objects.filter(project=project, level="node", node=node, is_other=False, **filters)
    if run is not None:
        insights = insights.filter(occurrences__run=run)
    return list(insights.order_by("pk"))


def insight_for_tasks(project, node: str, tasks: set[str], run) -> Insight:
    """The node-level insight at `node` holding exactly the traces of `tasks` in `run`."""
    found = [i for i in node_insights(project, node, run=run) if tasks_of(i, run) == tasks]
    assert found, {i.title: sorted(tasks_of(i, run)) for i in node_insights(project, node, run=run)}
    return found[0]
