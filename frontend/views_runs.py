"""Diagnosis runs: the list, the start form, a run's page with its live progress (polled JSON), cancel."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from clear.errors import ClearError, NotFoundError
from clear.projects.models import Project
from diagnosis import conf as diagnosis_conf
from diagnosis.models import DiagnosisRun
from diagnosis.selectors import (
    diagnosis_run_get,
    diagnosis_run_list_with_failing,
    diagnosis_run_summary,
    feedback_failing_list_for_run,
    rubric_judge_names,
    rubric_list,
)
from diagnosis.services import diagnosis_run_cancel, diagnosis_run_retry_errors, diagnosis_run_start
from diagnosis.services.judging import CONTRASTIVE_JUDGE, LLM_JUDGES, RULE_JUDGES, RUBRICS_ALIAS
from frontend.forms import RunStartForm
from frontend.pagination import keyset_page
from frontend.views import project_for
from traces.selectors import NO_RELEASE, trace_release_list

PAGE_SIZE = 30

JUDGE_HELP = {
    "rule.span_error": "spans that ended in an error status or raised",
    "rule.tool_error": "tool results carrying an error payload under an OK status",
    "rule.exit_code": "commands that exited non-zero",
    "rule.repeated_tool_call": "the same tool with the same arguments 3+ times",
    "rule.loop": "an agent repeating its message back to back",
    "rule.empty_output": "steps that produced nothing",
    "rule.truncated_output": "model output cut at the token limit",
    "rule.latency_outlier": "steps far slower than their node's median",
    "rule.token_outlier": "steps using far more tokens than their node's median",
    "llm.step": "an LLM reviews each step (needs a model)",
    "llm.trace": "an LLM reviews the whole trace and the llm rubrics (needs a model)",
    CONTRASTIVE_JUDGE: "compares failing with succeeding traces (needs recorded outcomes; no model)",
}


def judge_choices(project: Project) -> list[tuple[str, str]]:
    enabled = rubric_list(project=project, enabled=True).count()
    choices = [(name, f"{name} — {JUDGE_HELP.get(name, '')}".rstrip(" —")) for name in RULE_JUDGES]
    choices.append((RUBRICS_ALIAS, f"rubrics — every enabled rubric ({enabled})"))
    choices += [(name, f"{name} — {JUDGE_HELP.get(name, '')}".rstrip(" —"))
                for name in (*LLM_JUDGES, CONTRASTIVE_JUDGE)]
    return choices


def _run_for(project: Project, run_id) -> DiagnosisRun:
    try:
        return diagnosis_run_get(project=project, run_id=run_id)
    except NotFoundError as exc:
        raise Http404(exc.message) from exc


def run_progress(run: DiagnosisRun) -> dict:
    settled = run.done_count + run.skipped_count
    if run.total_count:
        percent = min(100, round(100 * settled / run.total_count))
    else:
        percent = 100 if run.is_finished else 0
    # A continuous run grows all day and stays open until the next day's first beat: a percentage would sit at 100%
    # "running" whenever it has caught up, so it is shown as "continuous" with what it judged and what waits.
    continuous = run.continuous and not run.is_finished
    return {
        "id": str(run.pk), "status": run.status,
        "status_label": "Continuous" if continuous else run.get_status_display(), "continuous": continuous,
        "finished": run.is_finished, "total": run.total_count, "done": run.done_count, "skipped": run.skipped_count,
        "open": max(0, run.total_count - settled), "percent": percent, "cost": round(run.cost, 6),
        "tokens": run.total_tokens, "error_count": run.error_count, "failure_message": run.failure_message,
    }


@login_required
def run_list(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)
    runs = diagnosis_run_list_with_failing(project=project)
    page = keyset_page(runs, field="created_at", cursor=request.GET.get("cursor"), limit=PAGE_SIZE)
    for run in page.items:
        run.progress = run_progress(run)
    context = {"project": project, "nav": "runs", "page": page}
    return render(request, "frontend/runs.html", context)


@login_required
def run_new(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)
    choices = judge_choices(project)
    configured_model = diagnosis_conf.judge_model()
    releases = [r for r in trace_release_list(project=project) if r != NO_RELEASE]
    status = 200
    if request.method == "POST":
        form = RunStartForm(request.POST, judge_choices=choices)
        if form.is_valid():
            data = form.cleaned_data
            try:
                run = diagnosis_run_start(
                    project=project, name=data["name"].strip(), release=data["release"].strip(),
                    outcome=data["outcome"], since=data["since"], until=data["until"],
                    sample_rate=data["sample_rate"], judges=data["judges"], model=data["model"].strip(),
                    budget_tokens=data["budget_tokens"], budget_cost=data["budget_cost"], created_by=request.user,
                )
            except ClearError as exc:
                messages.error(request, exc.message)
                status = 400
            else:
                if run.total_count:
                    messages.success(request, f"Diagnosis run started on {run.total_count} traces.")
                else:
                    messages.warning(request, "No trace matched the filter, so the run had nothing to judge. "
                                              "Widen the filter and start another.")
                return redirect("frontend:run", slug=project.slug, run_id=run.pk)
        else:
            status = 400
    else:
        defaults = [*RULE_JUDGES, RUBRICS_ALIAS, *(LLM_JUDGES if configured_model else ()), CONTRASTIVE_JUDGE]
        initial = {"judges": defaults, "sample_rate": 1.0, "release": request.GET.get("release", "")}
        form = RunStartForm(initial=initial, judge_choices=choices)
    context = {"project": project, "nav": "runs", "form": form, "releases": releases,
               "configured_model": configured_model, "llm_judges": LLM_JUDGES}
    return render(request, "frontend/run_new.html", context, status=status)


@login_required
def run_detail(request: HttpRequest, slug: str, run_id) -> HttpResponse:
    project = project_for(request, slug)
    run = _run_for(project, run_id)
    context = {
        "project": project, "nav": "runs", "run": run, "progress": run_progress(run),
        "summary": diagnosis_run_summary(project=project, run=run),
        "failing": feedback_failing_list_for_run(project=project, run=run),
        "warnings": (run.config or {}).get("warnings", []),
        "judge_names": rubric_judge_names(project=project),
    }
    return render(request, "frontend/run.html", context)


@login_required
def run_status(request: HttpRequest, slug: str, run_id) -> JsonResponse:
    project = project_for(request, slug)
    run = _run_for(project, run_id)
    return JsonResponse(run_progress(run))


@login_required
@require_POST
def run_cancel(request: HttpRequest, slug: str, run_id) -> HttpResponse:
    project = project_for(request, slug)
    run = _run_for(project, run_id)
    try:
        run = diagnosis_run_cancel(run=run)
    except ClearError as exc:
        messages.info(request, exc.message)
    else:
        messages.success(request, f"Run cancelled: {run.done_count} traces were judged, {run.skipped_count} skipped.")
    return redirect("frontend:run", slug=project.slug, run_id=run.pk)


@login_required
@require_POST
def run_retry_errors(request: HttpRequest, slug: str, run_id) -> HttpResponse:
    project = project_for(request, slug)
    run = _run_for(project, run_id)
    try:
        retry = diagnosis_run_retry_errors(run=run, created_by=request.user)
    except ClearError as exc:
        messages.info(request, exc.message)
        return redirect("frontend:run", slug=project.slug, run_id=run.pk)
    messages.success(request, f"Re-judging the {retry.total_count} traces whose judging errored.")
    return redirect("frontend:run", slug=project.slug, run_id=retry.pk)
