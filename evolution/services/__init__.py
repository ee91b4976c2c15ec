"""Writes of the evolution app: targets, jobs and their state machine, stages (see each module)."""

from evolution.services.jobs import (
    JobStateError, TargetBusyError, evolution_job_cancel, evolution_job_consent, evolution_job_discard,
    evolution_job_fail, evolution_job_start, job_transition,
)
from evolution.services.targets import evolution_target_add, evolution_target_update

__all__ = [
    "JobStateError", "TargetBusyError", "evolution_job_cancel", "evolution_job_consent", "evolution_job_discard",
    "evolution_job_fail", "evolution_job_start", "evolution_target_add", "evolution_target_update", "job_transition",
]
