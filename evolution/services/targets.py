"""Registering an agent repository as an evolution target (its config validated before it is saved).

Through the API or the web UI nothing here touches the network: the source's shape and confinement and the config's
own fields are checked at once, then the target is saved `cloning` and a worker reads the repository
(services/target_cloning.py). The operator's `manage.py evolution_target add` reads it in the shell, as before.
"""

from __future__ import annotations

import json
import logging
import re
import tarfile
import tempfile
from pathlib import Path

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from clear.errors import ConflictError
from evolution import git
from evolution.config import target_config_validate
from evolution.errors import EvolutionConfigInvalid, EvolutionError, GitError
from evolution.models import TERMINAL_STATES, EvolutionTarget
from evolution.services.confinement import (
    HOST_FIELDS, OPERATOR_FIELDS, config_requested_check, git_error_reason, operator_fields_keep,
    repository_config_confine, source_confined, source_shape_check,
)

logger = logging.getLogger(__name__)

URL_RE = re.compile(r"^(?:https?|ssh|git|file)://|^[\w.-]+@[\w.-]+:")


def _source_check(source: str, *, project, operator: bool) -> str:
    """The operator may name any path (relative to the cwd) or URL; anyone else what confinement allows."""
    if not operator:
        return source_confined(source=source, project=project)
    source = source_shape_check(value=source)
    if not source:
        raise EvolutionConfigInvalid("source: give a local repository path or a git URL",
                                     extra={"fields": {"source": "required"}})
    if URL_RE.match(source):
        return source
    try:
        path = Path(source).expanduser().resolve()
        exists = path.exists()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop, before Python 3.13
        raise EvolutionConfigInvalid(f"source: {source} cannot be read: {exc}",
                                     extra={"fields": {"source": "unreadable"}}) from exc
    if not exists:
        raise EvolutionConfigInvalid(f"source: {path} does not exist", extra={"fields": {"source": "missing"}})
    return str(path)


def repository_read_confined(*, source: str, ref: str, config_file: bool = True) -> dict | None:
    """The repository's evolution.json at `ref` (repo_config_read), or with `config_file` false only whether `ref`
    can be fetched (None), for an API or web user: git's failure said in a few words (its message holds the command,
    the server's paths and its temp dir)."""
    try:
        if not config_file:
            repo_ref_check(source=source, ref=ref)
            return None
        return repo_config_read(source=source, ref=ref)
    except GitError as exc:
        reason = git_error_reason(exc)
        if "is not a commit" in exc.message:
            raise EvolutionConfigInvalid(f"default_branch: {reason}",
                                         extra={"fields": {"default_branch": reason}}) from None
        raise EvolutionConfigInvalid(
            f"source: could not read the repository's evolution.json (git could not fetch it: {reason})",
            extra={"fields": {"source": f"git could not fetch it: {reason}"}}) from None
    except (tarfile.TarError, OSError):
        # tarfile's "data" filter refuses links out of the export, e.g. an evolution.json pointing at /etc.
        problem = "its files could not be unpacked (a link leaving the repository, or a special file)"
        raise EvolutionConfigInvalid(f"source: could not read the repository's evolution.json ({problem})",
                                     extra={"fields": {"source": problem}}) from None


def config_confined(*, config: dict | None, repository: dict):
    """A new target's config for an API or web user. Its commands and sandbox levels are the repository's own
    (they run only in the sandbox): from its evolution.json (`repository`), which an explicit `config` may repeat
    but not change; hot_swap and scripted_fixtures are the operator's alone."""
    if config is None:
        return repository_config_confine(config=repository)
    if not isinstance(config, dict):
        return config  # target_config_validate says what it must be
    commands = {key: repository[key] for key in OPERATOR_FIELDS if key not in HOST_FIELDS and key in repository}
    return operator_fields_keep(config=config, stored=commands, from_repository=True)


