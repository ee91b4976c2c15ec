"""evolution.git against real repositories in temp dirs: a source repo, its mirror, worktrees and a bare remote."""

import os
import subprocess
from pathlib import Path

import pytest

from evolution.errors import GitError
from evolution.git import (
    BOT_EMAIL,
    BOT_NAME,
    FileChange,
    branch_push,
    commit_diff,
    commit_diff_stats,
    commit_export,
    repo_commit_resolve,
    repo_mirror_sync,
    worktree_add,
    worktree_commit_all,
    worktree_remove,
    worktree_reset,
    worktree_tree_hash,
)

ENV = {"PATH": os.environ["PATH"], "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
       "GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@example.com",
       "GIT_COMMITTER_NAME": "Dev", "GIT_COMMITTER_EMAIL": "dev@example.com"}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def source(tmp_path) -> Path:
    repo = tmp_path / "source"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "pkg").mkdir()
    (repo / "pkg" / "router.py").write_text("def route(x):\n    return 'billing'\n")
    (repo / "README.md").write_text("# agent\n")
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "logo.bin").write_bytes(bytes(range(256)))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    return repo


@pytest.fixture
def mirror(source, tmp_path) -> Path:
    path = tmp_path / "repos" / "target.git"
    repo_mirror_sync(source=str(source), mirror_path=path)
    return path


@pytest.fixture
def worktree(mirror, tmp_path) -> Path:
    path = tmp_path / "jobs" / "1" / "wt"
    worktree_add(mirror_path=mirror, worktree_path=path, commit=repo_commit_resolve(repo_path=mirror, ref="main"))
    yield path
    worktree_remove(mirror_path=mirror, worktree_path=path)


def test_mirror_is_cloned_once_then_fetched_with_prune(source, tmp_path):
    mirror = tmp_path / "m.git"
    repo_mirror_sync(source=str(source), mirror_path=mirror)
    first = repo_commit_resolve(repo_path=mirror, ref="main")
    assert first == git(source, "rev-parse", "HEAD")
    assert git(mirror, "rev-parse", "--is-bare-repository") == "true"

    git(source, "checkout", "-q", "-b", "feature")
    (source / "new.py").write_text("x = 1\n")
    git(source, "add", "-A")
    git(source, "commit", "-q", "-m", "feature")
    repo_mirror_sync(source=str(source), mirror_path=mirror)
    assert repo_commit_resolve(repo_path=mirror, ref="feature") == git(source, "rev-parse", "HEAD")

    git(source, "checkout", "-q", "main")
    git(source, "branch", "-q", "-D", "feature")
    repo_mirror_sync(source=str(source), mirror_path=mirror)
    with pytest.raises(GitError, match="'feature' is not a commit"):
        repo_commit_resolve(repo_path=mirror, ref="feature")


def test_a_candidate_commit_no_ref_reaches_survives_garbage_collection(mirror, tmp_path):
    """A promoted release's commit lives only in the mirror, reached by no ref; a later job is based on it."""
    path = tmp_path / "jobs" / "3" / "wt"
    worktree_add(mirror_path=mirror, worktree_path=path, commit=repo_commit_resolve(repo_path=mirror, ref="main"))
    (path / "pkg" / "router.py").write_text("def route(x):\n    return 'orders'\n")
    candidate = worktree_commit_all(worktree_path=path, message="candidate")
    worktree_remove(mirror_path=mirror, worktree_path=path)
    month_ago = os.stat(mirror).st_mtime - 30 * 86400  # older than git's default 2-week grace for loose objects
    for loose in (mirror / "objects").glob("??/*"):
        os.utime(loose, (month_ago, month_ago))
    git(mirror, "gc", "--quiet")
    assert git(mirror, "cat-file", "-t", candidate) == "commit"
    assert repo_commit_resolve(repo_path=mirror, ref=candidate) == candidate


def test_mirror_follows_a_source_that_moved(source, mirror, tmp_path):
    moved = tmp_path / "moved"
    source.rename(moved)
    (moved / "later.py").write_text("x = 2\n")
    git(moved, "add", "-A")
    git(moved, "commit", "-q", "-m", "after the move")
    repo_mirror_sync(source=str(moved), mirror_path=mirror)
    assert repo_commit_resolve(repo_path=mirror, ref="main") == git(moved, "rev-parse", "HEAD")


def test_mirror_of_a_missing_source_fails_with_gits_message(tmp_path):
    with pytest.raises(GitError, match="clone"):
        repo_mirror_sync(source=str(tmp_path / "nowhere"), mirror_path=tmp_path / "m.git")


def test_mirror_path_that_is_something_else_is_refused(source, tmp_path):
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "file").write_text("x")
    with pytest.raises(GitError, match="not a git mirror"):
        repo_mirror_sync(source=str(source), mirror_path=occupied)


