"""Hot-swap mode of a job (evolution.md §7.3 steps 13–15, §7.11) on top of the deploy library (evolution/deploy):
promote the approved candidate as a release, record it as a `Release` row in step with the library's state.json,
recover a promotion whose worker died, and the release history's rollback (run by a task: services/rollbacks.py).

Registering a hot-swap target records the code it runs as release zero (`release_zero_record`), so there is always a
live release: a hot-swap job starts from it (`job_base_release`), and approving a job whose base is no longer live
is refused (`hot_swap_consent_check`), since promoting it would swap that base's changes back in.

state.json (written by evolution/deploy under the target's lock) stays the authority on what `current` and last-good
are; the rows are the history the pages and the closing loop read, brought in step after every operation.
"""

from __future__ import annotations

import logging
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from clear.errors import ConflictError
from evolution.errors import EvolutionConfigInvalid
from evolution.models import (
    AuditEvent, EvolutionJob, EvolutionTarget, InsightFix, Iteration, JobState, Release, ReleaseRollback, StageRun,
)

logger = logging.getLogger(__name__)
S = JobState
R = Release.Status
HOT_SWAP_STATES = (S.PROMOTING, S.HEALTH_CHECK, S.ROLLING_BACK)
RELEASE_ZERO_PREFIX = "release-0-"


def _releases_base() -> Path:
    return Path(settings.CLEAR_EVOLUTION_RELEASES_DIR or Path(settings.CLEAR_EVOLUTION_DIR) / "releases")


def releases_root(*, target: EvolutionTarget) -> Path:
    """<CLEAR_EVOLUTION_RELEASES_DIR>/<target id>, by default <CLEAR_EVOLUTION_DIR>/releases/<target id>."""
    return _releases_base() / str(target.pk)


def hot_swap_agents_stop() -> list[int]:
    """Stop every agent a process activator runs under the releases roots (recorded in their agent.pid), with the
    processes it spawned. The activator starts it in a session of its own so that a worker's restart does not take
    the live release down; stopping the worker therefore leaves it running, and whoever stops Clear for good (the
    demo's Ctrl-C) calls this. Needs no database. Returns the pids stopped."""
    from evolution.deploy import ProcessActivator

    stopped = []
    for pid_file in sorted(_releases_base().glob("*/agent.pid")):
        activator = ProcessActivator(command="true", pid_file=pid_file)  # never reloaded: it only adopts and stops
        pid = activator.pid
        activator.stop()
        if pid is not None:
            logger.info("evolution.hot_swap_agent_stopped pid=%s root=%s", pid, pid_file.parent)
            stopped.append(pid)
    return stopped


def _plan(*, config: dict, root: Path):
    """The target's hot-swap plan, its live release confined (evolution/sandbox/live.py): the agent, preflight and
    probes run the approved candidate's code, so as the sandbox user with only the configured variables, and no
    network unless the operator's hot_swap section says "network": "host". Raises SandboxUnavailable (a
    ClearError) when this server cannot confine it."""
    from evolution.deploy import hot_swap_config_validate
    from evolution.sandbox.live import live_confinement_get

    if not config.get("hot_swap"):
        raise EvolutionConfigInvalid("The target config has no hot_swap section (activator, probes, health; see "
                                     "evolution/deploy/README.md)", extra={"fields": {"hot_swap": "missing"}})
    hot_swap = hot_swap_config_validate(config["hot_swap"])
    confinement = live_confinement_get(env=hot_swap.env, host_network=hot_swap.network == "host",
                                       writable_dirs=hot_swap.writable_dirs(root))
    return hot_swap.build(releases_root=root, health_command=config.get("health_command") or "",
                          confinement=confinement)


