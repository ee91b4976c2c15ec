"""Writes of the diagnosis app: runs, rubrics, the judge cache, continuous mode, and the judges' input."""

from diagnosis.services.cache import judge_cache_get, judge_cache_key, judge_cache_put
from diagnosis.services.continuous import continuous_tick
from diagnosis.services.evidence import evidence_verify
from diagnosis.services.rubrics import rubric_create, rubric_create_demo_set, rubric_delete, rubric_update
from diagnosis.services.run_start import diagnosis_run_retry_errors
from diagnosis.services.runs import (
    diagnosis_run_begin,
    diagnosis_run_cancel,
    diagnosis_run_dispatch,
    diagnosis_run_execute,
    diagnosis_run_fail,
    diagnosis_run_start,
    diagnosis_runs_sweep,
    run_trace_fail,
    run_trace_process,
    trace_sampled,
)
from diagnosis.services.trace_view import trace_view_build

__all__ = [
    "continuous_tick",
    "diagnosis_run_begin",
    "diagnosis_run_cancel",
    "diagnosis_run_dispatch",
    "diagnosis_run_execute",
    "diagnosis_run_fail",
    "diagnosis_run_retry_errors",
    "diagnosis_run_start",
    "diagnosis_runs_sweep",
    "evidence_verify",
    "judge_cache_get",
    "judge_cache_key",
    "judge_cache_put",
    "rubric_create",
    "rubric_create_demo_set",
    "rubric_delete",
    "rubric_update",
    "run_trace_fail",
    "run_trace_process",
    "trace_sampled",
    "trace_view_build",
]
