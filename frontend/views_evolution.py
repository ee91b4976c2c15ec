"""Evolution pages: the Evolve form (from an insight or a ticket), the jobs list, a job's page (stage timeline, live
status, plan and reviews, diff, gates, per-task scores, verdict, approve / discard). Targets and release history:
views_evolution_targets.py. Approving, discarding and starting again over a candidate awaiting a decision are the
project owners' (a member gets 403); no API key can do them at all.

Reads go through `evolution.selectors`, writes through `evolution.services` (a ClearError's message is shown as it
is). Plans, reviews and diffs are model output: they are only ever auto-escaped by the templates.
"""

from __future__ import annotations

import json

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from clear.errors import ClearError, NotFoundError
from clear.projects.models import Project
from clear.projects.selectors import membership_is_owner
from diagnosis.selectors import insight_get
from diagnosis.tickets.selectors import ticket_get
from evolution.apis.jobs import artifact_response
from evolution.backends import BACKENDS
from evolution.models import TERMINAL_STATES, EvolutionJob, InsightFix, JobState, StageRun
from evolution.selectors import (
    evolution_artifact_get,
    evolution_job_artifacts,
    evolution_job_base,
    evolution_job_events,
    evolution_job_get,
    evolution_job_list,
    evolution_job_review,
    evolution_job_stage_runs,
    evolution_insight_fix_note,
    evolution_target_list,
    evolution_target_scripted_fixtures,
)
from evolution.services import evolution_job_cancel, evolution_job_consent, evolution_job_discard
from evolution.services.api_actions import (
    MODES,
    backend_config_confine,
    evolution_job_create,
    evolution_job_restart,
    job_mode,
)
from evolution.services.stages import SANDBOX_STAGES, STATE_STAGES
from evolution.services.watch import evolution_job_mark_merged
from evolution.services.workspace import artifact_read
from frontend.evolution_words import (  # noqa: F401  STATE_MEANINGS: the README's states are checked against it
    STATE_MEANINGS, VERDICT_MEANINGS, check_rows, state_meaning, task_rows, tasks_same_sentence, trials_sentence,
)
from frontend.pagination import keyset_page
from frontend.views import project_for

PAGE_SIZE = 30
DIFF_MAX_LINES = 4000
DOC_MAX_BYTES = 2_000_000
BULK_KINDS = ("trial_trace", "log")  # one per trial or role run: folded away under the main artifacts
MODE_LABELS = {"pr": "pull request (push a branch for review)",
               "hot_swap": "hot swap (swap a release in, health-check, roll back if unhealthy)"}
DEPTH_LABELS = {"shallow": "shallow — up to 2 iterations, 1 review round",
                "standard": "standard — up to 3 iterations, 2 review rounds",
                "deep": "deep — up to 5 iterations, 3 review rounds"}


OWNERS_DECIDE = "Only the project's owners approve or discard a candidate"


def owner_check(request: HttpRequest, project: Project, refusal: str) -> None:
    """Making a release live or taking it down is the owners' decision: a member gets 403 (an outsider already got
    404 from project_for)."""
    if not membership_is_owner(project=project, user=request.user):
        raise PermissionDenied(refusal)


def or_404(call, **kwargs):
    """The selector's answer, its NotFoundError a 404."""
    try:
        return call(**kwargs)
    except NotFoundError as exc:
        raise Http404(exc.message) from exc


# --- Evolve ---------------------------------------------------------------------------------------------------------