def test_worktree_add_is_detached_at_the_commit_and_remove_cleans_up(mirror, tmp_path):
    base = repo_commit_resolve(repo_path=mirror, ref="main")
    path = tmp_path / "jobs" / "7" / "wt"
    worktree_add(mirror_path=mirror, worktree_path=path, commit=base)
    assert (path / "pkg" / "router.py").is_file()
    assert git(path, "rev-parse", "HEAD") == base
    assert git(path, "rev-parse", "--abbrev-ref", "HEAD") == "HEAD"  # detached
    assert str(path) in git(mirror, "worktree", "list")

    (path / "scratch.txt").write_text("untracked")
    worktree_remove(mirror_path=mirror, worktree_path=path)
    assert not path.exists()
    assert str(path) not in git(mirror, "worktree", "list")
    worktree_remove(mirror_path=mirror, worktree_path=path)  # already gone: no error


def test_worktree_remove_prunes_a_worktree_deleted_behind_gits_back(mirror, tmp_path):
    path = tmp_path / "wt"
    worktree_add(mirror_path=mirror, worktree_path=path, commit="main")
    subprocess.run(["rm", "-rf", str(path)], check=True)
    worktree_remove(mirror_path=mirror, worktree_path=path)
    assert str(path) not in git(mirror, "worktree", "list")


def test_worktree_add_refuses_a_non_empty_directory(mirror, tmp_path):
    path = tmp_path / "busy"
    path.mkdir()
    (path / "x").write_text("x")
    with pytest.raises(GitError, match="not empty"):
        worktree_add(mirror_path=mirror, worktree_path=path, commit="main")


def test_tree_hash_sees_untracked_files_and_leaves_the_index_alone(worktree):
    clean = worktree_tree_hash(worktree_path=worktree)
    assert clean == worktree_tree_hash(worktree_path=worktree)
    assert clean == git(worktree, "rev-parse", "HEAD^{tree}")

    (worktree / "debug.log").write_text("ignored by .gitignore")
    assert worktree_tree_hash(worktree_path=worktree) == clean

    (worktree / "SCRIPTED_VIOLATION.txt").write_text("untracked")
    dirty = worktree_tree_hash(worktree_path=worktree)
    assert dirty != clean
    assert git(worktree, "status", "--porcelain") == "?? SCRIPTED_VIOLATION.txt"  # still untracked, not staged

    (worktree / "SCRIPTED_VIOLATION.txt").unlink()
    assert worktree_tree_hash(worktree_path=worktree) == clean
    (worktree / "pkg" / "router.py").write_text("changed\n")
    assert worktree_tree_hash(worktree_path=worktree) not in (clean, dirty)
    assert git(worktree, "diff", "--cached", "--name-only") == ""


def test_a_redirected_dot_git_file_is_not_followed(worktree, tmp_path):
    # A candidate rewrites .git to a repo whose config runs a command whenever git reads the index.
    evil = tmp_path / "evil"
    git(tmp_path, "init", "-q", str(evil))
    marker = tmp_path / "pwned"
    git(evil, "config", "core.fsmonitor", f"touch {marker}; false")
    real = worktree_tree_hash(worktree_path=worktree)
    (worktree / ".git").write_text(f"gitdir: {evil / '.git'}\n")

    assert worktree_tree_hash(worktree_path=worktree) == real
    assert worktree_commit_all(worktree_path=worktree, message="nothing") is None
    head = repo_commit_resolve(repo_path=worktree, ref="HEAD")
    assert commit_diff_stats(repo_path=worktree, base=head, head=head) == []
    assert not marker.exists()


def test_commit_all_makes_one_bot_commit_of_every_change(worktree, mirror):
    base = git(worktree, "rev-parse", "HEAD")
    assert worktree_commit_all(worktree_path=worktree, message="no changes") is None
    assert git(worktree, "rev-parse", "HEAD") == base

    (worktree / "pkg" / "router.py").write_text("def route(x):\n    return 'refunds'\n")
    (worktree / "pkg" / "new.py").write_text("NEW = 1\n")
    (worktree / "README.md").unlink()
    sha = worktree_commit_all(worktree_path=worktree, message="evolution: fix routing\n\nEvolution-Job: 1")

    assert sha == git(worktree, "rev-parse", "HEAD")
    assert git(worktree, "rev-parse", "HEAD~1") == base
    assert git(worktree, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%s") == (
        f"{BOT_NAME} <{BOT_EMAIL}>|{BOT_NAME} <{BOT_EMAIL}>|evolution: fix routing"
    )
    assert git(worktree, "status", "--porcelain") == ""
    assert sorted(git(worktree, "show", "--name-status", "--format=", "HEAD").splitlines()) == [
        "A\tpkg/new.py", "D\tREADME.md", "M\tpkg/router.py",
    ]
    assert repo_commit_resolve(repo_path=mirror, ref=sha) == sha  # the mirror holds the objects
    assert worktree_commit_all(worktree_path=worktree, message="again") is None


