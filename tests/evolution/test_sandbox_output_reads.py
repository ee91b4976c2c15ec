"""Issue 37, point 3: nothing a sandboxed run wrote is read with the worker's rights.

A trial command (or a coding-agent CLI) chooses every name in the folders it may write. Before the change the worker,
as root, read them following links: `ln -s /proc/self/environ {out}/e` put the worker's SECRET_KEY and DATABASE_URL
in a downloadable trial trace, `ln -s /etc/shadow {out}/s` the host's password hashes, and a CLI's scratch dir did
the same through the role's log artifacts. First the reader (evolution/sandbox/files.py) against every planted kind
of file. Both paths replayed by a holder of a project API key against a real Celery worker and real bwrap are in
test_key_holder_attacks.py.
"""

import json
import os
import pwd
import signal
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from evolution.backends.templates import TEMPLATES
from evolution.backends.templates.base import Invocation
from evolution.sandbox.files import owner_limits, written_file_read, written_tree_read
from evolution.services.trials import _out_files
from tests.evolution.support import SECRET



def _sandbox_uid() -> int | None:
    """The uid a contained run writes as under a root worker (None when the tests do not run as root)."""
    if os.geteuid() != 0:
        return None
    name = getattr(django_settings, "CLEAR_EVOLUTION_SANDBOX_USER", "clear-sandbox")
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the tests run as root and the sandbox user {name!r} does not exist (scripts/install.sh)")
        pytest.skip(f"the sandbox user {name!r} does not exist")