def repo_config_read(*, source: str, ref: str = "") -> dict:
    """The repository's own evolution.json at `ref` (default HEAD), read from a throwaway mirror."""
    with tempfile.TemporaryDirectory(prefix="clear-evo-config-") as tmp:
        mirror = Path(tmp) / "mirror.git"
        git.repo_mirror_sync(source=source, mirror_path=mirror)
        commit = git.repo_commit_resolve(repo_path=mirror, ref=ref or "HEAD")
        export = Path(tmp) / "export"
        git.commit_export(repo_path=mirror, commit=commit, dest=export)
        path = export / "evolution.json"
        if not path.is_file():
            raise EvolutionConfigInvalid(
                f"config: the repository has no evolution.json at {commit[:12]}; give the config (--config FILE "
                "with manage.py evolution_target)",
                extra={"fields": {"config": "missing"}})
        return config_parse(text=path.read_text(), where="evolution.json")


def repo_ref_check(*, source: str, ref: str = "") -> str:
    """The commit `ref` (default HEAD) names in `source`, fetched into a throwaway mirror: the source can be read."""
    with tempfile.TemporaryDirectory(prefix="clear-evo-check-") as tmp:
        mirror = Path(tmp) / "mirror.git"
        git.repo_mirror_sync(source=source, mirror_path=mirror)
        return git.repo_commit_resolve(repo_path=mirror, ref=ref or "HEAD")