def releases_sync(*, target: EvolutionTarget) -> None:
    """Bring the target's Release rows in step with state.json: a row per release on disk, the one `current`
    points at active once healthy, an earlier active one superseded."""
    from evolution.deploy import release_current_get, release_state_get

    root = releases_root(target=target)
    if not (root / "state.json").exists():
        return
    state = release_state_get(releases_root=root)
    current = release_current_get(releases_root=root)
    with transaction.atomic():
        rows = {r.release_id: r for r in Release.objects.select_for_update().filter(target=target)}
        for release_id, info in state.releases.items():
            if release_id not in rows:
                rows[release_id] = Release.objects.create(
                    target=target, release_id=release_id, commit=(info.commit or "")[:40],
                    path=str(root / "releases" / release_id),
                    status=R.FAILED if info.status == "preflight_failed" else R.STAGED)
        healthy_current = current in rows and state.releases.get(current) is not None \
            and state.releases[current].status == "healthy" and state.pending is None
        for release_id, row in rows.items():
            if release_id == current and healthy_current and row.status != R.ACTIVE:
                row.status, row.activated_at = R.ACTIVE, timezone.now()
                row.save(update_fields=["status", "activated_at", "updated_at"])
            elif release_id != current and row.status == R.ACTIVE:
                row.status = R.SUPERSEDED
                row.save(update_fields=["status", "updated_at"])


def live_release(*, target: EvolutionTarget) -> Release | None:
    """The Release row `current` points at (the rows brought in step first); None before any release."""
    from evolution.deploy import release_current_get

    root = releases_root(target=target)
    current = release_current_get(releases_root=root) if root.exists() else None
    if current is None:
        return None
    releases_sync(target=target)
    return Release.objects.filter(target=target, release_id=current).first()


def release_zero_record(*, target: EvolutionTarget) -> Release | None:
    """Record the code a hot-swap target runs now, its default branch's head, as release zero: staged under the
    releases root, `current` and last good. The first promotion then has a release to roll back to, and the first
    job's base is a release. Nothing is started or probed: the agent keeps running as it did. A root that already has
    a current release is only brought in step. None for a target without a hot_swap section."""
    from evolution import git
    from evolution.deploy import (
        release_current_get, release_lock, release_mark_healthy, release_stage, release_swap,
    )
    from evolution.services.workspace import mirror_path

    if not (target.config or {}).get("hot_swap"):
        return None
    root = releases_root(target=target)
    with release_lock(root, timeout_s=30):
        if release_current_get(releases_root=root) is None:
            mirror = mirror_path(target_id=target.pk)
            git.repo_mirror_sync(source=target.source, mirror_path=mirror)
            branch = target.default_branch or "HEAD"
            commit = git.repo_commit_resolve(repo_path=mirror, ref=branch)
            release_id = f"{RELEASE_ZERO_PREFIX}{commit[:12]}"
            release_stage(releases_root=root, release_id=release_id, repo_path=mirror, commit=commit)
            release_swap(releases_root=root, release_id=release_id, kind="manual",
                         reason=f"release zero: {target.name}'s {branch} at registration (the code it runs; "
                                "recorded, not reloaded)")
            release_mark_healthy(releases_root=root, release_id=release_id)
            logger.info("evolution.release_zero target=%s release=%s", target.pk, release_id)
    return live_release(target=target)


def job_base_release(*, target: EvolutionTarget) -> Release | None:
    """The release a new hot-swap job starts from: the live one (release zero is recorded first if the target has
    none yet, e.g. one registered before release zero existed)."""
    return live_release(target=target) or release_zero_record(target=target)


def hot_swap_consent_check(*, job: EvolutionJob) -> None:
    """Refuse to approve a hot-swap job while its target rolls back, or when the release it was built on is no
    longer live (a rollback since): its candidate carries that release's changes, so promoting it would put them
    back. The job can start again from the live release (`evolution_job_restart`)."""
    rollback = ReleaseRollback.objects.filter(target_id=job.target_id, status__in=ReleaseRollback.ACTIVE).first()
    if rollback is not None:
        raise ConflictError(f"{job.target.name!r} is rolling back (rollback {rollback.pk}, {rollback.status}); "
                            "approve when it has finished", code="rollback_in_progress",
                            extra={"rollback": rollback.pk})
    if job.base_release_id is None:
        return
    live = live_release(target=job.target)
    if live is None or live.pk != job.base_release_id:
        base = job.base_release.release_id if job.base_release else "?"
        now = live.release_id if live else "no release"
        raise ConflictError(
            f"Job {job.pk} was built on release {base}, but {now} is live now: its candidate carries {base}'s "
            "changes too, so approving it would swap them back in. Start again from the live release, or discard "
            "this candidate.",
            code="base_not_live", extra={"base_release": base, "live_release": live.release_id if live else None})


def _row_set(*, target: EvolutionTarget, release_id: str, status: str, report: dict | None = None) -> None:
    fields = {"status": status, "updated_at": timezone.now()}
    if report is not None:
        fields["health_report"] = report
    if status == R.ACTIVE:
        fields["activated_at"] = timezone.now()
    Release.objects.filter(target=target, release_id=release_id).update(**fields)


