"""Drive evolution jobs from the command line: start (optionally wait or run in this process), status, cancel,
approve (consent to the best candidate's patch, by its sha256)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from clear.errors import ClearError
from diagnosis.models import Insight
from evolution.models import TERMINAL_STATES, EvolutionJob, Iteration, JobState
from evolution.selectors import evolution_job_events, evolution_target_get
from evolution.services import evolution_job_cancel, evolution_job_consent, evolution_job_start
from evolution.services.jobs import job_backend_preflight


class Command(BaseCommand):
    help = "Evolution jobs: start, status, cancel, approve."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        start = sub.add_parser("start", help="start a job on a target for an insight")
        start.add_argument("--insight", required=True, type=int, help="insight id")
        start.add_argument("--target", required=True, help="target name (in the insight's project) or id")
        start.add_argument("--backend", default="scripted", help="coding backend (scripted, litellm, external)")
        start.add_argument("--script", help="scripted backend: the script JSON file")
        start.add_argument("--backend-config", help="backend config as a JSON object")
        start.add_argument("--depth", default="standard", choices=["shallow", "standard", "deep"])
        start.add_argument("--policy", help='policy overrides as JSON, e.g. \'{"trials": 1}\'')
        start.add_argument("--wait", action="store_true", help="poll until the job waits for consent or ends")
        start.add_argument("--inline", action="store_true", help="run every stage in this process; no worker needed")
        start.add_argument("--timeout", type=float, help="with --wait: give up after this many seconds")
        for name in ("status", "cancel"):
            cmd = sub.add_parser(name)
            cmd.add_argument("job", type=int)
        approve = sub.add_parser("approve", help="consent to the best candidate and promote it (PR mode)")
        approve.add_argument("job", type=int)
        approve.add_argument("--user", required=True, help="approver's email")
        approve.add_argument("--sha256", required=True, help="the patch hash shown by `status` (proves what you saw)")
        approve.add_argument("--inline", action="store_true")

    def handle(self, *args, **options):
        try:
            getattr(self, f"_{options['action']}")(options)
        except ClearError as exc:
            fields = exc.extra.get("fields") or {}
            raise CommandError("\n".join([exc.message] + [f"  {k}: {v}" for k, v in fields.items()])) from None

    def _backend_config(self, options) -> dict:
        config = {}
        if options["backend_config"]:
            try:
                config = json.loads(options["backend_config"])
            except json.JSONDecodeError as exc:
                raise CommandError(f"--backend-config is not JSON: {exc}") from None
        if options["script"]:
            path = Path(options["script"]).resolve()
            if not path.is_file():
                raise CommandError(f"--script {path}: no such file")
            config["script_path"] = str(path)
        if options["backend"] == "scripted" and not config:
            raise CommandError("The scripted backend needs --script FILE")
        return config

    def _start(self, options):
        insight = Insight.objects.filter(pk=options["insight"]).select_related("project").first()
        if insight is None:
            raise CommandError(f"No insight {options['insight']}")
        target = evolution_target_get(project=insight.project, name_or_id=options["target"])
        policy = json.loads(options["policy"]) if options["policy"] else None
        if options["inline"]:
            from clear.celery import app

            app.conf.task_always_eager = True
        backend_config = self._backend_config(options)
        # Before the transaction: the backend's check may wait on the model server.
        preflight = job_backend_preflight(backend_name=options["backend"], backend_config=backend_config)
        with transaction.atomic():
            job = evolution_job_start(project=insight.project, target=target, insight=insight,
                                      backend_name=options["backend"], backend_config=backend_config,
                                      depth=options["depth"], policy_overrides=policy, preflight=preflight)
            # The operator's own job: its model endpoint is theirs to choose, not held to CLEAR_EVOLUTION_MODEL_HOSTS
            # before each role as a job started through the API or the web UI is (services/roles.py).
            job.config_snapshot = {**job.config_snapshot, "operator": True}
            job.save(update_fields=["config_snapshot", "updated_at"])
        self.stdout.write(f"Job {job.pk} queued on {target.name} for insight {insight.pk}")
        if options["wait"] or options["inline"]:
            self._wait(job, timeout=options["timeout"])

    def _wait(self, job: EvolutionJob, *, timeout: float | None):
        deadline = time.monotonic() + timeout if timeout else None
        seen = 0
        while True:
            job.refresh_from_db()
            events = list(evolution_job_events(project=job.project, job=job))
            for event in events[seen:]:
                if event.to_state and event.to_state != event.from_state:
                    self.stdout.write(f"  {event.ts:%H:%M:%S} {event.from_state or '-'} → {event.to_state} "
                                      f"({event.event})")
            seen = len(events)
            if job.state in TERMINAL_STATES or job.state == JobState.AWAITING_CONSENT:
                break
            if deadline and time.monotonic() > deadline:
                raise CommandError(f"Job {job.pk} is still {job.state} after {timeout:g} s")
            time.sleep(1.0)
        self._status({"job": job.pk})

    def _job(self, job_id: int) -> EvolutionJob:
        job = EvolutionJob.objects.filter(pk=job_id).select_related("best_iteration", "target").first()
        if job is None:
            raise CommandError(f"No evolution job {job_id}")
        return job

    def _status(self, options):
        job = self._job(options["job"])
        reason = f" ({job.terminal_reason})" if job.terminal_reason else ""
        self.stdout.write(f"Job {job.pk}: {job.state}{reason}, iteration {job.current_iteration}, "
                          f"sandbox {job.sandbox_level or '-'}")
        for it in job.iterations.select_related("verdict_record").order_by("n"):
            summary = getattr(getattr(it, "verdict_record", None), "summary", "") or it.failure_reason
            # An ended job runs nothing: a row left "running" (written before jobs closed their iterations, or by
            # a process that died) is shown as what it is now.
            status = it.status
            if job.is_terminal and status == Iteration.Status.RUNNING:
                status, summary = Iteration.Status.FAILED, summary or job.terminal_reason
            self.stdout.write(f"  iteration {it.n}: {status} {summary}".rstrip())
        if job.best_iteration:
            best = job.best_iteration
            self.stdout.write(f"  best: iteration {best.n}, patch sha256 {best.patch_sha256}")
        if job.pr_branch:
            self.stdout.write(f"  branch {job.pr_branch} pushed to {job.config_snapshot.get('push_url')}")
        if job.error:
            self.stdout.write(f"  error: {job.error[:500]}")

    def _cancel(self, options):
        job = evolution_job_cancel(job=self._job(options["job"]), actor="cli")
        self.stdout.write(f"Job {job.pk}: {'cancelled' if job.is_terminal else 'stop requested'}")

    def _approve(self, options):
        user = get_user_model().objects.filter(email=options["user"]).first()
        if user is None:
            raise CommandError(f"No user {options['user']}")
        if options["inline"]:
            from clear.celery import app

            app.conf.task_always_eager = True
        job = self._job(options["job"])
        with transaction.atomic():
            evolution_job_consent(job=job, user=user, patch_sha256=options["sha256"])
        self._wait(job, timeout=None) if options["inline"] else self.stdout.write(f"Job {job.pk}: promoting")
