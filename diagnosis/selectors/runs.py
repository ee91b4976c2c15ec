"""Diagnosis runs: one, the list, a run's summary, the newest, the judges' spend, and the runs CI can reuse."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.fields.json import KT

from clear.projects.models import Project
from diagnosis.errors import DiagnosisRunNotFoundError
from diagnosis.models import DiagnosisRun, Feedback
from diagnosis.selectors.feedback import feedback_failing_trace_count
from traces.models import Trace


def diagnosis_run_list(*, project: Project) -> QuerySet[DiagnosisRun]:
    return DiagnosisRun.objects.filter(project=project).order_by("-created_at")


def diagnosis_run_get(*, project: Project, run_id) -> DiagnosisRun:
    try:
        run = DiagnosisRun.objects.filter(project=project, pk=run_id).first()
    except (ValueError, TypeError):  # not a UUID
        run = None
    if run is None:
        raise DiagnosisRunNotFoundError(f"No diagnosis run {run_id} in this project")
    return run


@dataclass
class RunSummary:
    traces_total: int
    traces_judged: int
    traces_skipped: int
    feedback_by_status: dict[str, int] = field(default_factory=dict)
    failing_by_judge: dict[str, int] = field(default_factory=dict)
    failing_traces: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    errors: int = 0
    dropped_evidence: int = 0
    contrastive: dict | None = None  # the run-level contrastive judge's report: status, reason, findings
    model_calls: int = 0  # judgements a model was asked for (feedback with a model)
    model_call_errors: int = 0  # of those, the ones that ended in an error
    errors_by_cause: list[dict] = field(default_factory=list)  # run_errors_by_cause
    judges_without_verdict: list[dict] = field(default_factory=list)  # run_judges_without_verdict: the run failed

    @property
    def errors_label(self) -> str:
        """"finished with errors (N of M model calls)" for a run that succeeded with some, else ""."""
        if not self.errors:
            return ""
        if self.model_calls:
            return f"finished with errors ({self.model_call_errors} of {self.model_calls} model calls)"
        return f"finished with errors ({self.errors})"


def run_errors_by_cause(*, project: Project, run: DiagnosisRun) -> list[dict]:
    """The run's errors grouped by cause (timeout, connection, invalid_output, …), most frequent first: one row per
    cause with its count, the judges and traces it touched and one example, instead of one line per step."""
    groups: dict[str, dict] = {}
    rows = (Feedback.objects.filter(project=project, run=run, status=Feedback.Status.ERROR)
            .annotate(cause=KT("details__cause")).values_list("cause", "judge", "trace_id", "error")
            .order_by("pk").iterator(chunk_size=2000))
    for cause, judge, trace_pk, error in rows:
        group = groups.setdefault(cause or "judge_error", {"count": 0, "judges": set(), "traces": set(),
                                                           "example": error[:300]})
        group["count"] += 1
        group["judges"].add(judge)
        group["traces"].add(trace_pk)
    # A trace whose task kept crashing has no feedback row: its entry in run.errors is all there is.
    for entry in run.errors or []:
        if entry.get("cause") == "task_failed":
            group = groups.setdefault("task_failed", {"count": 0, "judges": set(), "traces": set(),
                                                      "example": str(entry.get("error", ""))[:300]})
            group["count"] += 1
            group["traces"].add(entry.get("trace_id"))
    return [{"cause": cause, "count": g["count"], "judges": sorted(g["judges"]), "traces": len(g["traces"]),
             "example": g["example"]}
            for cause, g in sorted(groups.items(), key=lambda item: (-item[1]["count"], item[0]))]


def run_judges_without_verdict(*, run: DiagnosisRun) -> list[dict]:
    """The judges of the run that produced errors and not one verdict (issue 43: such a run fails, for CI), each as
    {judge, errors, calls, causes: [{cause, count}], label}: "llm.step produced no verdict: 8 of 8 model calls
    failed (invalid_output 5, invalid_output:length 3)". A judge with some verdicts beside its errors is not one;
    "rubric.generated" is left out: it is only ever written when rubric generation failed, and the rubric.gen-N
    results say whether generated rubrics were judged."""
    from diagnosis.judges.llm.trace import GENERATED_JUDGE  # late: the LLM judges' modules are not needed otherwise

    verdict = Q(status__in=[Feedback.Status.OK, Feedback.Status.TRUNCATED])
    error = Q(status=Feedback.Status.ERROR)
    rows = (Feedback.objects.filter(run=run).values("judge")
            .annotate(verdicts=Count("pk", filter=verdict), errors=Count("pk", filter=error),
                      calls=Count("pk", filter=~Q(model="")))
            .filter(verdicts=0, errors__gt=0).exclude(judge=GENERATED_JUDGE).order_by("judge"))
    silent = []
    for row in rows:
        causes = Counter(Feedback.objects.filter(error, run=run, judge=row["judge"])
                         .annotate(cause=KT("details__cause")).values_list("cause", flat=True))
        by_cause = [{"cause": cause or "judge_error", "count": n} for cause, n in causes.most_common()]
        what = (f"{row['errors']} of {row['calls']} model calls failed" if row["calls"]
                else f"{row['errors']} judge errors")
        label = f"{row['judge']} produced no verdict: {what} (" + ", ".join(
            f"{group['cause']} {group['count']}" for group in by_cause) + ")"
        silent.append({"judge": row["judge"], "errors": row["errors"], "calls": row["calls"], "causes": by_cause,
                       "label": label})
    return silent


def diagnosis_run_failing_traces(*, project: Project, run: DiagnosisRun) -> int:
    """Traces of the run with a failing verdict in it: the run page's figure, which the overview shows beside it."""
    return (Feedback.objects.filter(project=project, run=run, verdict=Feedback.Verdict.FAIL)
            .values("trace_id").distinct().count())


