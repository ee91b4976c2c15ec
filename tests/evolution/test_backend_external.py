"""The external-command backend end to end with fake coding-agent CLIs (Python scripts first on PATH), run inside
the sandbox: argv and prompt, edits in the worktree, output extraction, cost and session, the cleared environment,
read-only roles, timeouts, preflight. Plus the parsers of the codex, aider and mini-swe-agent templates."""

import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from evolution.backends import backend_get
from evolution.backends.base import Access, Role, RoleRequest
from evolution.backends.external import ExternalCommandBackend
from evolution.backends.templates import TEMPLATES, Invocation
from evolution.backends.templates.output import json_output_extract
from evolution.errors import BackendError
from evolution.sandbox import IsolationLevel, sandbox_problems

IMPLEMENTER_SCHEMA = {
    "type": "object",
    "required": ["status", "summary"],
    "properties": {"status": {"type": "string", "enum": ["DONE", "BLOCKED"]}, "summary": {"type": "string"}},
}
ALLOWED_ENV = {"PATH", "HOME", "LANG", "TMPDIR", "PYTHONDONTWRITEBYTECODE", "PWD", "SHLVL", "_", "LC_CTYPE"}

# Behaves like `claude -p ... --output-format json`: edits pkg/calc.py in its cwd unless it was started read-only
# (or the prompt says WRITE_ANYWAY), then prints a result envelope carrying what it saw.
FAKE_CLAUDE = """\
import json, os, pathlib, sys, time
args = sys.argv[1:]
if args == ["--version"]:
    print("9.9.9 (Claude Code)")
    sys.exit(0)
prompt = args[args.index("-p") + 1]
system = args[args.index("--append-system-prompt") + 1]
if "SLEEP" in prompt:
    time.sleep(60)
read_only = "--disallowedTools" in args
write_error = ""
if not read_only or "WRITE_ANYWAY" in prompt:
    repo = pathlib.Path(args[args.index("--add-dir") + 1]) if read_only else pathlib.Path.cwd()
    try:
        target = repo / "pkg" / "calc.py"
        target.write_text(target.read_text().replace("a - b", "a + b"))
    except OSError as error:
        write_error = str(error)
output = {"status": "DONE", "summary": "add, not subtract", "write_error": write_error}
print(json.dumps({
    "type": "result", "subtype": "success", "is_error": False, "session_id": "sess-42",
    "result": "I changed the operator.\\n```json\\n" + json.dumps(output) + "\\n```",
    "total_cost_usd": 0.0125, "usage": {"input_tokens": 1000, "cache_read_input_tokens": 200, "output_tokens": 50},
    "modelUsage": {"claude-sonnet-test": {}},
    "seen": {"env": dict(os.environ), "argv": args, "cwd": os.getcwd(), "prompt": prompt, "system": system},
}))
"""

# A custom agent: `fake-agent --prompt FILE --out FILE --repo DIR`, edits and writes its answer to --out.
FAKE_AGENT = """\
import json, os, pathlib, sys
args = sys.argv[1:]
value = lambda flag: args[args.index(flag) + 1]
prompt = pathlib.Path(value("--prompt")).read_text()
target = pathlib.Path(value("--repo")) / "pkg" / "calc.py"
target.write_text(target.read_text().replace("a - b", "a + b"))
answer = {"status": "DONE", "summary": "custom agent fixed it", "prompt_has_schema": '"enum"' in prompt,
          "env": sorted(os.environ)}
if "--stdout" in args:
    print("thinking...\\n```json\\n" + json.dumps(answer) + "\\n```\\nbye")
else:
    pathlib.Path(value("--out")).write_text(json.dumps(answer))
"""


