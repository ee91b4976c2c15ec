"""What a LiteLLM-patched role gets to see: a bounded listing of the workdir and the files the request points at.

A model called through LiteLLM cannot open files, so the backend chooses them: first every file named in the user
input or in the prior stages' artifacts (exact relative paths, path suffixes such as `agents/router.py`, or a file
name that is unique in the repository), in order of first mention; then, if room is left, files whose path shares
words with the user input. Everything is capped by count and bytes, and the prompt says what was left out.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from evolution.sandbox.files import owner_limits, written_file_read

SKIPPED_DIRS = frozenset({".git", "__pycache__", "node_modules", ".venv", "venv", ".mypy_cache", ".pytest_cache",
                          ".tox", ".ruff_cache", "dist", "build", ".idea", ".vscode"})
ARTIFACT_SUFFIXES = frozenset({".json", ".md", ".txt", ".jsonl", ".diff", ".patch"})
ARTIFACT_MAX_BYTES = 200_000
ARTIFACT_MAX_FILES = 50
_PATH_TOKEN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*\.[A-Za-z0-9_]+")
_WORD = re.compile(r"[a-z][a-z0-9]{3,}")


@dataclass
class RepoContext:
    listing: list[str]
    listing_total: int
    files: list[tuple[str, str]] = field(default_factory=list)  # (relative path, text)
    omitted: list[str] = field(default_factory=list)  # why mentioned files were left out

    def render(self) -> str:
        lines = [f"## Repository files ({len(self.listing)} of {self.listing_total} listed)", *self.listing]
        if self.files:
            lines += ["", "## File contents (exactly as on disk)"]
            for path, text in self.files:
                lines += [f"----- BEGIN FILE {path} -----", text.rstrip("\n"), f"----- END FILE {path} -----"]
        if self.omitted:
            lines += ["", "## Not shown", *(f"- {reason}" for reason in self.omitted)]
        return "\n".join(lines)


def repo_listing(*, workdir: Path) -> list[str]:
    """Every regular file under workdir (relative, sorted), skipping VCS, caches and virtualenvs."""
    found = []
    for current, dirs, files in os.walk(workdir):
        dirs[:] = sorted(name for name in dirs if name not in SKIPPED_DIRS and not name.endswith(".egg-info"))
        base = Path(current)
        for name in files:
            path = base / name
            if path.is_file() and not path.is_symlink():
                found.append(path.relative_to(workdir).as_posix())
    return sorted(found)


def artifact_texts(*, dirs: tuple[Path, ...]) -> list[str]:
    texts = []
    for directory in dirs:
        if not directory.is_dir():
            continue
        for path in sorted(directory.rglob("*"))[:ARTIFACT_MAX_FILES]:
            if path.is_file() and path.suffix in ARTIFACT_SUFFIXES:
                with path.open("rb") as stream:
                    texts.append(stream.read(ARTIFACT_MAX_BYTES).decode("utf-8", errors="replace"))
    return texts


def _candidates(token: str, listing: list[str], listed: set[str], by_name: dict[str, list[str]]) -> list[str]:
    if token in listed:
        return [token]
    if "/" in token:
        return [path for path in listing if path.endswith("/" + token)]
    matches = by_name.get(token, [])
    return matches if len(matches) == 1 else []


def mentioned_paths(*, texts: list[str], listing: list[str]) -> list[str]:
    """Listed files the texts name, in order of first mention."""
    listed = set(listing)
    by_name: dict[str, list[str]] = {}
    for path in listing:
        by_name.setdefault(path.rsplit("/", 1)[-1], []).append(path)
    found: list[str] = []
    for text in texts:
        for token in _PATH_TOKEN.findall(text):
            candidates = _candidates(token.removeprefix("./"), listing, listed, by_name)
            if not candidates and token.startswith(("a/", "b/")):  # unified-diff headers
                candidates = _candidates(token[2:], listing, listed, by_name)
            for path in candidates[:3]:
                if path not in found:
                    found.append(path)
    return found


def related_paths(*, text: str, listing: list[str], exclude: list[str]) -> list[str]:
    """Source files whose path shares words with the text, best first (a fallback when nothing is named)."""
    words = set(_WORD.findall(text.lower()))
    scored = []
    for path in listing:
        if path in exclude or not path.endswith((".py", ".js", ".ts", ".go", ".rs", ".java", ".rb", ".md", ".toml",
                                                 ".yaml", ".yml", ".json", ".cfg", ".ini")):
            continue
        parts = set(_WORD.findall(path.lower()))
        score = len(words & parts)
        if score:
            scored.append((-score, path.count("/"), path))
    return [path for _, _, path in sorted(scored)]


def repo_context_build(*, workdir: Path, user_input: str, extra_ro_dirs: tuple[Path, ...], max_files: int,
                       max_file_bytes: int, max_total_bytes: int, max_listing: int) -> RepoContext:
    listing = repo_listing(workdir=workdir)
    context = RepoContext(listing=listing[:max_listing], listing_total=len(listing))
    named = mentioned_paths(texts=[user_input, *artifact_texts(dirs=extra_ro_dirs)], listing=listing)
    candidates = named + related_paths(text=user_input, listing=listing, exclude=named)
    total = 0
    # Git checked the worktree out, but earlier runs in the sandbox wrote there too: nothing is followed as a link.
    owners = owner_limits(max_bytes=max_file_bytes)
    for path in candidates:
        if len(context.files) >= max_files:
            if path in named:
                context.omitted.append(f"{path}: over the limit of {max_files} files")
            continue
        written = written_file_read(folder=workdir, relative=path, owners=owners)
        if written is None or written.data is None:
            if written is not None and path in named:
                context.omitted.append(
                    f"{path}: {written.size} bytes, over the {max_file_bytes}-byte file limit"
                    if written.size > max_file_bytes else f"{path}: not read ({written.skipped})")
            continue
        size = len(written.data)
        if total + size > max_total_bytes:
            if path in named:
                context.omitted.append(f"{path}: the prompt's {max_total_bytes}-byte budget is used up")
            continue
        try:
            text = written.data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        context.files.append((path, text))
        total += size
    return context