def diagnosis_run_summary(*, project: Project, run: DiagnosisRun) -> RunSummary:
    feedback = Feedback.objects.filter(project=project, run=run)
    by_status = dict(Counter(dict(feedback.values_list("status").annotate(n=Count("pk")).values_list("status", "n"))))
    failing = feedback.filter(verdict=Feedback.Verdict.FAIL)
    by_judge = dict(failing.values_list("judge").annotate(n=Count("pk")).order_by("-n", "judge")
                    .values_list("judge", "n"))
    return RunSummary(
        traces_total=run.total_count, traces_judged=run.done_count, traces_skipped=run.skipped_count,
        feedback_by_status=by_status, failing_by_judge=by_judge,
        failing_traces=diagnosis_run_failing_traces(project=project, run=run),
        input_tokens=run.input_tokens, output_tokens=run.output_tokens, cost=run.cost, errors=run.error_count,
        dropped_evidence=run.dropped_evidence, contrastive=(run.config or {}).get("contrastive"),
        model_calls=feedback.exclude(model="").count(),
        model_call_errors=feedback.exclude(model="").filter(status=Feedback.Status.ERROR).count(),
        errors_by_cause=run_errors_by_cause(project=project, run=run) if run.error_count else [],
        judges_without_verdict=run_judges_without_verdict(run=run) if run.error_count else [],
    )




def diagnosis_run_latest(*, project: Project) -> DiagnosisRun | None:
    """The newest run that has (or, not yet started, may have) traces: a finished run that held none (a filter
    nothing matched, or a gate on a release without traces stored before those were refused) judged nothing and
    is not what "Latest run" should point at."""
    finished_empty = Q(total_count=0) & ~Q(status__in=[DiagnosisRun.Status.QUEUED, DiagnosisRun.Status.RUNNING])
    return DiagnosisRun.objects.filter(project=project).exclude(finished_empty).order_by("-created_at").first()


