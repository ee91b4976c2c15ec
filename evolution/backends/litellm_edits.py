"""Search/replace edits proposed by a model: parsed, validated against the workdir, then applied all at once.

Validation happens entirely in memory (each edit sees the file as the earlier edits left it), so a batch with one bad
edit changes nothing. The problems are sentences meant for the model's repair round and for RoleResult.error: they
name the edit and the path, never quote the file.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from evolution.sandbox.files import owner_limits, written_file_read

EDIT_SCHEMA = {
    "type": "object",
    "required": ["path", "search", "replace"],
    "properties": {
        "path": {"type": "string", "minLength": 1},
        "search": {"type": "string"},
        "replace": {"type": "string"},
    },
}
EDITS_PROPERTY = {"type": "array", "items": EDIT_SCHEMA}

EDIT_INSTRUCTIONS = """\
Make your change as search/replace edits in the "edits" array of your reply. Each edit is
{"path": "<file path relative to the repository root>", "search": "<exact text>", "replace": "<new text>"}:
- "search" must be copied exactly (spaces, indentation, line breaks) from the file as shown, and must occur
  exactly once in it; include enough surrounding lines to make it unique. No line numbers.
- Edits apply in order; a later edit of the same file sees the text the earlier ones produced.
- To create a new file, give an empty "search" and the whole file as "replace".
- Paths are relative, inside the repository, never absolute, never containing "..", never under .git.
- If you cannot make the change, return no edits, status "BLOCKED" and say why in "blocker".
"""


@dataclass(frozen=True)
class SearchReplaceEdit:
    path: str
    search: str
    replace: str


@dataclass(frozen=True)
class PlannedWrite:
    target: Path
    relative: str
    content: str
    created: bool
    original: str | None = None  # the text edits_plan read (None for a new file): what a failed batch restores


def edits_parse(*, value: Any) -> tuple[list[SearchReplaceEdit], list[str]]:
    if not isinstance(value, list):
        return [], ['"edits" must be an array of {"path", "search", "replace"} objects']
    edits, problems = [], []
    for number, item in enumerate(value, start=1):
        if not isinstance(item, dict):
            problems.append(f"edit {number}: must be an object with path, search and replace")
            continue
        missing = [key for key in ("path", "search", "replace") if not isinstance(item.get(key), str)]
        if missing:
            problems.append(f"edit {number}: {', '.join(missing)} must be string(s)")
            continue
        edits.append(SearchReplaceEdit(path=item["path"], search=item["search"], replace=item["replace"]))
    return edits, problems


def _path_problem(*, workdir: Path, path: str) -> tuple[Path | None, str, str]:
    """(resolved target, normalised relative path, problem)."""
    if not path.strip():
        return None, path, "the path is empty"
    if "\x00" in path or "\\" in path:
        return None, path, "the path contains a NUL or a backslash; use forward slashes"
    pure = PurePosixPath(path)
    if pure.is_absolute() or path.startswith("~"):
        return None, path, "the path must be relative to the repository root, not absolute"
    if ".." in pure.parts:
        return None, path, 'the path must not contain ".."'
    if ".git" in pure.parts:
        return None, path, "files under .git cannot be edited"
    root = workdir.resolve()
    target = (root / pure).resolve()
    if target != root and root not in target.parents:
        return None, path, "the path leaves the repository (through a symbolic link)"
    if target == root:
        return None, path, "the path names the repository root, not a file"
    return target, target.relative_to(root).as_posix(), ""


def edits_plan(*, workdir: Path, edits: list[SearchReplaceEdit], max_file_bytes: int,
               max_files: int) -> tuple[list[PlannedWrite], list[str]]:
    """Validate every edit and compute the final content of every touched file, without writing anything."""
    contents: dict[Path, str] = {}
    originals: dict[Path, str] = {}
    relatives: dict[Path, str] = {}
    created: set[Path] = set()
    problems: list[str] = []
    for number, edit in enumerate(edits, start=1):
        target, relative, problem = _path_problem(workdir=workdir, path=edit.path)
        label = f"edit {number} ({edit.path})"
        if problem:
            problems.append(f"{label}: {problem}")
            continue
        if target not in contents:
            written = written_file_read(folder=target.parent, relative=target.name,
                                        owners=owner_limits(max_bytes=max_file_bytes))
            if written is not None:
                if written.data is None:
                    problems.append(f"{label}: the file has {written.size} bytes, over the {max_file_bytes}-byte "
                                    "limit" if written.size > max_file_bytes else f"{label}: {written.skipped}")
                    continue
                try:
                    contents[target] = originals[target] = written.data.decode("utf-8")
                except UnicodeDecodeError:
                    problems.append(f"{label}: not a UTF-8 text file")
                    continue
            elif edit.search:
                problems.append(f"{label}: the file does not exist (use an empty search to create it)")
                continue
            relatives[target] = relative
        current = contents.get(target)
        if not edit.search:
            if current is not None:
                problems.append(f"{label}: an empty search creates a new file, but this file already exists")
                continue
            new = edit.replace
            created.add(target)
        else:
            count = current.count(edit.search)
            if count == 0:
                problems.append(f"{label}: the search text does not occur in the file (copy it exactly, "
                                "whitespace included)")
                continue
            if count > 1:
                problems.append(f"{label}: the search text occurs {count} times in the file; "
                                "include more surrounding lines so that it occurs exactly once")
                continue
            new = current.replace(edit.search, edit.replace, 1)
        if len(new.encode("utf-8")) > max_file_bytes:
            problems.append(f"{label}: the result would exceed the {max_file_bytes}-byte file limit")
            continue
        contents[target] = new
    if len(relatives) > max_files:
        problems.append(f"the edits touch {len(relatives)} files, over the limit of {max_files}")
    if problems:
        return [], problems
    writes = [PlannedWrite(target=target, relative=relatives[target], content=contents[target],
                           created=target in created, original=originals.get(target)) for target in contents]
    return writes, []


def _write_atomic(target: Path, content: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = target.stat().st_mode & 0o7777 if target.exists() else None
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".edit")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            stream.write(content)
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def edits_apply(*, writes: list[PlannedWrite]) -> list[str]:
    """Write every planned file; if one write fails, restore the ones already written and re-raise."""
    done: list[tuple[PlannedWrite, str | None]] = []
    try:
        for write in writes:
            original = None if write.created else write.original
            _write_atomic(write.target, write.content)
            done.append((write, original))
    except BaseException:
        for write, original in reversed(done):
            if original is None:
                write.target.unlink(missing_ok=True)
            else:
                _write_atomic(write.target, original)
        raise
    return [write.relative for write in writes]