@contextmanager
def _no_hang(seconds: int = 10):
    # A read that blocks on a FIFO never returns by itself: the alarm turns the hang into a failure.
    def hung(signum, frame):
        raise AssertionError(f"reading the folder blocked for {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _as_writer(path: Path, uid: int | None) -> None:
    if uid is not None:
        os.lchown(path, uid, uid)


@pytest.fixture
def planted(tmp_path, secret_file) -> Path:
    """A trial's {out} as a hostile run leaves it, plus one honest result and one nested file."""
    uid = _sandbox_uid()
    out = tmp_path / "out"
    out.mkdir()
    _as_writer(out, uid)
    (out / "secret-link").symlink_to(secret_file)
    (out / "environ").symlink_to("/proc/self/environ")
    (out / "shadow").symlink_to("/etc/shadow")
    (out / "linked-dir").symlink_to(secret_file.parent, target_is_directory=True)
    # protected_hardlinks (usually on) stops the sandbox user from linking a file it does not own; root links it
    # here to stand for a system where it is off.
    os.link(secret_file, out / "hard-link")
    os.mkfifo(out / "fifo")
    with open(out / "big", "wb") as handle:
        handle.truncate(10 * 1024**3)  # sparse: 10 GB of zeros that take no disk
    _as_writer(out / "big", uid)
    (out / "result.json").write_text('{"queue": "refunds"}')
    _as_writer(out / "result.json", uid)
    (out / "nested" / "deeper").mkdir(parents=True)
    (out / "nested" / "deeper" / "note.txt").write_text("honest note")
    for path in (out / "nested", out / "nested" / "deeper", out / "nested" / "deeper" / "note.txt"):
        _as_writer(path, uid)
    if uid is not None:
        (out / "root-owned").write_text(f"written by root: {SECRET}")
    return out


def _assert_no_secret(text: str) -> None:
    assert SECRET not in text
    assert "PATH=" not in text and "SECRET_KEY=" not in text and "DATABASE_URL=" not in text
    assert django_settings.SECRET_KEY not in text
    assert "root:" not in text


def test_the_trial_trace_lists_what_it_did_not_read_and_reads_the_rest(planted):
    started = time.monotonic()
    with _no_hang():
        files = _out_files(out=planted, level="bwrap")
    assert time.monotonic() - started < 5  # the 10 GB file was not read

    _assert_no_secret(json.dumps(files))
    assert files["secret-link"] == files["environ"] == files["shadow"] == "skipped: symbolic link"
    assert files["linked-dir"] == "skipped: symbolic link"
    assert files["hard-link"] == "skipped: hard link"
    assert files["fifo"] == "skipped: not a regular file"
    assert files["big"] == "skipped: larger than 1 MB"
    assert files["result.json"] == '{"queue": "refunds"}'
    assert files["nested/deeper/note.txt"] == "honest note"
    if os.geteuid() == 0:
        assert files["root-owned"] == "skipped: not owned by the sandbox user"
    assert not any(name.startswith("linked-dir/") and name != "linked-dir" for name in files)


def test_a_run_at_the_subprocess_level_wrote_as_the_worker(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "result.json").write_text("{}")
    assert _out_files(out=out, level="subprocess") == {"result.json": "{}"}
    assert owner_limits(level="subprocess") == {os.geteuid(): 1024 * 1024}


def test_no_component_of_a_named_file_is_followed(planted, secret_file):
    owners = owner_limits()
    through_dir = written_file_read(folder=planted, relative=f"linked-dir/{secret_file.name}", owners=owners)
    assert through_dir.data is None and through_dir.skipped == "symbolic link"
    assert written_file_read(folder=planted, relative="secret-link", owners=owners).skipped == "symbolic link"
    assert written_file_read(folder=planted, relative="missing", owners=owners) is None
    assert written_file_read(folder=planted, relative="nested/deeper/note.txt", owners=owners).data == b"honest note"
    for bad in ("../host/secret.json", "/etc/shadow", "nested/../secret-link", ""):
        with pytest.raises(ValueError):
            written_file_read(folder=planted, relative=bad, owners=owners)


def test_the_walk_is_bounded(tmp_path):
    out = tmp_path / "out"
    deep = out.joinpath(*[f"d{n}" for n in range(12)])
    deep.mkdir(parents=True)
    (deep / "bottom.txt").write_text("x")
    for n in range(50):
        (out / f"f{n:02}").write_text(str(n))
    found = written_tree_read(folder=out, owners=owner_limits())
    assert len(found) == 20 and [f.path for f in found][:2] == ["d0/d1/d2/d3/d4/d5/d6/d7/d8/", "f00"]
    assert found[0].skipped == "too many nested folders"


def test_a_cli_scratch_dir_hands_the_worker_no_host_file(tmp_path, secret_file):
    # The CLI templates read the files their CLI wrote in its scratch dir: a link to a root-only JSON file would
    # become the role's output (and its artifacts), a FIFO would block the worker.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    prompt = tmp_path / "prompt.md"
    prompt.write_text("SYSTEM")
    invocation = Invocation(executable="/usr/bin/true", role="locator", read_only=True, repo=tmp_path, cwd=scratch,
                            scratch=scratch, prompt_file=prompt, system_prompt="SYSTEM", user_prompt="")
    (scratch / "output.json").symlink_to(secret_file)
    (scratch / "codex-last-message.md").symlink_to(secret_file)
    os.mkfifo(scratch / "traj.json")
    with _no_hang():
        outcomes = [TEMPLATES[name](config={"command": "agent"}).parse(stdout="no json", invocation=invocation)
                    for name in ("custom", "codex", "mini-swe-agent")]
    for outcome in outcomes:
        assert outcome.output is None
        _assert_no_secret(json.dumps(outcome.__dict__, default=str))
    assert "skipped: not a regular file" in outcomes[2].error


def test_a_root_worker_without_its_sandbox_user_reads_no_contained_runs_files(monkeypatch):
    from evolution.errors import SandboxUnavailable
    from evolution.sandbox import files

    def unavailable():
        raise SandboxUnavailable("no sandbox user")

    monkeypatch.setattr(files, "sandbox_identity", unavailable)
    assert files.owner_limits(level="bwrap") == {}
    assert files.owner_limits() == files.owner_limits(level="subprocess") == {os.geteuid(): 1024 * 1024}


def test_the_litellm_backend_shows_the_model_no_linked_file(tmp_path, secret_file):
    # The LiteLLM backend reads the worktree in the worker itself; sandboxed runs wrote there before.
    from evolution.backends.litellm_context import repo_context_build
    from evolution.backends.litellm_edits import SearchReplaceEdit, edits_plan

    workdir = tmp_path / "wt"
    (workdir / "pkg").mkdir(parents=True)
    (workdir / "pkg" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    os.link(secret_file, workdir / "pkg" / "notes.md")
    context = repo_context_build(workdir=workdir, user_input="Fix pkg/calc.py, see pkg/notes.md", extra_ro_dirs=(),
                                 max_files=8, max_file_bytes=100_000, max_total_bytes=300_000, max_listing=400)
    _assert_no_secret(context.render())
    assert [path for path, _ in context.files] == ["pkg/calc.py"]
    assert "pkg/notes.md: not read (hard link)" in context.omitted
    writes, problems = edits_plan(workdir=workdir, edits=[SearchReplaceEdit(path="pkg/notes.md", search=SECRET,
                                                                            replace="x")],
                                  max_file_bytes=100_000, max_files=20)
    assert writes == [] and problems == ["edit 1 (pkg/notes.md): hard link"]