def test_reset_returns_to_the_commit_and_removes_untracked_files(worktree):
    base = git(worktree, "rev-parse", "HEAD")
    (worktree / "pkg" / "router.py").write_text("broken\n")
    worktree_commit_all(worktree_path=worktree, message="candidate")
    (worktree / "pkg" / "router.py").write_text("more broken\n")
    (worktree / "untracked.py").write_text("x")
    (worktree / "build").mkdir()
    (worktree / "build" / "out.log").write_text("ignored")

    worktree_reset(worktree_path=worktree, commit=base)

    assert git(worktree, "rev-parse", "HEAD") == base
    assert (worktree / "pkg" / "router.py").read_text() == "def route(x):\n    return 'billing'\n"
    assert not (worktree / "untracked.py").exists()
    assert not (worktree / "build").exists()
    assert git(worktree, "status", "--porcelain", "--ignored") == ""


def test_diff_and_stats_between_commits(worktree, source, tmp_path):
    base = git(worktree, "rev-parse", "HEAD")
    router = "def route(x):\n    if x:\n        return 'refunds'\n    return 'billing'\n"
    (worktree / "pkg" / "router.py").write_text(router)
    (worktree / "pkg" / "new.py").write_text("A = 1\nB = 2\n")
    (worktree / "logo.bin").write_bytes(bytes(reversed(range(256))))
    (worktree / "README.md").unlink()
    head = worktree_commit_all(worktree_path=worktree, message="candidate")

    stats = commit_diff_stats(repo_path=worktree, base=base, head=head)
    assert stats == [
        FileChange(path="README.md", status="deleted", added=0, deleted=1, binary=False),
        FileChange(path="logo.bin", status="modified", added=0, deleted=0, binary=True),
        FileChange(path="pkg/new.py", status="added", added=2, deleted=0, binary=False),
        FileChange(path="pkg/router.py", status="modified", added=2, deleted=0, binary=False),
    ]
    assert commit_diff_stats(repo_path=worktree, base=base, head=base) == []

    diff = commit_diff(repo_path=worktree, base=base, head=head)
    assert "GIT binary patch" in diff
    assert "+        return 'refunds'" in diff
    # The diff replays on a plain checkout of the base: the export artifact is usable on its own.
    patch = tmp_path / "candidate.diff"
    patch.write_text(diff)
    git(source, "apply", "--check", str(patch))
    git(source, "apply", str(patch))
    assert (source / "logo.bin").read_bytes() == bytes(reversed(range(256)))
    assert commit_diff(repo_path=worktree, base=base, head=base) == ""


def test_export_writes_the_files_of_a_commit_without_git(mirror, worktree, tmp_path):
    (worktree / "pkg" / "router.py").write_text("exported\n")
    (worktree / "uncommitted.txt").write_text("x")
    head = worktree_commit_all(worktree_path=worktree, message="c")
    (worktree / "pkg" / "router.py").write_text("not committed\n")

    dest = tmp_path / "releases" / "r1"
    commit_export(repo_path=mirror, commit=head, dest=dest)

    assert (dest / "pkg" / "router.py").read_text() == "exported\n"
    assert (dest / "uncommitted.txt").read_text() == "x"
    assert not (dest / ".git").exists()
    assert sorted(p.name for p in dest.iterdir()) == [".gitignore", "README.md", "logo.bin", "pkg", "uncommitted.txt"]
    with pytest.raises(GitError, match="is not a commit"):
        commit_export(repo_path=mirror, commit="0" * 40, dest=tmp_path / "nope")


def test_branch_push_to_a_bare_remote(mirror, worktree, tmp_path):
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    (worktree / "pkg" / "router.py").write_text("pushed\n")
    head = worktree_commit_all(worktree_path=worktree, message="c")

    branch_push(repo_path=mirror, commit=head, remote_url=str(remote), branch="evo/12/3")
    assert git(remote, "rev-parse", "refs/heads/evo/12/3") == head
    assert git(remote, "show", f"{head}:pkg/router.py") == "pushed"

    (worktree / "pkg" / "router.py").write_text("other\n")
    other = worktree_commit_all(worktree_path=worktree, message="d")
    worktree_reset(worktree_path=worktree, commit=repo_commit_resolve(repo_path=mirror, ref="main"))
    (worktree / "x.py").write_text("x")
    diverged = worktree_commit_all(worktree_path=worktree, message="e")
    assert other != diverged
    with pytest.raises(GitError, match="push"):
        branch_push(repo_path=mirror, commit=diverged, remote_url=str(remote), branch="evo/12/3")
    assert git(remote, "rev-parse", "refs/heads/evo/12/3") == head
    with pytest.raises(GitError, match="not a valid branch name"):
        branch_push(repo_path=mirror, commit=head, remote_url=str(remote), branch="bad..name")


def test_push_errors_do_not_repeat_credentials(mirror, tmp_path):
    url = f"file://user:hunter2@{tmp_path}/missing.git"
    with pytest.raises(GitError) as caught:
        branch_push(repo_path=mirror, commit="main", remote_url=url, branch="evo/1/1")
    assert "hunter2" not in caught.value.message
