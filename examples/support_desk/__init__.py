"""Support desk: a deterministic multi-agent example that emits GenAI-convention traces.

    from examples.support_desk import run_suite, run_task
    results = run_suite(release="r1", bugs="none", seed=7, exporter=my_exporter)
"""

from .config import BUG_NAMES, BugSwitches
from .suite import SuiteReport, TaskResult, execute_suite, run_suite, run_task
from .tasks import TASKS, Task, get_task, grade

__all__ = [
    "BUG_NAMES",
    "TASKS",
    "BugSwitches",
    "SuiteReport",
    "Task",
    "TaskResult",
    "execute_suite",
    "get_task",
    "grade",
    "run_suite",
    "run_task",
]