def insights_last_refreshed(*, project: Project):
    """When the project's insights list last changed (a full run's build or a continuous refresh; the server's clock,
    UTC), or None; runs that are not full (detached) change nothing, so they do not count. A continuous run whose
    next refresh is queued or running still shows the list its last one made: its insights_finished_at is that one's.
    A failed build or refresh changed nothing either: a failed run does not count, and a continuous run whose last
    refresh failed (insights_error kept until one succeeds; insights_finished_at is the failure's time, which
    throttles the next attempt) counts with its last successful refresh (`insights_summary.refresh.at`)."""
    rows = (DiagnosisRun.objects.filter(project=project, insights_status__in=["done", "queued", "running"],
                                        insights_finished_at__isnull=False)
            .exclude(insights_summary__has_key="detached").order_by("-insights_finished_at")
            .values_list("insights_finished_at", "insights_error", "insights_summary"))
    best = None
    for finished_at, error, summary in rows.iterator():
        if not error:  # every later row finished earlier
            return max(best, finished_at) if best else finished_at
        at = ((summary or {}).get("refresh") or {}).get("at")
        if at:
            when = datetime.fromisoformat(at)
            best = max(best, when) if best else when
    return best


def diagnosis_run_list_with_insights(*, project: Project, limit: int = 50) -> list[DiagnosisRun]:
    """Runs whose insights were built, newest first."""
    return list(DiagnosisRun.objects.filter(project=project, insights_status="done").order_by("-created_at")[:limit])


@dataclass(frozen=True)
class JudgeSpend:
    runs: int
    cost: float
    input_tokens: int
    output_tokens: int
    failing_traces: int  # traces with a failing verdict, by each judge's latest verdict (re-runs do not add up)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def diagnosis_run_spend(*, project: Project) -> JudgeSpend:
    """What the project's runs cost (tokens, money) and found (the traces with a failing verdict nobody marked wrong,
    see feedback_failing_trace_count)."""
    totals = DiagnosisRun.objects.filter(project=project).aggregate(
        runs=Count("pk"), cost=Sum("cost"), input_tokens=Sum("input_tokens"), output_tokens=Sum("output_tokens"))
    failing = feedback_failing_trace_count(project=project)
    return JudgeSpend(runs=totals["runs"] or 0, cost=totals["cost"] or 0.0, input_tokens=totals["input_tokens"] or 0,
                      output_tokens=totals["output_tokens"] or 0, failing_traces=failing)


# --- runs for CI: reuse and the latest run of a release ---------------------------------------------------------


def diagnosis_run_reusable(*, project: Project, release: str, judges: list[str] | None, model: str = "",
                           rubric_ids: list[int] | str = "all") -> DiagnosisRun | None:
    """A run a CI job can use instead of starting another: the newest queued, running or succeeded run over exactly
    `release` (no other filter, no sampling) with the same judge configuration (judges as resolved at creation,
    model, rubrics), whose insights did not fail to build. A succeeded run is only reused when no trace of the
    release was received after it was created (those traces would go unjudged)."""
    from diagnosis import conf
    from diagnosis.services.runs import judges_resolve
    from diagnosis.services.judging import LLM_JUDGES

    resolved_model = model or conf.judge_model()
    resolved = judges_resolve(judges=judges, model=resolved_model)
    stored_model = resolved_model if any(n in LLM_JUDGES for n in resolved) else model
    wanted_rubrics = "all" if rubric_ids == "all" else sorted(rubric_ids)
    candidates = (DiagnosisRun.objects
                  .filter(project=project, continuous=False, release=release, since=None, until=None, outcome="",
                          node="", sample_rate=1.0,
                          status__in=[DiagnosisRun.Status.QUEUED, DiagnosisRun.Status.RUNNING,
                                      DiagnosisRun.Status.SUCCEEDED])
                  .exclude(insights_status="failed").order_by("-created_at"))
    for run in candidates[:50]:
        if run.tags or run.trace_ids or run.judges != resolved or run.model != stored_model:
            continue
        if (run.rubric_ids if run.rubric_ids == "all" else sorted(run.rubric_ids or [])) != wanted_rubrics:
            continue
        if run.status == DiagnosisRun.Status.SUCCEEDED and Trace.objects.filter(
                project=project, release=release, last_received_at__gt=run.created_at).exists():
            continue
        return run
    return None


def diagnosis_run_latest_finished(*, project: Project, release: str) -> DiagnosisRun | None:
    """The newest run over `release` that judged all its traces (succeeded; continuous runs excluded)."""
    return (DiagnosisRun.objects
            .filter(project=project, continuous=False, release=release, status=DiagnosisRun.Status.SUCCEEDED)
            .order_by("-finished_at", "-created_at").first())
