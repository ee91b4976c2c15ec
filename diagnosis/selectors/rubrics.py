"""Rubrics (the project's own checks the judges apply)."""

from __future__ import annotations

from django.db.models import QuerySet

from clear.projects.models import Project
from diagnosis.errors import RubricNotFoundError
from diagnosis.models import Rubric


def rubric_list(*, project: Project, enabled: bool | None = None) -> QuerySet[Rubric]:
    rubrics = Rubric.objects.filter(project=project)
    if enabled is not None:
        rubrics = rubrics.filter(enabled=enabled)
    return rubrics.order_by("name")


def rubric_judge_names(*, project: Project) -> dict[str, str]:
    """Each rubric's judge id (`rubric.<pk>`, as verdicts record it) -> the rubric's name, disabled rubrics included:
    their verdicts in older runs still carry the id."""
    return {rubric.judge_name: rubric.name for rubric in Rubric.objects.filter(project=project).only("pk", "name")}


def rubric_get(*, project: Project, rubric_id: int) -> Rubric:
    rubric = Rubric.objects.filter(project=project, pk=rubric_id).first()
    if rubric is None:
        raise RubricNotFoundError(f"No rubric {rubric_id} in this project")
    return rubric
