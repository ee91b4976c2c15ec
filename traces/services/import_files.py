"""Which files `import_traces` reads, and the requests in them: whole-file JSON requests, JSONL / NDJSON lines, any of
them gzip-compressed (see imports.py)."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator
from pathlib import Path

from clear.errors import ClearError

WHOLE_FILE_SUFFIXES = (".json",)
LINE_SUFFIXES = (".jsonl", ".ndjson")
IMPORTABLE_SUFFIXES = WHOLE_FILE_SUFFIXES + LINE_SUFFIXES


class ImportPathError(ClearError):
    code = "import_path"


class RequestRefused(Exception):
    """A request (file or line) that is not imported, with the reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def import_files_list(*, path: Path) -> tuple[list[Path], list[Path]]:
    """(files to read, files skipped) under `path` (a file or a folder). Raises ImportPathError."""
    if not path.exists():
        raise ImportPathError(
            f"{path} does not exist: pass a file or a folder of OTLP/JSON requests (*.json) or JSONL files (*.jsonl)."
        )
    if path.is_file():
        return [path], []
    if not path.is_dir():
        raise ImportPathError(f"{path} is neither a file nor a folder.")
    files, skipped = [], []
    for candidate in sorted(p for p in path.rglob("*") if p.is_file()):
        relative = candidate.relative_to(path)
        if any(part.startswith(".") for part in relative.parts):
            continue
        (files if _suffix(candidate) in IMPORTABLE_SUFFIXES else skipped).append(candidate)
    if not files:
        raise ImportPathError(
            f"{path} holds no *.json, *.jsonl or *.ndjson file (optionally .gz): nothing to import."
        )
    return files, skipped


def _suffix(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def _open(path: Path):
    if path.suffix.lower() == ".gz":
        return gzip.open(path, "rb")
    return path.open("rb")


def requests_read(*, path: Path, advance: Callable[[int], None]) -> Iterator[tuple[int | None, bytes | RequestRefused]]:
    """(line number or None, raw request bytes) for every request in the file; a read failure yields RequestRefused."""
    try:
        with _open(path) as handle:
            if _suffix(path) in LINE_SUFFIXES:
                yield from _lines(handle, advance)
                return
            data = handle.read()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        yield None, RequestRefused(f"cannot be read: {exc}")
        return
    advance(len(data))
    lines = [line for line in data.splitlines() if line.strip()]
    first = lines[0].strip() if lines else b""
    if len(lines) > 1 and first[:1] == b"{" and first[-1:] == b"}":
        # One compact request per line in a .json file: read it as JSONL.
        number = 0
        for number, line in enumerate(data.splitlines(), start=1):
            if line.strip():
                yield number, line
        return
    yield None, data


def _lines(handle, advance: Callable[[int], None]) -> Iterator[tuple[int, bytes]]:
    number = 0
    while True:
        try:
            line = handle.readline()
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            yield number + 1, RequestRefused(f"cannot be read: {exc}")
            return
        if not line:
            return
        number += 1
        advance(len(line))
        if line.strip():
            yield number, line


__all__ = [
    "IMPORTABLE_SUFFIXES",
    "ImportPathError",
    "RequestRefused",
    "import_files_list",
    "requests_read",
]