def hot_swap_job_promote(*, job: EvolutionJob, stage_run: StageRun, best: Iteration, mirror: Path, sha: str) -> str:
    """PROMOTING → HEALTH_CHECK → PROMOTED(healthy), or → ROLLING_BACK → ROLLED_BACK(health_failed | reload_failed |
    cancelled), or FAILED(rollback_unhealthy | preflight_failed | …) with the library's detail as the error."""
    from evolution.deploy import hot_swap_promote, release_current_get
    from evolution.services.stages import advance, finish
    from evolution.services.workspace import StopGuard, artifact_store

    config = job.target_config
    if not config.get("hot_swap"):
        finish(job=job, to_state=S.FAILED, reason="hot_swap_unconfigured",
               error="The job asked for hot-swap promotion but the target config has no hot_swap section")
        return "hot_swap_unconfigured"
    target = job.target
    root = releases_root(target=target)
    plan = _plan(config=config, root=root)
    release_id = f"job-{job.pk}-{best.candidate_commit[:12]}"
    previous = release_current_get(releases_root=root) if root.exists() else None
    base = Release.objects.filter(pk=job.base_release_id).first() if job.base_release_id else None
    if base is not None and base.release_id != previous:  # rolled back between consent and this stage
        finish(job=job, to_state=S.FAILED, reason="base_not_live",
               error=f"The job was built on release {base.release_id}, but {previous or 'no release'} is live now; "
                     "nothing was swapped. Start again from the live release.")
        return "base_not_live"
    Release.objects.update_or_create(target=target, release_id=release_id, defaults={
        "job": job, "commit": best.candidate_commit, "path": str(root / "releases" / release_id), "status": R.STAGED,
        "previous": Release.objects.filter(target=target, release_id=previous).first() if previous else None})
    job = advance(job=job, to_state=S.HEALTH_CHECK, event="swapping", stage_done=False,
                  data={"iteration": best.n, "release_id": release_id, "previous": previous})
    result = hot_swap_promote(releases_root=root, release_id=release_id, repo_path=mirror,
                              commit=best.candidate_commit, reason=f"evolution job {job.pk} iteration {best.n}",
                              should_stop=StopGuard(job_id=job.pk), **plan.promote_kwargs())
    report = {**result.to_dict(), "release_id": release_id, "patch_sha256": sha}
    artifact_store(job=job, iteration=best, stage_run=stage_run, kind="health_report", name="hot_swap.json",
                   content=report)
    outcome, reason = str(result.outcome), str(result.reason)
    data = {"release_id": release_id, "outcome": outcome, "reason": reason, "active_release": result.active_release}
    releases_sync(target=target)
    if outcome == "promoted":
        _row_set(target=target, release_id=release_id, status=R.ACTIVE, report=report)
        from evolution.services.watch import insight_fix_record

        with transaction.atomic():  # a page that sees PROMOTED sees the fix it is watching for as well
            job = finish(job=job, to_state=S.PROMOTED, reason="healthy", data=data)
            insight_fix_record(job=job, release=release_id, commit=best.candidate_commit)
        return outcome
    swapped = result.rollback_health is not None or outcome == "rolled_back"
    _row_set(target=target, release_id=release_id, status=R.ROLLED_BACK if swapped else R.FAILED, report=report)
    if swapped:
        job = advance(job=job, to_state=S.ROLLING_BACK, event="rolling_back", stage_done=False,
                      data={**data, "rollback_to": result.rollback_to})
    if outcome == "rolled_back":
        finish(job=job, to_state=S.ROLLED_BACK, reason=reason, data=data)
    else:
        finish(job=job, to_state=S.FAILED, reason=reason[:60], data=data, error=result.detail[:10000])
    return outcome


