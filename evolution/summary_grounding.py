"""Grounding of the implementer's summary of its patch (issue 43): the text the job page shows for a candidate.

The summary is model-written, so it may only name what it was written from: the request the implementer got (the
targets, the approved plan, the rejection feedback), the files it was shown or changed, and its diff. The rules are
the judges' (clear/text_grounding.py, reused): every identifier, backticked term and "the X agent/service/…"
it names and every value it quotes occurs in that evidence. The litellm backend asks once more with the reasons
(implementer_summary_problems in its reply check); for every backend the stage then keeps a grounded summary
(`text_source: model`) or replaces an ungrounded one by the computed summary of the diff (`text_source: computed`,
`text_source_reason` saying why).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from clear.text_grounding import Evidence, grounding_evidence, grounding_problems

SUMMARY_PATH = "output.summary"
REASON_MAX_CHARS = 1000
FILE_MAX_CHARS = 200_000  # of each changed file read as evidence
MAX_FILES = 50
_FILE_HEADER = re.compile(r"^diff --git a/(.+?) b/(.+)$")


def implementer_summary_evidence(*, texts: Iterable[str]) -> Evidence:
    return grounding_evidence(texts=[str(t) for t in texts if t])


def diff_paths(*, diff: str) -> list[str]:
    return list(dict.fromkeys(m.group(2) for m in map(_FILE_HEADER.match, diff.splitlines()) if m))


def changed_file_texts(*, worktree: Path, diff: str) -> list[str]:
    """The changed files as the patch leaves them (regular files inside the worktree, each cut to FILE_MAX_CHARS):
    a summary may name what they contain beyond the diff's context lines."""
    root, texts = worktree.resolve(), []
    for relative in diff_paths(diff=diff)[:MAX_FILES]:
        target = worktree / relative
        try:
            if target.is_symlink() or not target.is_file() or not target.resolve().is_relative_to(root):
                continue
            with target.open(encoding="utf-8", errors="replace") as stream:
                texts.append(stream.read(FILE_MAX_CHARS))
        except OSError:
            continue
    return texts


def implementer_summary_problems(*, output: dict, evidence: Evidence) -> list[str]:
    """Why the reply's summary is not grounded in `evidence` (empty when it is)."""
    return grounding_problems(path=SUMMARY_PATH, text=str(output.get("summary") or ""), evidence=evidence)


def diff_summary(*, diff: str) -> str:
    """The computed summary: the files the diff changes with their added and removed lines."""
    files: dict[str, list[int]] = {}
    current: list[int] | None = None
    for line in diff.splitlines():
        header = _FILE_HEADER.match(line)
        if header:
            current = files.setdefault(header.group(2), [0, 0])
        elif current is not None and line.startswith("+") and not line.startswith("+++"):
            current[0] += 1
        elif current is not None and line.startswith("-") and not line.startswith("---"):
            current[1] += 1
    if not files:
        return "The patch changes no file."
    added, removed = sum(a for a, _ in files.values()), sum(r for _, r in files.values())
    listed = ", ".join(f"{path} (+{a} \u2212{r})" for path, (a, r) in list(files.items())[:20])
    more = f" and {len(files) - 20} more" if len(files) > 20 else ""
    return (f"Changed {len(files)} file{'s' if len(files) != 1 else ''} (+{added} \u2212{removed}): "
            f"{listed}{more}.")


def implementer_output_grounded(*, output: dict, evidence_texts: Iterable[str], diff: str) -> dict:
    """The implementer's output as the job shows it: its summary kept when grounded in the request, the changed
    files and the diff, else replaced by the diff's computed summary, with the reason."""
    evidence = implementer_summary_evidence(texts=[*evidence_texts, diff])
    problems = implementer_summary_problems(output=output, evidence=evidence)
    if not problems:
        return {**output, "text_source": "model"}
    return {**output, "summary": diff_summary(diff=diff), "text_source": "computed",
            "text_source_reason": "; ".join(problems)[:REASON_MAX_CHARS]}
