"""Diagnosis data (runs, feedback, rubrics, caches in runs.py; insights in insights.py), importable from here."""

from diagnosis.models.insights import (
    Insight,
    InsightLink,
    InsightStatement,
    InsightOccurrence,
    InsightEvidence,
    InsightEvent,
)
from diagnosis.models.runs import (
    ContinuousMark,
    DiagnosisRun,
    EmbeddingCache,
    Feedback,
    FeedbackCorrection,
    JudgeCacheEntry,
    Rubric,
    RunTrace,
    all_rubrics,
)

__all__ = [
    "ContinuousMark",
    "DiagnosisRun",
    "EmbeddingCache",
    "Feedback",
    "FeedbackCorrection",
    "Insight",
    "InsightEvent",
    "InsightEvidence",
    "InsightLink",
    "InsightOccurrence",
    "InsightStatement",
    "JudgeCacheEntry",
    "Rubric",
    "RunTrace",
    "all_rubrics",
]
