"""Registering an agent repository as an evolution target (its config validated before it is saved)."""

from __future__ import annotations

import json
import logging
import re
import tempfile
from pathlib import Path

from django.db import IntegrityError, transaction

from clear.errors import ConflictError
from evolution import git
from evolution.config import target_config_validate
from evolution.errors import EvolutionConfigInvalid, EvolutionError
from evolution.models import TERMINAL_STATES, EvolutionTarget

logger = logging.getLogger(__name__)

URL_RE = re.compile(r"^(?:https?|ssh|git|file)://|^[\w.-]+@[\w.-]+:")


def _source_check(source: str) -> str:
    source = source.strip()
    if not source:
        raise EvolutionConfigInvalid("source: give a local repository path or a git URL",
                                     extra={"fields": {"source": "required"}})
    if URL_RE.match(source):
        return source
    path = Path(source).expanduser().resolve()
    if not path.exists():
        raise EvolutionConfigInvalid(f"source: {path} does not exist", extra={"fields": {"source": "missing"}})
    return str(path)


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
                f"config: the repository has no evolution.json at {commit[:12]}; pass --config FILE",
                extra={"fields": {"config": "missing"}})
        return config_parse(text=path.read_text(), where="evolution.json")


def config_parse(*, text: str, where: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EvolutionConfigInvalid(f"{where} is not valid JSON: {exc}", extra={"fields": {"config": str(exc)}}) \
            from exc
    if not isinstance(value, dict):
        raise EvolutionConfigInvalid(f"{where} must hold a JSON object", extra={"fields": {"config": "not an object"}})
    return value


def evolution_target_add(*, project, name: str, source: str, config: dict | None = None, default_branch: str = "",
                         push_url: str = "", created_by=None) -> EvolutionTarget:
    name = name.strip()
    if not name:
        raise EvolutionConfigInvalid("name: required", extra={"fields": {"name": "required"}})
    source = _source_check(source)
    if config is None:
        config = repo_config_read(source=source, ref=default_branch)
    validated = target_config_validate(config)
    try:
        with transaction.atomic():
            target = EvolutionTarget.objects.create(
                project=project, name=name, source=source, default_branch=default_branch.strip(),
                push_url=push_url.strip(), config=validated.model_dump(exclude_none=True), created_by=created_by)
    except IntegrityError as exc:
        raise ConflictError(f"A target named {name!r} already exists in this project", code="target_exists") from exc
    _release_zero(target)
    return target


def _release_zero(target: EvolutionTarget) -> None:
    """A hot-swap target's current code becomes release zero (current and last good) as it is registered; if that
    fails, the first hot-swap job records it instead (and says why if it cannot)."""
    from evolution.services.hot_swap import release_zero_record

    try:
        release_zero_record(target=target)
    except Exception:
        logger.exception("evolution: recording release zero of target %s failed; the first job records it", target.pk)


def evolution_target_update(*, target: EvolutionTarget, config: dict | None = None, source: str | None = None,
                            push_url: str | None = None, default_branch: str | None = None) -> EvolutionTarget:
    if target.jobs.exclude(state__in=TERMINAL_STATES).exists():
        raise EvolutionError(f"Target {target.name!r} has an active job; change it when the job has ended",
                             code="target_busy")
    if config is not None:
        target.config = target_config_validate(config).model_dump(exclude_none=True)
    if source is not None:
        target.source = _source_check(source)
    if push_url is not None:
        target.push_url = push_url.strip()
    if default_branch is not None:
        target.default_branch = default_branch.strip()
    target.save()
    return target
