"""Which run gives an insight its headline figures (Insight.count, trace_count, frequency, lift…, last_run).

The designated run is the latest *full* run (DiagnosisRun.is_full: every trace of a whole release, or of everything,
no other filter, no sampling, succeeded, not continuous, not a gate's) that covers the *newest release*: the release
whose first trace Clear received last (a release run of it, or a run over everything that judged traces of it).
A gate's runs, filtered, sampled or stopped runs still record their per-run figures (InsightOccurrence) but do not
replace the headline of an insight whose figures come from a better run. Runs rank by

    (full, covers the newest release, created_at)

so a gate's baseline run of an old release, finishing after the release under test, no longer takes the dashboard
back to that release; an insight that no full run found keeps the best figures it has (a partial run of the newest
release before one of an older release, then the newest).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from clear.projects.models import Project
from diagnosis.models import DiagnosisRun
from traces.selectors import trace_release_newest

_CANDIDATE_RUNS = 200  # runs with insights looked at for the project's figures run, newest first


def release_newest(*, project_id: int) -> str:
    """The release whose first trace arrived last ("" when no trace names a release). First arrival, not the latest
    trace: an old release still sending traces from production is not the newest one."""
    return trace_release_newest(project_id=project_id)


@dataclass(frozen=True)
class HeadlineRanker:
    newest: str

    def covers_newest(self, run: DiagnosisRun, judged_releases: Iterable[str] | None = None) -> bool:
        if run.release:
            return run.release == self.newest
        if not self.newest:
            return True
        if judged_releases is None:  # a finished build records the releases it judged
            judged_releases = ((run.insights_summary or {}).get("judged_by_release") or {}).keys()
        return self.newest in set(judged_releases)

    def rank(self, run: DiagnosisRun, judged_releases: Iterable[str] | None = None) -> tuple:
        return run.is_full, self.covers_newest(run, judged_releases), run.created_at


def headline_ranker(*, project_id: int) -> HeadlineRanker:
    return HeadlineRanker(newest=release_newest(project_id=project_id))


def diagnosis_run_headline(*, project: Project) -> DiagnosisRun | None:
    """The run the dashboard's figures come from: the best-ranked run whose insights are built (None before any).
    A run that is not full (a CI gate's, sampled, filtered) wrote no figures (insights/detached.py), so none of
    its runs is."""
    runs = list(DiagnosisRun.objects.filter(DiagnosisRun.writes_insights_q(), project=project, insights_status="done")
                .order_by("-created_at")[:_CANDIDATE_RUNS])
    if not runs:
        return None
    ranker = headline_ranker(project_id=project.pk)
    return max(runs, key=ranker.rank)
