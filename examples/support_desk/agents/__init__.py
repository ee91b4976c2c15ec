"""The support desk's agents: planner, tool workers, mediator and writer."""

from .base import DeskContext
from .mediator import Brief, Mediator
from .planner import Assignment, Intent, Planner
from .workers import WORKERS, WorkerReport, build_worker
from .writer import Writer

__all__ = [
    "WORKERS",
    "Assignment",
    "Brief",
    "DeskContext",
    "Intent",
    "Mediator",
    "Planner",
    "WorkerReport",
    "Writer",
    "build_worker",
]