class EvolveForm(forms.Form):
    target = forms.TypedChoiceField(coerce=int)
    backend = forms.ChoiceField(choices=[(name, name) for name in BACKENDS])
    script = forms.CharField(required=False, max_length=1000)
    fixture = forms.CharField(required=False, max_length=1000)  # the radio buttons; the script field wins
    backend_config = forms.CharField(required=False, max_length=100_000)
    depth = forms.ChoiceField(choices=list(DEPTH_LABELS.items()), initial="shallow")
    mode = forms.ChoiceField(choices=[(m, MODE_LABELS[m]) for m in MODES], initial="pr")
    confirm = forms.BooleanField(required=False)  # the insight already has a live or pending fix: go on anyway

    def __init__(self, *args, targets, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["target"].choices = [(t.pk, t.name) for t in targets]

    def clean_backend_config(self) -> dict:
        text = self.cleaned_data["backend_config"].strip()
        if not text:
            return {}
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"not valid JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise forms.ValidationError("must be a JSON object, e.g. {\"model\": \"openai/gpt-4o-mini\"}")
        return value

    def clean(self):
        data = super().clean()
        if data.get("backend") == "scripted":
            config = data.get("backend_config") or {}
            script = data.get("script") or data.get("fixture")
            if script:
                config = {**config, "script_path": script}
            if "script" not in config and "script_path" not in config:
                self.add_error("script", "the scripted backend needs a script: choose a fixture or give its path")
            data["backend_config"] = config
        return data


def _evolve_subject(project: Project, request: HttpRequest):
    """The insight to fix and the ticket it came from, if any (?insight= or ?ticket=, or the same in the POST)."""
    source = request.POST if request.method == "POST" else request.GET
    ticket = None
    if source.get("ticket", "").isdigit():
        ticket = or_404(ticket_get, project=project, ticket_id=int(source["ticket"]))
        if ticket.insight_id is None:
            raise Http404("This ticket has no insight to fix")
        return or_404(insight_get, project=project, insight_id=ticket.insight_id), ticket
    if source.get("insight", "").isdigit():
        return or_404(insight_get, project=project, insight_id=int(source["insight"])), None
    raise Http404("Evolve needs an insight or a ticket")


def _preflight_report(request: HttpRequest, data: dict, target) -> None:
    """The chosen backend's preflight (is its CLI or model usable here?) as a message; nothing is started. The
    backend config is confined as for a job first: building a scripted backend reads its script file."""
    from evolution.backends import backend_get

    try:
        backend_config_confine(target=target, backend_name=data["backend"], backend_config=data["backend_config"])
        check = backend_get(name=data["backend"], config=data["backend_config"]).preflight()
    except ClearError as exc:
        messages.error(request, exc.message)
        return
    if check.ok:
        messages.success(request, f"Backend {data['backend']} is ready: {check.version or 'ok'}.")
    else:
        messages.error(request, f"Backend {data['backend']} is not usable: {check.error}")


@login_required
def evolve(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)
    insight, ticket = _evolve_subject(project, request)
    if request.method == "POST" and request.POST.get("restart", "").isdigit():
        return _evolve_restart(request, project, int(request.POST["restart"]))
    targets = list(evolution_target_list(project=project))
    fixtures_of = {t.pk: evolution_target_scripted_fixtures(target=t) for t in targets}
    status = 200
    if request.method == "POST":
        form = EvolveForm(request.POST, targets=targets)
        if form.is_valid() and "preflight" in request.POST:
            _preflight_report(request, form.cleaned_data,
                              next(t for t in targets if t.pk == form.cleaned_data["target"]))
        elif form.is_valid():
            data = form.cleaned_data
            target = next(t for t in targets if t.pk == data["target"])
            try:
                job = evolution_job_create(project=project, target=target, insight=insight, ticket=ticket,
                                           backend_name=data["backend"], backend_config=data["backend_config"],
                                           depth=data["depth"], mode=data["mode"], created_by=request.user,
                                           confirm=data["confirm"])
            except ClearError as exc:
                for field, problem in (exc.extra.get("fields") or {}).items():
                    # backend_config.script_path is the script box's, backend_config.api_key_env the config's.
                    name = "script" if field == "backend_config.script_path" else field.split(".")[0]
                    form.add_error(name if name in form.fields else None, f"{field}: {problem}")
                messages.error(request, exc.message)
                status = 400
            else:
                messages.success(request, f"Evolution job {job.pk} queued on {target.name}.")
                return redirect("frontend:evolution-job", slug=project.slug, job_id=job.pk)
        else:
            status = 400
    else:
        # The first target that offers scripted fixtures (its config's scripted_fixtures), with its first one.
        scripted = next((t for t in targets if fixtures_of[t.pk]), None)
        initial = {"target": (scripted or targets[0]).pk if targets else None, "backend": "scripted",
                   "depth": "shallow", "mode": "pr"}
        if scripted:
            initial["script"] = fixtures_of[scripted.pk][0][0]
        form = EvolveForm(initial=initial, targets=targets)
    busy = {job.target_id: job for job in evolution_job_list(project=project, active=True)}
    context = {
        "project": project, "nav": "evolution", "insight": insight, "ticket": ticket, "form": form,
        "targets": targets, "busy": busy, "fixtures": [f for t in targets for f in fixtures_of[t.pk]],
        "backends": list(BACKENDS), "depths": DEPTH_LABELS.items(), "modes": [(m, MODE_LABELS[m]) for m in MODES],
        "hot_swap_targets": [t.pk for t in targets if (t.config or {}).get("hot_swap")],
        "fix_note": evolution_insight_fix_note(project=project, insight=insight),
    }
    return render(request, "frontend/evolution_new.html", context, status=status)


def _evolve_restart(request: HttpRequest, project: Project, job_id: int) -> HttpResponse:
    """"Start again from the live release": the same job again, on what is live now (the old candidate discarded)."""
    job = or_404(evolution_job_get, project=project, job_id=job_id)
    if not job.is_terminal:  # its candidate, awaiting a decision now or soon, is discarded
        owner_check(request, project, OWNERS_DECIDE)
    try:
        new = evolution_job_restart(job=job, user=request.user)
    except ClearError as exc:
        messages.error(request, exc.message)
        return redirect("frontend:evolution-job", slug=project.slug, job_id=job.pk)
    based = f" from release {new.base_release.release_id}" if new.base_release_id else ""
    messages.success(request, f"Job {job.pk}'s candidate was discarded; job {new.pk} starts again{based}.")
    return redirect("frontend:evolution-job", slug=project.slug, job_id=new.pk)


# --- jobs -----------------------------------------------------------------------------------------------------------

@login_required
def job_list(request: HttpRequest, slug: str) -> HttpResponse:
    project = project_for(request, slug)
    targets = list(evolution_target_list(project=project))
    state = request.GET.get("state", "")
    state = state if state in JobState.values or state in ("active", "ended") else ""
    target = request.GET.get("target", "")
    target = target if target in {str(t.pk) for t in targets} else ""
    insight = request.GET.get("insight", "")
    insight = insight if insight.isdigit() and len(insight) < 19 else ""
    jobs = evolution_job_list(project=project, active={"active": True, "ended": False}.get(state))
    if state in JobState.values:
        jobs = jobs.filter(state=state)
    if target:
        jobs = jobs.filter(target_id=int(target))
    if insight:  # another project's insight matches nothing, like any filter value
        jobs = jobs.filter(insight_id=int(insight))
    page = keyset_page(jobs.select_related("ticket", "created_by"), field="created_at",
                       cursor=request.GET.get("cursor"), limit=PAGE_SIZE)
    context = {"project": project, "nav": "evolution", "page": page, "jobs": page.items, "targets": targets,
               "filters": {"state": state, "target": target, "insight": insight}, "states": JobState.values,
               "has_any": bool(page.items) or evolution_job_list(project=project).exists()}
    return render(request, "frontend/evolution_jobs.html", context)


def _stage_unclaimed(job: EvolutionJob, stages: list[StageRun], events: list) -> StageRun | None:
    """The stage the job's state runs, as an unsaved running row, while no worker holds it: the page reloads when the
    state moves, which is before a worker claims the new state's stage (and a claim dropped for a retry leaves none
    for a while), and it does not reload at the claim, so a long BASELINE showed only "prepare" until it ended."""
    stage = STATE_STAGES.get(job.state)
    if job.is_terminal or stage is None:
        return None
    if any(s.stage == stage and s.status == StageRun.Status.RUNNING for s in stages):
        return None
    entered = next((e.ts for e in reversed(events) if e.to_state == job.state), None)
    row = StageRun(job=job, stage=stage, iteration_n=0 if stage in ("prepare", "baseline") else job.current_iteration,
                   round=None, isolation_level=job.sandbox_level if stage in SANDBOX_STAGES else "")
    row.started_at = entered  # when the job moved into the stage's state: the stage was sent then
    return row


def job_status_data(job: EvolutionJob) -> dict:
    return {"id": job.pk, "state": job.state, "state_version": job.state_version, "terminal": job.is_terminal,
            "iteration": job.current_iteration, "stop_requested": job.stop_requested,
            "heartbeat_at": job.heartbeat_at.isoformat() if job.heartbeat_at else None,
            "terminal_reason": job.terminal_reason}


def _text(artifact, limit: int = DOC_MAX_BYTES) -> str:
    try:
        return artifact_read(artifact=artifact)[:limit].decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def _document(artifact):
    if artifact is None:
        return None
    try:
        value = json.loads(_text(artifact))
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def diff_lines(text: str) -> tuple[list[tuple[str, str]], bool]:
    """(css class, line) per line of a unified diff, so the template can colour it (each line auto-escaped)."""
    lines = text.splitlines()
    rows = []
    for line in lines[:DIFF_MAX_LINES]:
        if line.startswith(("diff --git", "index ", "+++ ", "--- ", "new file", "deleted file", "similarity")):
            css = "file"
        elif line.startswith("@@"):
            css = "hunk"
        elif line.startswith("+"):
            css = "add"
        elif line.startswith("-"):
            css = "del"
        else:
            css = "ctx"
        rows.append((css, line))
    return rows, len(lines) > DIFF_MAX_LINES


@login_required
def job_detail(request: HttpRequest, slug: str, job_id: int) -> HttpResponse:
    project = project_for(request, slug)
    job = or_404(evolution_job_get, project=project, job_id=job_id)
    reviews = evolution_job_review(project=project, job=job)
    by_n = {r.iteration.n: r for r in reviews}
    wanted = request.GET.get("iteration", "")
    default = job.best_iteration.n if job.best_iteration else (reviews[-1].iteration.n if reviews else None)
    shown = by_n.get(int(wanted)) if wanted.isdigit() and int(wanted) in by_n else by_n.get(default)
    docs, diff, diff_cut = {}, [], False
    if shown is not None:
        docs = {kind: _document(shown.artifacts.get(kind))
                for kind in ("diagnosis", "plan", "plan_review", "implementer", "code_review")}
        patch = shown.artifacts.get("patch")
        if patch is not None:
            diff, diff_cut = diff_lines(_text(patch))
    candidate = job.best_iteration
    events = list(evolution_job_events(project=project, job=job))
    created = next((e for e in events if e.event == "created"), None)
    stages = list(evolution_job_stage_runs(project=project, job=job))
    due = _stage_unclaimed(job, stages, events)
    if due is not None:
        stages.append(due)
    artifacts = list(evolution_job_artifacts(project=project, job=job))
    for stage in stages:
        stage.took_ms = (stage.finished_at - stage.started_at).total_seconds() * 1000 if stage.finished_at else None
        if job.is_terminal and stage.status == StageRun.Status.RUNNING:  # a row left open by a process that died
            stage.status = StageRun.Status.FAILED
    tasks, tasks_same = task_rows(shown.tasks) if shown is not None else ([], [])
    verdict = shown.verdict if shown is not None else None
    base = evolution_job_base(project=project, job=job)
    fix = getattr(job, "fix", None) if job.state in (JobState.PR_OPENED, JobState.PROMOTED) else None
    # Either record says the fix is no longer live: the release row, or the fix the rollback marked.
    rolled_back = job.state == JobState.PROMOTED and (
        base.rolled_back or (fix is not None and fix.status == InsightFix.Status.ROLLED_BACK))
    context = {
        "project": project, "nav": "evolution", "job": job, "mode": job_mode(job),
        "state_meaning": state_meaning(job.state, rolled_back=rolled_back), "rolled_back": rolled_back,
        "verdict_meaning": VERDICT_MEANINGS.get(verdict.decision, "") if verdict else "",
        "verdict_checks": check_rows(verdict.rules if verdict else []),
        "hard_checks": check_rows(shown.gates if shown is not None else []),
        "tasks": tasks, "tasks_same": tasks_same, "tasks_same_sentence": tasks_same_sentence(tasks_same),
        "trials_sentence": trials_sentence(shown.tasks) if verdict else "",
        "running": job.state not in TERMINAL_STATES and job.state != JobState.AWAITING_CONSENT,
        "mode_label": MODE_LABELS[job_mode(job)].split(" (")[0], "status": job_status_data(job), "stages": stages,
        "reviews": reviews, "shown": shown, "docs": docs, "diff": diff, "diff_cut": diff_cut,
        "events": events, "backend_version": (created.data or {}).get("backend_version", "") if created else "",
        "artifacts": [a for a in artifacts if a.kind not in BULK_KINDS],
        "bulk_artifacts": [a for a in artifacts if a.kind in BULK_KINDS],
        "artifact_count": len(artifacts),
        "awaiting": job.state == JobState.AWAITING_CONSENT and candidate is not None,
        "candidate": candidate, "terminal": job.state in TERMINAL_STATES,
        "owner": membership_is_owner(project=project, user=request.user),  # a member sees no approve/discard
        "fix": fix, "base": base,  # base: "based on release X" (_evolution_base.html)
    }
    return render(request, "frontend/evolution_job.html", context)


@login_required
def job_status(request: HttpRequest, slug: str, job_id: int) -> JsonResponse:
    project = project_for(request, slug)
    return JsonResponse(job_status_data(or_404(evolution_job_get, project=project, job_id=job_id)))


def _job_action(request: HttpRequest, slug: str, job_id: int, action, *, owners_only: bool = False) -> HttpResponse:
    project = project_for(request, slug)
    if owners_only:
        owner_check(request, project, OWNERS_DECIDE)
    job = or_404(evolution_job_get, project=project, job_id=job_id)
    try:
        text = action(job)
    except ClearError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, text)
    return redirect("frontend:evolution-job", slug=project.slug, job_id=job.pk)


