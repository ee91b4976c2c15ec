"""The heat map as the Nodes page draws it: `diagnosis.selectors.node_insight_heatmap_get` has the figures; this
gives each cell its shade, names the runs in the picker and picks the run and level shown by default."""

from __future__ import annotations

from django.template.defaultfilters import date as date_format
from django.utils import timezone

from clear.projects.models import Project
from diagnosis.models import DiagnosisRun, Insight
from diagnosis.selectors import HeatMap, HeatMapCell, node_insight_heatmap_get
from diagnosis.selectors.heatmap import heatmap_runs_with_node_insights

# Cell shades: the share at or above which a cell takes shade i (0 is "none").
SHADE_STEPS = (0.0, 0.05, 0.15, 0.3, 0.5)


def cell_shade(cell: HeatMapCell) -> int:
    if not cell.traces or not cell.judged:
        return 0
    return max(i for i, step in enumerate(SHADE_STEPS) if cell.share >= step) + 1


def heatmap_shaded(*, project: Project, run: DiagnosisRun, level: str = Insight.Level.SYSTEM) -> HeatMap:
    """The run's heat map, each cell with `shade` (0-5) for the template."""
    heat_map = node_insight_heatmap_get(project=project, run=run, level=level)
    for row in heat_map.rows:
        for cell in row.cells:
            cell.shade = cell_shade(cell)
    return heat_map


def _judge_kinds(judges: list[str]) -> str:
    """A run's judges as the kinds a reader picks between: rules, rubrics, model, contrastive."""
    kinds: list[str] = []
    for name in judges or []:
        kind = {"rule": "rules", "rubric": "rubrics", "rubrics": "rubrics", "llm": "model"}.get(
            name.split(".", 1)[0], name)
        if kind not in kinds:
            kinds.append(kind)
    return ", ".join(kinds) or "no judge"


def heatmap_run_label(run: DiagnosisRun) -> str:
    """How the run picker names a run: its name (or "Run"), when it started, what it judged and with which judges;
    never its bare id."""
    started = date_format(timezone.localtime(run.created_at), "Y-m-d H:i") if run.created_at else "—"
    judged = f"{run.done_count} trace{'' if run.done_count == 1 else 's'}"
    return f"{run.name or 'Run'} · {started} · {run.scope_label} · {judged} · {_judge_kinds(run.judges)}"


def heatmap_choice(*, project: Project, runs: list[DiagnosisRun], run_id: str = "",
                   level: str = "") -> tuple[DiagnosisRun | None, str]:
    """The run and level the map shows: those asked for, else the newest run that found node-level insights (a run
    with system-level insights only draws a single column) at the node level; else the newest run, system level.
    An unknown run id gives (None, level): the caller says so and asks again without it."""
    with_node = heatmap_runs_with_node_insights(project=project, runs=runs)
    if run_id:
        run = next((r for r in runs if str(r.pk) == run_id), None)
        if run is None:
            return None, level
    else:
        run = next((r for r in runs if r.pk in with_node), runs[0] if runs else None)
    if level not in Insight.Level.values:
        level = Insight.Level.NODE if run is not None and run.pk in with_node else Insight.Level.SYSTEM
    return run, level
