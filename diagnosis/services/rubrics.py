"""Rubric writes: configs are validated on the way in, so a stored rubric always evaluates."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from clear.projects.models import Project
from diagnosis.errors import RubricInvalidError
from diagnosis.judges.rubric_config import KINDS, RubricConfigError, rubric_config_validate
from diagnosis.models import Rubric

_UNSET = object()


def _validated(*, kind: str, config: Any, name: str) -> dict:
    try:
        return rubric_config_validate(kind, config)
    except RubricConfigError as exc:
        raise RubricInvalidError(f"Rubric {name!r}: {exc}", extra={"kind": kind, "kinds": list(KINDS)}) from None


def _clean_name(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise RubricInvalidError("A rubric needs a name")
    if len(name) > 200:
        raise RubricInvalidError("A rubric's name is at most 200 characters")
    return name


def rubric_create(*, project: Project, name: str, kind: str, config: dict, node: str | None = None,
                  description: str = "", enabled: bool = True) -> Rubric:
    name = _clean_name(name)
    config = _validated(kind=kind, config=config, name=name)
    try:
        with transaction.atomic():
            return Rubric.objects.create(project=project, name=name, kind=kind, config=config, node=node or "",
                                         description=description, enabled=enabled)
    except IntegrityError:
        raise RubricInvalidError(f"This project already has a rubric named {name!r}", code="rubric_exists") from None


def rubric_update(*, rubric: Rubric, name: str | None = None, kind: str | None = None, config: dict | None = None,
                  node: Any = _UNSET, description: str | None = None, enabled: bool | None = None) -> Rubric:
    """Change some fields; a new kind or config is validated together."""
    if name is not None:
        rubric.name = _clean_name(name)
    if kind is not None or config is not None:
        new_kind = kind or rubric.kind
        rubric.config = _validated(kind=new_kind, config=config if config is not None else rubric.config,
                                   name=rubric.name)
        rubric.kind = new_kind
    if node is not _UNSET:
        rubric.node = node or ""
    if description is not None:
        rubric.description = description
    if enabled is not None:
        rubric.enabled = enabled
    try:
        with transaction.atomic():
            rubric.save()
    except IntegrityError:
        raise RubricInvalidError(f"This project already has a rubric named {rubric.name!r}",
                                 code="rubric_exists") from None
    return rubric


def rubric_delete(*, rubric: Rubric) -> None:
    rubric.delete()


def rubric_as_dict(rubric: Rubric) -> dict:
    """The plain-data form judges receive (rubric checks and the LLM judges)."""
    return {"id": rubric.pk, "name": rubric.name, "kind": rubric.kind, "node": rubric.node,
            "config": rubric.config, "description": rubric.description}