def hot_swap_job_recover(*, job: EvolutionJob) -> str:
    """The promoter died mid-swap (the janitor found its heartbeat stale): put `current` back on the release
    recorded before the swap. Returns what happened, for the job's error text; never raises."""
    from evolution.deploy import hot_swap_recover

    root = releases_root(target=job.target)
    try:
        result = hot_swap_recover(releases_root=root, **_plan(config=job.target_config, root=root).health_kwargs())
    except Exception as exc:  # the job still ends FAILED; the message says what is left to do by hand
        logger.exception("evolution: hot-swap recovery of job %s failed", job.pk)
        return f"hot-swap recovery failed ({exc}); check {root} and roll back by hand"
    if result is None:
        return "no promotion was pending"
    try:
        releases_sync(target=job.target)
        _row_set(target=job.target, release_id=result.release_id,
                 status=R.ROLLED_BACK if result.rollback_health is not None else R.FAILED, report=result.to_dict())
    except Exception:  # the rows are history; the swap back already happened
        logger.exception("evolution: recording the recovery of job %s failed", job.pk)
    return f"hot-swap recovery: {result.outcome} ({result.reason}), active release {result.active_release}"


def releases_undone_mark(*, target: EvolutionTarget, to_release: str, by: str) -> list[str]:
    """After a rollback to `to_release`, every release swapped in after it is undone: rolled_back, and the fixes
    they carried no longer live (their InsightFix rolled_back, an audit event on their jobs)."""
    to_row = Release.objects.filter(target=target, release_id=to_release).first()
    if to_row is None:
        return []
    undone = list(Release.objects.filter(target=target, pk__gt=to_row.pk, status__in=[R.ACTIVE, R.SUPERSEDED])
                  .select_related("job"))
    with transaction.atomic():
        for row in undone:
            row.status = R.ROLLED_BACK
            row.save(update_fields=["status", "updated_at"])
            if row.job is None:
                continue
            InsightFix.objects.filter(job_id=row.job_id).exclude(status=InsightFix.Status.ROLLED_BACK) \
                .update(status=InsightFix.Status.ROLLED_BACK, updated_at=timezone.now())
            AuditEvent.objects.create(job=row.job, actor=by, event="release_rolled_back", from_state=row.job.state,
                                      to_state=row.job.state,
                                      data={"release_id": row.release_id, "to_release": to_release})
    return [row.release_id for row in undone]


def release_rollback_to_previous(*, target: EvolutionTarget, user=None, to_release: str | None = None,
                                 actor: str = ""):
    """The release history's one-click rollback: swap `current` to the most recent healthy earlier release (or
    `to_release`), reload and re-probe (in the caller: the target's hot_swap.health bounds it, 90 s by default).
    The Release rows follow: the release left is rolled_back, the one now current active (or failed when its
    re-probe failed: the agent needs a person). Returns deploy's PromotionResult."""
    from evolution.deploy import DeployError, hot_swap_rollback, release_current_get

    busy = EvolutionJob.objects.filter(target=target, state__in=HOT_SWAP_STATES).first()
    if busy is not None:
        raise ConflictError(f"Job {busy.pk} is deploying to {target.name!r} ({busy.state}); roll back when it has "
                            "finished", code="deploy_busy", extra={"job": busy.pk})
    root = releases_root(target=target)
    plan = _plan(config=target.config or {}, root=root)
    if not (root / "state.json").exists():
        raise ConflictError(f"Target {target.name!r} has no releases yet; nothing to roll back to",
                            code="no_rollback_target")
    before = release_current_get(releases_root=root)
    who = actor or (getattr(user, "email", "") if user is not None else "") or "system"
    try:
        result = hot_swap_rollback(releases_root=root, to_release=to_release or None,
                                   reason=f"manual rollback by {who} from {before}", **plan.health_kwargs())
    except DeployError as exc:
        raise ConflictError(exc.message, code=exc.code, extra=getattr(exc, "extra", None)) from exc
    releases_sync(target=target)
    if before and before != result.active_release:
        releases_undone_mark(target=target, to_release=result.active_release, by=who)
        _row_set(target=target, release_id=before, status=R.ROLLED_BACK)
    healthy = str(result.outcome) == "rolled_back"
    _row_set(target=target, release_id=result.active_release, status=R.ACTIVE if healthy else R.FAILED,
             report={**result.to_dict(), "by": who})
    if healthy:  # back on a release a job promoted (a roll forward): its fix is live again
        InsightFix.objects.filter(job__releases__target=target, job__releases__release_id=result.active_release,
                                  status=InsightFix.Status.ROLLED_BACK) \
            .update(status=InsightFix.Status.WATCHING, updated_at=timezone.now())
    logger.info("evolution.release_rollback target=%s from=%s to=%s outcome=%s", target.pk, before,
                result.active_release, result.outcome)
    return result
