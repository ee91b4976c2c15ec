"""The heat map as the Nodes page draws it: `diagnosis.selectors.node_insight_heatmap_get` has the figures; this
gives each cell its shade."""

from __future__ import annotations

from clear.projects.models import Project
from diagnosis.models import DiagnosisRun, Insight
from diagnosis.selectors import HeatMap, HeatMapCell, node_insight_heatmap_get

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