@login_required
@require_POST
def job_approve(request: HttpRequest, slug: str, job_id: int) -> HttpResponse:
    def approve(job):
        job = evolution_job_consent(job=job, user=request.user, patch_sha256=request.POST.get("patch_sha256", ""))
        return f"Approved: job {job.pk} is promoting the candidate ({job_mode(job).replace('_', ' ')})."
    return _job_action(request, slug, job_id, approve, owners_only=True)


@login_required
@require_POST
def job_discard(request: HttpRequest, slug: str, job_id: int) -> HttpResponse:
    def discard(job):
        evolution_job_discard(job=job, user=request.user)
        return f"Job {job.pk}'s candidate was discarded."
    return _job_action(request, slug, job_id, discard, owners_only=True)


@login_required
@require_POST
def job_cancel(request: HttpRequest, slug: str, job_id: int) -> HttpResponse:
    def cancel(job):
        job = evolution_job_cancel(job=job, actor=f"user:{request.user.pk}")
        return "Cancelled." if job.is_terminal else "Stopping: the job ends at its next stage boundary."
    return _job_action(request, slug, job_id, cancel)


@login_required
@require_POST
def job_merged(request: HttpRequest, slug: str, job_id: int) -> HttpResponse:
    def merged(job):
        fix = evolution_job_mark_merged(job=job, user=request.user, release=request.POST.get("release", ""))
        return f"Watching release {fix.release}: the insight is marked fixed when its traces no longer show it."
    return _job_action(request, slug, job_id, merged)


@login_required
def job_artifact(request: HttpRequest, slug: str, job_id: int, artifact_id: int) -> HttpResponse:
    project = project_for(request, slug)
    job = or_404(evolution_job_get, project=project, job_id=job_id)
    artifact = or_404(evolution_artifact_get, project=project, job=job, artifact_id=artifact_id)
    return or_404(artifact_response, job=job, artifact=artifact)