def config_parse(*, text: str, where: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EvolutionConfigInvalid(f"{where} is not valid JSON: {exc}", extra={"fields": {"config": str(exc)}}) \
            from exc
    if not isinstance(value, dict):
        raise EvolutionConfigInvalid(f"{where} must hold a JSON object", extra={"fields": {"config": "not an object"}})
    return value


def _push_url_check(push_url: str, *, project, operator: bool) -> str:
    # Clear pushes PR branches there: through the API it is confined like a source.
    if operator or not push_url.strip():
        return source_shape_check(value=push_url, field="push_url")
    return source_confined(source=push_url, project=project, field="push_url")


def evolution_target_add(*, project, name: str, source: str, config: dict | None = None, default_branch: str = "",
                         push_url: str = "", created_by=None, operator: bool = False) -> EvolutionTarget:
    """Register a target. Without `operator` it is saved `cloning` and a worker reads the repository (its
    evolution.json, against which `config` is checked); a bad name, source, push URL or config field is refused at
    once. `operator` (manage.py evolution_target only) reads the repository here, under CLEAR_GIT_TIMEOUT_SECONDS,
    and lifts the confinement of services/confinement.py: any local path, any config (commands, sandbox levels,
    hot_swap, scripted_fixtures)."""
    name = name.strip()
    if not name:
        raise EvolutionConfigInvalid("name: required", extra={"fields": {"name": "required"}})
    source = _source_check(source, project=project, operator=operator)
    push_url = _push_url_check(push_url, project=project, operator=operator)
    fields = {"project": project, "name": name, "source": source, "default_branch": default_branch.strip(),
              "push_url": push_url, "created_by": created_by}
    if not operator:
        config_requested_check(config=config)
        fields.update(config={}, config_requested=config, state=EvolutionTarget.State.CLONING,
                      state_changed_at=timezone.now(), state_version=1)
    else:
        if config is None:
            config = repo_config_read(source=source, ref=default_branch)
        fields.update(config=target_config_validate(config).model_dump(exclude_none=True),
                      state_changed_at=timezone.now())
    try:
        with transaction.atomic():
            target = EvolutionTarget.objects.create(**fields)
            if not operator:
                _clone_enqueue_on_commit(target_id=target.pk, version=target.state_version)
    except IntegrityError as exc:
        raise ConflictError(f"A target named {name!r} already exists in this project", code="target_exists") from exc
    if operator:
        _release_zero(target)
    return target


def _clone_enqueue_on_commit(*, target_id: int, version: int) -> None:
    from evolution.services.target_cloning import target_clone_enqueue

    transaction.on_commit(lambda: target_clone_enqueue(target_id=target_id, version=version))


def target_clone_request(*, target: EvolutionTarget) -> None:
    """Back to `cloning` and a worker sent to read the repository again (a new source or branch, or another try
    after a failure). A clone asked for earlier and still running keeps its outcome to itself (state_version)."""
    with transaction.atomic():
        EvolutionTarget.objects.filter(pk=target.pk).update(
            state=EvolutionTarget.State.CLONING, state_reason="", state_changed_at=timezone.now(),
            state_version=F("state_version") + 1, clone_started_at=None)
        target.refresh_from_db(fields=["state", "state_reason", "state_changed_at", "state_version",
                                       "clone_started_at"])
        _clone_enqueue_on_commit(target_id=target.pk, version=target.state_version)


def levels_confine(config) -> None:
    """Drop the sandbox levels below the server's minimum; refuse a config that keeps none (the operator's command
    may register one: its jobs then end before anything of the target runs)."""
    from evolution.sandbox import sandbox_levels_allowed, sandbox_min_level

    allowed = sandbox_levels_allowed(levels=config.sandbox_levels)
    if not allowed:
        floor = sandbox_min_level()
        raise EvolutionConfigInvalid(
            f"sandbox_levels: {', '.join(config.sandbox_levels)} all fall below this server's minimum {floor} "
            f"(CLEAR_EVOLUTION_MIN_SANDBOX): candidate code never runs less contained here; allow {floor} or a "
            "stronger level", extra={"fields": {"sandbox_levels": f"below the minimum {floor}"}})
    config.sandbox_levels = allowed


def _release_zero(target: EvolutionTarget) -> None:
    """A hot-swap target's current code becomes release zero (current and last good) as it is registered; if that
    fails, the first hot-swap job records it instead (and says why if it cannot)."""
    from evolution.services.hot_swap import release_zero_record

    try:
        release_zero_record(target=target)
    except Exception:
        logger.exception("evolution: recording release zero of target %s failed; the first job records it", target.pk)


def evolution_target_update(*, target: EvolutionTarget, config: dict | None = None, source: str | None = None,
                            push_url: str | None = None, default_branch: str | None = None,
                            operator: bool = False) -> EvolutionTarget:
    """Change a target, checked as on add. Without `operator`, the config's commands, sandbox levels, hot_swap and
    scripted_fixtures stay as stored (left out: kept; sent unchanged: fine; changed: refused), and the source of a
    hot-swap target stays where the operator put it (its releases run on the host). A new source or branch, or any
    save of a failed target, sends a worker to read the repository again (`cloning`); a target whose evolution.json
    was never read takes `config` as at registration. The operator's command reads nothing: the target it leaves
    with a config is ready."""
    if target.jobs.exclude(state__in=TERMINAL_STATES).exists():
        raise EvolutionError(f"Target {target.name!r} has an active job; change it when the job has ended",
                             code="target_busy")
    changed = ["push_url", "default_branch", "updated_at"]
    reread = not operator and target.state == EvolutionTarget.State.FAILED
    if config is not None and not operator and not target.config:
        config_requested_check(config=config)
        target.config, target.config_requested, reread = {}, config, True
        changed += ["config", "config_requested"]
    elif config is not None:
        if not operator and isinstance(config, dict):
            config = operator_fields_keep(config=config, stored=target.config)
        # The sandbox levels are the stored ones: not confined again, so an operator's list below the minimum does not
        # block other changes (its jobs end before anything runs, stages_eval).
        target.config = target_config_validate(config).model_dump(exclude_none=True)
        changed.append("config")
    # The edit form sends the source and push URL back as they are: what is unchanged is not checked again (the
    # operator may have put it outside the source roots).
    if source is not None and source.strip() != target.source:
        checked = _source_check(source, project=target.project, operator=operator)
        if checked != target.source and not operator and (target.config or {}).get("hot_swap"):
            raise EvolutionConfigInvalid(
                "source: this target has an operator-set hot_swap section; only the operator can move its source: "
                "manage.py evolution_target update", extra={"fields": {"source": "only the operator can change it"}})
        reread = reread or checked != target.source
        target.source = checked
        changed.append("source")
    if push_url is not None and push_url.strip() != target.push_url:
        target.push_url = _push_url_check(push_url, project=target.project, operator=operator)
    if default_branch is not None:
        reread = reread or default_branch.strip() != target.default_branch
        target.default_branch = default_branch.strip()
    if operator and target.config and target.state != EvolutionTarget.State.READY:
        target.state, target.state_reason, target.state_changed_at = EvolutionTarget.State.READY, "", timezone.now()
        changed += ["state", "state_reason", "state_changed_at"]
    with transaction.atomic():
        # Only what this edit sets: a worker may have stored the clone's outcome since the target was read.
        target.save(update_fields=changed)
        if reread and not operator:
            target_clone_request(target=target)
    return target