def _script(directory: Path, name: str, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def fake_bin(tmp_path, monkeypatch):
    directory = tmp_path / "bin"
    _script(directory, "claude", FAKE_CLAUDE)
    _script(directory, "fake-agent", FAKE_AGENT)
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")
    # Server secrets the CLI must never see, and a second provider key it does not need.
    monkeypatch.setenv("SECRET_KEY", "django-secret-must-not-leak")
    monkeypatch.setenv("DATABASE_URL", "postgres://user:pw@db/clear")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-not-needed")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    return directory


@pytest.fixture
def repo(tmp_path) -> Path:
    path = tmp_path / "repo"
    (path / "pkg").mkdir(parents=True)
    (path / "pkg" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    for argv in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"]):
        subprocess.run(["git", *argv], cwd=path, env=env, check=True)
    return path


def _request(repo: Path, tmp_path: Path, *, access=Access.READ_WRITE, role=Role.IMPLEMENTER,
             user_input="Fix add() in pkg/calc.py.", timeout_s=60.0, env=None) -> RoleRequest:
    return RoleRequest(role=role, iteration=1, round=0, system_prompt="You are the implementer.",
                       user_input=user_input, workdir=repo, access=access, output_schema=IMPLEMENTER_SCHEMA,
                       timeout_s=timeout_s, log_dir=tmp_path / "logs", env=env or {})


def _seen(result) -> dict:
    return json.loads(result.raw_output)["seen"]


def _levels():
    levels = ["subprocess"]
    if not sandbox_problems()[IsolationLevel.BWRAP]:
        levels.append("bwrap")
    return levels


@pytest.mark.parametrize("level", _levels())
def test_claude_template_edits_the_worktree_and_reports_output_cost_and_session(fake_bin, repo, tmp_path, level):
    backend = backend_get(name="external", config={"template": "claude", "sandbox_level": level, "model": "sonnet"})
    result = backend.run_role(_request(repo, tmp_path))

    assert result.error == "" and result.exit_code == 0 and not result.timed_out
    assert result.output == {"status": "DONE", "summary": "add, not subtract", "write_error": ""}
    assert (repo / "pkg" / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert result.session_id == "sess-42" and result.cost_usd == pytest.approx(0.0125)
    assert (result.tokens_in, result.tokens_out, result.model) == (1200, 50, "claude-sonnet-test")
    seen = _seen(result)
    assert Path(seen["cwd"]).resolve() == repo.resolve()
    assert seen["prompt"] == "Fix add() in pkg/calc.py."
    assert "You are the implementer." in seen["system"] and '"enum"' in seen["system"]
    assert ["--output-format", "json"] == seen["argv"][seen["argv"].index("--output-format"):][:2]
    assert ["--model", "sonnet"] == seen["argv"][seen["argv"].index("--model"):][:2]
    assert result.transcript_path.read_text() == result.raw_output
    prompt_files = list((tmp_path / "logs").glob("implementer-i1-r0.claude.prompt.md"))
    assert prompt_files and "Fix add() in pkg/calc.py." in prompt_files[0].read_text()


@pytest.mark.parametrize("level", _levels())
def test_the_cli_sees_only_its_own_api_key(fake_bin, repo, tmp_path, level):
    backend = backend_get(name="external", config={"template": "claude", "sandbox_level": level})
    env = _seen(backend.run_role(_request(repo, tmp_path)))["env"]

    assert env["ANTHROPIC_API_KEY"] == "sk-ant-test"
    for leaked in ("SECRET_KEY", "DATABASE_URL", "OPENAI_API_KEY"):
        assert leaked not in env
    proxy = {"HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy", "NODE_USE_ENV_PROXY"} if level == "bwrap" else set()
    assert set(env) - {"ANTHROPIC_API_KEY", "IS_SANDBOX"} - proxy <= ALLOWED_ENV
    if level == "bwrap":  # its one way out: the model host, through the egress proxy
        assert env["HTTPS_PROXY"].startswith("http://127.0.0.1:")
    # Claude Code refuses to skip permissions as root outside a declared sandbox.
    assert env.get("IS_SANDBOX") == ("1" if os.geteuid() == 0 else None)
    assert env["PATH"].split(":")[0] == str(fake_bin)


def test_the_api_key_can_come_from_the_request_and_a_missing_key_fails_clearly(fake_bin, repo, tmp_path,
                                                                             monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    backend = backend_get(name="external", config={"template": "claude", "sandbox_level": "subprocess"})
    missing = backend.run_role(_request(repo, tmp_path))
    assert missing.exit_code != 0 and "ANTHROPIC_API_KEY" in missing.error
    assert (repo / "pkg" / "calc.py").read_text().endswith("a - b\n")

    given = backend.run_role(_request(repo, tmp_path, env={"ANTHROPIC_API_KEY": "from-request"}))
    assert given.exit_code == 0 and _seen(given)["env"]["ANTHROPIC_API_KEY"] == "from-request"


def test_read_only_role_runs_in_scratch_with_the_repo_read_only_under_bwrap(fake_bin, repo, tmp_path):
    if sandbox_problems()[IsolationLevel.BWRAP]:
        pytest.skip(f"bubblewrap does not work here: {sandbox_problems()[IsolationLevel.BWRAP]}")
    backend = backend_get(name="external", config={"template": "claude", "sandbox_level": "bwrap"})
    result = backend.run_role(_request(repo, tmp_path, access=Access.READ_ONLY, role=Role.LOCATOR,
                                       user_input="Locate the bug. WRITE_ANYWAY"))

    assert result.exit_code == 0
    assert "Read-only file system" in result.output["write_error"]
    assert (repo / "pkg" / "calc.py").read_text().endswith("a - b\n")
    seen = _seen(result)
    assert Path(seen["cwd"]).resolve() != repo.resolve()
    assert seen["argv"][seen["argv"].index("--disallowedTools") + 1:][:2] == ["Edit", "MultiEdit"]
    assert "read-only for this role" in seen["system"]


@pytest.mark.parametrize("stdout", [False, True])
def test_custom_template_with_placeholders(fake_bin, repo, tmp_path, stdout):
    command = "fake-agent --prompt {prompt_file} --out {output_file} --repo {repo}" + (" --stdout" if stdout else "")
    backend = backend_get(name="external", config={"template": "custom", "command": command,
                                                    "api_key_env": "ANTHROPIC_API_KEY",
                                                    "sandbox_level": "subprocess"})
    result = backend.run_role(_request(repo, tmp_path))

    assert result.error == "" and result.exit_code == 0
    assert result.output["summary"] == "custom agent fixed it" and result.output["prompt_has_schema"] is True
    assert "SECRET_KEY" not in result.output["env"] and "ANTHROPIC_API_KEY" in result.output["env"]
    assert (repo / "pkg" / "calc.py").read_text().endswith("a + b\n")


def test_a_cli_printing_no_json_gives_no_output_and_says_so(tmp_path, repo, fake_bin):
    _script(fake_bin, "quiet-agent", "print('all done, no json here')\n")
    backend = backend_get(name="external", config={"template": "custom", "command": "quiet-agent",
                                                    "sandbox_level": "subprocess"})
    result = backend.run_role(_request(repo, tmp_path))
    assert result.exit_code == 0 and result.output is None
    assert "no JSON object found in the output of quiet-agent" in result.error


def test_a_failing_cli_reports_exit_code_and_stderr(tmp_path, repo, fake_bin):
    _script(fake_bin, "broken-agent", "import sys\nsys.stderr.write('model overloaded\\n')\nsys.exit(3)\n")
    backend = backend_get(name="external", config={"template": "custom", "command": "broken-agent",
                                                    "sandbox_level": "subprocess"})
    result = backend.run_role(_request(repo, tmp_path))
    assert result.exit_code == 3 and "broken-agent exited with 3: model overloaded" in result.error


def test_timeout_kills_the_cli(fake_bin, repo, tmp_path):
    backend = backend_get(name="external", config={"template": "claude", "sandbox_level": "subprocess"})
    result = backend.run_role(_request(repo, tmp_path, user_input="SLEEP please", timeout_s=1.0))
    assert result.timed_out and result.exit_code != 0 and "timed out after 1 s" in result.error


def test_cancel_stops_the_cli(fake_bin, repo, tmp_path):
    backend = backend_get(name="external", config={"template": "claude", "sandbox_level": "subprocess"})
    timer = threading.Timer(0.5, backend.cancel)
    timer.start()
    result = backend.run_role(_request(repo, tmp_path, user_input="SLEEP please", timeout_s=60.0))
    timer.join()
    assert result.error == "cancelled" and result.exit_code != 0 and not result.timed_out


def test_preflight_reports_version_and_a_missing_cli_without_raising(fake_bin, monkeypatch, tmp_path):
    ok = backend_get(name="external", config={"template": "claude"}).preflight()
    assert ok.ok and ok.version == "9.9.9 (Claude Code)" and ok.error == ""

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    for template in ("claude", "codex", "aider", "mini-swe-agent"):
        missing = backend_get(name="external", config={"template": template}).preflight()
        assert not missing.ok and "is not on PATH" in missing.error and "install" in missing.error

    _script(tmp_path / "bin2", "crashy", "import sys\nsys.exit(5)\n")
    crashing = backend_get(name="external", config={"template": "claude",
                                                    "executable": str(tmp_path / "bin2" / "crashy")}).preflight()
    assert not crashing.ok and "exited with 5" in crashing.error


@pytest.mark.parametrize("config, message", [
    ({"template": "cursor"}, "must be one of claude, codex, aider, mini-swe-agent, custom"),
    ({"template": "custom"}, "needs config 'command'"),
    ({"template": "custom", "command": "agent {nope}"}, "unknown or malformed placeholder"),
    ({"template": "claude", "timeout": -1}, "'timeout' must be a positive number"),
    ({"template": "claude", "extra_args": "--x"}, "'extra_args' must be a list of strings"),
])
def test_bad_config_is_refused_with_what_to_fix(config, message):
    with pytest.raises(BackendError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ExternalCommandBackend(config=config)


# -- the other templates, without their CLIs -------------------------------------------------------------------


def _invocation(tmp_path: Path, *, read_only=False, **overrides) -> Invocation:
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    prompt_file = tmp_path / "prompt.md"
    prompt_file.write_text("SYSTEM\n\n---\n\nFix pkg/calc.py")
    values = dict(executable="/opt/bin/cli", role="implementer", read_only=read_only, repo=tmp_path / "repo",
                  cwd=scratch if read_only else tmp_path / "repo", scratch=scratch, prompt_file=prompt_file,
                  system_prompt="SYSTEM", user_prompt="Fix pkg/calc.py", model="m-1")
    values.update(overrides)
    return Invocation(**values)


def test_codex_argv_and_jsonl_events(tmp_path, repo):
    template = TEMPLATES["codex"](config={})
    invocation = _invocation(tmp_path, resume_session_id="th-1")
    argv = template.argv(invocation)
    assert argv[:3] == ["/opt/bin/cli", "exec", "--json"] and ["-C", str(tmp_path / "repo")] == \
        argv[argv.index("-C"):][:2]
    assert argv[-3:] == ["resume", "th-1", "SYSTEM\n\n---\n\nFix pkg/calc.py"]
    events = [
        {"type": "thread.started", "thread_id": "th-2"},
        {"type": "item.completed", "item": {"type": "agent_message", "text": 'ok\n```json\n{"status": "DONE"}\n```'}},
        {"type": "turn.completed", "usage": {"input_tokens": 10, "cached_input_tokens": 0, "output_tokens": 4}},
    ]
    outcome = template.parse(stdout="noise\n" + "\n".join(json.dumps(e) for e in events), invocation=invocation)
    assert (outcome.output, outcome.session_id, outcome.tokens_in, outcome.tokens_out) == \
        ({"status": "DONE"}, "th-2", 10, 4)
    (invocation.scratch / "codex-last-message.md").write_text('{"status": "BLOCKED"}')
    assert template.parse(stdout="", invocation=invocation).output == {"status": "BLOCKED"}


def test_aider_argv_adds_named_files_and_parses_cost(tmp_path, repo):
    template = TEMPLATES["aider"](config={})
    argv = template.argv(_invocation(tmp_path))
    assert {"--message-file", "--yes-always", "--no-auto-commits", "--no-gitignore"} <= set(argv)
    assert argv[-1] == str(repo / "pkg" / "calc.py")
    read_only = template.argv(_invocation(tmp_path, read_only=True))
    assert ["--chat-mode", "ask"] == read_only[read_only.index("--chat-mode"):][:2]
    assert read_only[read_only.index("--read") + 1] == str(repo / "pkg" / "calc.py")
    stdout = ("Tokens: 1.5k sent, 200 received. Cost: $0.01 message, $0.01 session.\n"
              'Done.\n```json\n{"status": "DONE", "summary": "s"}\n```\n'
              "Tokens: 2k sent, 1k received. Cost: $0.02 message, $0.03 session.\n")
    outcome = template.parse(stdout=stdout, invocation=_invocation(tmp_path))
    assert outcome.output == {"status": "DONE", "summary": "s"}
    assert (outcome.tokens_in, outcome.tokens_out, outcome.cost_usd) == (3500, 1200, pytest.approx(0.03))


def test_mini_swe_agent_reads_its_trajectory(tmp_path):
    template = TEMPLATES["mini-swe-agent"](config={})
    invocation = _invocation(tmp_path)
    argv = template.argv(invocation)
    assert argv[:2] == ["/opt/bin/cli", "-t"] and {"-y", "--exit-immediately"} <= set(argv)
    assert argv[argv.index("-o") + 1] == str(invocation.scratch / "traj.json")
    assert template.env(invocation) == {"MSWEA_CONFIGURED": "true"}
    (invocation.scratch / "traj.json").write_text(json.dumps({
        "info": {"exit_status": "Submitted", "submission": '{"status": "DONE", "summary": "m"}',
                 "model_stats": {"instance_cost": 0.5, "api_calls": 3}},
        "messages": [{"role": "assistant", "content": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}],
    }))
    outcome = template.parse(stdout="", invocation=invocation)
    assert outcome.output == {"status": "DONE", "summary": "m"} and outcome.cost_usd == 0.5 and outcome.error == ""


def test_long_prompts_go_by_file_instead_of_argv(tmp_path):
    invocation = _invocation(tmp_path, user_prompt="x" * 200_000)
    argv = TEMPLATES["claude"](config={}).argv(invocation)
    assert argv[2] == f"Your complete instructions are in the file {invocation.prompt_file}. Read it first and " \
        "follow it."


@pytest.mark.parametrize("text, expected", [
    ('{"status": "DONE"}', {"status": "DONE"}),
    ('{"type": "result", "is_error": false, "result": "x\\n```json\\n{\\"a\\": 1}\\n```"}', {"a": 1}),
    ('{"type": "result", "structured_output": {"b": 2}, "result": "prose"}', {"b": 2}),
    ('first\n```json\n{"a": 1}\n```\nthen\n```json\n{"a": 2}\n```\n', {"a": 2}),
    ('The answer is {"outer": {"inner": 1}} as requested.', {"outer": {"inner": 1}}),
    ("no json at all {", None),
    ("", None),
])
def test_json_output_extract(text, expected):
    assert json_output_extract(textwrap.dedent(text)) == expected


# -- a whole job through the orchestrator ----------------------------------------------------------------------

# A `claude` that plays every role: it tells them apart by the system prompt and, as the implementer, fixes the
# router in its cwd.
FAKE_CLAUDE_ROLES = """\
import json, pathlib, sys
OUTPUTS, BUGGY, FIXED = json.loads({payload!r})
args = sys.argv[1:]
if args == ["--version"]:
    print("9.9.9 (Claude Code)")
    sys.exit(0)
system = args[args.index("--append-system-prompt") + 1]
role = next(name for name in OUTPUTS if system.startswith("You are the " + name + "."))
if role == "Implementer":
    target = pathlib.Path("router/agent.py")
    target.write_text(target.read_text().replace(BUGGY, FIXED))
text = "Done.\\n```json\\n" + json.dumps(OUTPUTS[role]) + "\\n```"
print(json.dumps({{"type": "result", "is_error": False, "result": text, "session_id": "s-" + role,
                  "total_cost_usd": 0.01, "usage": {{"input_tokens": 10, "output_tokens": 5}}}}))
"""


@pytest.mark.django_db
def test_a_job_with_the_external_backend_reaches_a_verdict(tmp_path, monkeypatch, project, owner, router_target,
                                                           refund_insight, django_capture_on_commit_callbacks):
    from evolution.models import Artifact, StageRun
    from evolution.services import evolution_job_start
    from evolution.services.workspace import artifact_read
    from tests.evolution.fixture_repo import BUGGY_BRANCH, FIXED_BRANCH
    from tests.evolution.support import APPROVE_CODE, APPROVE_PLAN, DONE, LOCATOR_OUTPUT, PLAN_OUTPUT

    outputs = {"Locator": LOCATOR_OUTPUT, "Planner": PLAN_OUTPUT, "Plan Reviewer": APPROVE_PLAN,
               "Code Reviewer": APPROVE_CODE, "Implementer": DONE}
    payload = json.dumps([outputs, BUGGY_BRANCH, FIXED_BRANCH])
    directory = tmp_path / "bin"
    _script(directory, "claude", FAKE_CLAUDE_ROLES.format(payload=payload))
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    with django_capture_on_commit_callbacks(execute=True):
        job = evolution_job_start(project=project, target=router_target, insight=refund_insight,
                                  backend_name="external", backend_config={"template": "claude"},
                                  created_by=owner, policy_overrides={"trials": 2})
    job.refresh_from_db()

    assert job.state == "AWAITING_CONSENT", (job.terminal_reason, job.error)
    assert job.best_iteration.verdict == "PROMOTE_ELIGIBLE"
    patch = artifact_read(artifact=Artifact.objects.get(job=job, kind="patch")).decode()
    assert '+        return "refunds"' in patch
    locate = StageRun.objects.get(job=job, stage="locate")
    assert locate.tree_hash_before == locate.tree_hash_after != ""


# Asks the model server through the base URL it was given, then tries the host's other loopback service directly and
# through the proxy: only the first may answer.
NET_AGENT = """\
import json, os, socket, urllib.request
base = os.environ["MODEL_BASE_URL"]
seen = {"base": base}
try:
    seen["model"] = urllib.request.urlopen(base + "/v1/models", timeout=5).read().decode()
except Exception as error:
    seen["model"] = f"refused: {error}"
other = int(os.environ["OTHER_PORT"])
try:
    socket.create_connection(("127.0.0.1", other), timeout=3).close()
    seen["direct"] = "connected"
except OSError as error:
    seen["direct"] = f"refused: {error}"
proxy = os.environ.get("HTTPS_PROXY", "http://127.0.0.1:1").rsplit(":", 1)
try:
    conn = socket.create_connection((proxy[0].split("//")[1], int(proxy[1])), timeout=3)
    conn.sendall(f"CONNECT 127.0.0.1:{other} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n".encode())
    seen["tunnel"] = conn.recv(100).decode().splitlines()[0]
except OSError as error:
    seen["tunnel"] = f"refused: {error}"
print("```json\\n" + json.dumps({"status": "DONE", "summary": json.dumps(seen)}) + "\\n```")
"""


def test_the_cli_reaches_its_model_host_and_nothing_else_of_the_host(fake_bin, repo, tmp_path):
    import http.server
    import socket

    if sandbox_problems()[IsolationLevel.BWRAP]:
        if os.environ.get("CI") == "true":
            pytest.fail(f"bubblewrap does not work here: {sandbox_problems()[IsolationLevel.BWRAP]}")
        pytest.skip("bubblewrap does not work here")

    class Models(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"data": ["fake-model"]}')

        def log_message(self, *args):
            pass

    model = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=model.serve_forever, daemon=True).start()
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other.listen(4)
    other.settimeout(0.5)
    _script(fake_bin, "net-agent", NET_AGENT)
    model_url = f"http://127.0.0.1:{model.server_address[1]}"
    try:
        backend = backend_get(name="external", config={
            "template": "custom", "command": "net-agent", "sandbox_level": "bwrap", "model_url": model_url,
            "env": {"MODEL_BASE_URL": model_url, "OTHER_PORT": str(other.getsockname()[1])}})
        result = backend.run_role(_request(repo, tmp_path))
        try:
            other.accept()[0].close()
            reached_other = True
        except (TimeoutError, BlockingIOError):
            reached_other = False
    finally:
        model.shutdown()
        other.close()
    assert result.exit_code == 0, result.error
    seen = json.loads(result.output["summary"])
    assert seen["model"] == '{"data": ["fake-model"]}', seen
    assert seen["base"] != model_url  # rewritten to the relay inside the sandbox
    assert seen["direct"].startswith("refused"), seen
    assert "403" in seen["tunnel"], seen
    assert not reached_other
