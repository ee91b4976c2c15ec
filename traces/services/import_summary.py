"""What an import did (`ImportSummary`), and its notes grouped for display or JSON (used by `import_traces`)."""

from __future__ import annotations

from dataclasses import dataclass, field

@dataclass
class ImportNote:
    """A refused request (file or line), or a partial problem inside an accepted one."""

    file: str
    line: int | None  # 1-based line of a JSONL file; None for a whole-file request
    reason: str


@dataclass
class ImportSummary:
    path: str = ""
    files: list[str] = field(default_factory=list)
    skipped_files: list[str] = field(default_factory=list)
    requests_accepted: int = 0
    requests_refused: int = 0
    spans_received: int = 0  # distinct spans in accepted requests
    spans_created: int = 0
    spans_already_present: int = 0
    spans_rejected: int = 0  # dropped for missing / invalid ids inside accepted requests
    langfuse_events_refused: int = 0
    scores: int = 0
    traces_touched: int = 0
    traces_created: int = 0
    outcome: str | None = None
    outcome_set: int = 0
    refused: list[ImportNote] = field(default_factory=list)
    warnings: list[ImportNote] = field(default_factory=list)

    @property
    def traces_already_present(self) -> int:
        return self.traces_touched - self.traces_created


def notes_grouped(notes: list[ImportNote]) -> list[tuple[str, str]]:
    """[(where, reason)] with the lines of one file that share a reason collapsed into ranges ("labels.jsonl:1-126")."""
    grouped: dict[tuple[str, str], list[int | None]] = {}
    for note in notes:
        grouped.setdefault((note.file, note.reason), []).append(note.line)
    out = []
    for (file, reason), lines in grouped.items():
        numbers = sorted(n for n in lines if n is not None)
        where = file
        if numbers:
            count = f" ({len(numbers)} lines)" if len(numbers) > 1 else ""
            where = f"{file}:{_ranges(numbers)}{count}"
        out.append((where, reason))
    return out


def _ranges(numbers: list[int]) -> str:
    parts, start, previous = [], numbers[0], numbers[0]
    for n in numbers[1:] + [None]:
        if n is not None and n == previous + 1:
            previous = n
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if n is not None:
            start = previous = n
    if len(parts) > 8:
        parts = parts[:8] + ["..."]
    return ",".join(parts)


def summary_as_dict(summary: ImportSummary) -> dict:
    return {
        "path": summary.path,
        "files": len(summary.files),
        "skipped_files": summary.skipped_files,
        "requests_accepted": summary.requests_accepted,
        "requests_refused": summary.requests_refused,
        "traces": summary.traces_touched,
        "traces_created": summary.traces_created,
        "traces_already_present": summary.traces_already_present,
        "spans": summary.spans_received,
        "spans_created": summary.spans_created,
        "spans_already_present": summary.spans_already_present,
        "spans_rejected": summary.spans_rejected,
        "langfuse_events_refused": summary.langfuse_events_refused,
        "scores": summary.scores,
        "outcome": summary.outcome,
        "outcome_set": summary.outcome_set,
        "refused": [{"where": w, "reason": r} for w, r in notes_grouped(summary.refused)],
        "warnings": [{"where": w, "reason": r} for w, r in notes_grouped(summary.warnings)],
    }


__all__ = [
    "ImportNote",
    "ImportSummary",
    "notes_grouped",
    "summary_as_dict",
]
