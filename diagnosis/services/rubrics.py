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


# The rubrics an engineer would write for the support desk (examples/support_desk/BUGS.md says which judge catches
# which bug): the demo creates them (demo_setup), and the tests that judge the demo's traces as the demo does.
DEMO_RUBRICS: tuple[tuple[str, str, dict], ...] = (
    ("The mediator keeps every fact a tool returned", "coverage",
     {"path": ["$.order_id", "$.tracking_number", "$.invoice_id", "$.articles[*].id"],
      "sources": {"kind": "TOOL"}, "target": {"node": "mediator", "kind": "LLM"}}),
    ("Refund tickets are not answered from the order records", "tool_never",
     {"tool": "order_lookup", "when": {"goal_regex": r"\brefund"}}),
    ("Refund requests are routed to billing", "regex",
     {"pattern": r'"intent":\s*"refund"[^}]*"worker":\s*"orders_worker"', "expect": "absent",
      "spans": {"node": "planner", "kind": "LLM"}}),
)


def rubric_create_demo_set(*, project: Project) -> list[Rubric]:
    """The demo's rubrics (DEMO_RUBRICS) in `project`, each created once through rubric_create."""
    created = []
    for name, kind, config in DEMO_RUBRICS:
        if not Rubric.objects.filter(project=project, name=name).exists():
            created.append(rubric_create(project=project, name=name, kind=kind, config=config))
    return created


def rubric_as_dict(rubric: Rubric) -> dict:
    """The plain-data form judges receive (rubric checks and the LLM judges)."""
    return {"id": rubric.pk, "name": rubric.name, "kind": rubric.kind, "node": rubric.node,
            "config": rubric.config, "description": rubric.description}
