"""The LiteLLM patcher end to end through the fake OpenAI-compatible server: what the model is shown, edits applied to
a git worktree, read-only roles, the one repair round, edits rejected with the workdir untouched, usage and cost,
timeouts, preflight."""

import json
import os
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from clear.llm_limits import EVOLUTION_ROLE_MAX_TOKENS
from evolution.backends import backend_get
from evolution.backends.base import Access, Role, RoleRequest
from evolution.backends.litellm_patcher import LiteLLMPatcherBackend
from evolution.errors import BackendError

IMPLEMENTER_SCHEMA = {
    "type": "object",
    "required": ["status", "summary"],
    "properties": {"status": {"type": "string", "enum": ["DONE", "BLOCKED"]}, "summary": {"type": "string"},
                   "deviations": {"type": "array", "items": {"type": "string"}}, "blocker": {"type": "string"}},
}
LOCATOR_SCHEMA = {
    "type": "object",
    "required": ["clusters"],
    "properties": {"clusters": {"type": "array", "minItems": 1, "items": {
        "type": "object", "required": ["id", "root_cause"],
        "properties": {"id": {"type": "string"}, "root_cause": {"type": "string"}}}}},
}
CALC = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def _git(repo: Path, *argv: str) -> str:
    return subprocess.run(["git", *argv], cwd=repo, env=GIT_ENV, check=True, capture_output=True, text=True).stdout


@pytest.fixture(autouse=True)
def key_variables_allowed(settings):
    """The fake server's key variables are ones the operator lets backends read (see test_target_confinement.py)."""
    settings.CLEAR_EVOLUTION_BACKEND_ENV_ALLOW = [*settings.CLEAR_EVOLUTION_BACKEND_ENV_ALLOW, "FAKE_LLM_KEY",
                                                  "NO_SUCH_KEY_VAR"]


@pytest.fixture
def repo(tmp_path) -> Path:
    path = tmp_path / "repo"
    (path / "pkg").mkdir(parents=True)
    (path / "pkg" / "calc.py").write_text(CALC)
    (path / "pkg" / "__init__.py").write_text("")
    (path / "README.md").write_text("calculator\n")
    _git(path, "init", "-q")
    _git(path, "add", "-A")
    _git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    return path


@pytest.fixture
def backend(fake_llm, monkeypatch):
    return _configured(fake_llm, monkeypatch)


def _request(repo: Path, tmp_path: Path, *, role=Role.IMPLEMENTER, access=Access.READ_WRITE,
             schema=IMPLEMENTER_SCHEMA, user_input="add() in pkg/calc.py subtracts; make it add.",
             timeout_s=30.0) -> RoleRequest:
    return RoleRequest(role=role, iteration=1, round=0, system_prompt=f"You are the {role}.", user_input=user_input,
                       workdir=repo, access=access, output_schema=schema, timeout_s=timeout_s,
                       log_dir=tmp_path / "logs")


def _reply(edits, status="DONE", summary="fixed add") -> str:
    return json.dumps({"status": status, "summary": summary, "deviations": [], "blocker": "", "edits": edits})


def _snapshot(repo: Path) -> dict[str, bytes]:
    return {str(p.relative_to(repo)): p.read_bytes() for p in sorted(repo.rglob("*"))
            if p.is_file() and ".git" not in p.parts}


def test_implementer_edits_apply_to_the_worktree(backend, fake_llm, repo, tmp_path):
    fake_llm.script(_reply([
        {"path": "pkg/calc.py", "search": "def add(a, b):\n    return a - b", "replace":
         "def add(a, b):\n    return a + b"},
        {"path": "pkg/test_calc.py", "search": "", "replace": "from pkg.calc import add\n"},
    ]))
    result = backend.run_role(_request(repo, tmp_path))

    assert result.error == "" and result.exit_code == 0 and not result.timed_out
    assert result.output == {"status": "DONE", "summary": "fixed add", "deviations": [], "blocker": ""}
    assert (repo / "pkg" / "calc.py").read_text() == CALC.replace("return a - b", "return a + b", 1)
    assert _git(repo, "status", "--porcelain").splitlines() == [" M pkg/calc.py", "?? pkg/test_calc.py"]
    assert "+    return a + b" in _git(repo, "diff")
    assert result.tokens_in > 0 and result.tokens_out > 0 and result.cost_usd > 0
    assert result.model and fake_llm.call_count == 1

    sent = fake_llm.requests[0]
    # LiteLLM says gpt-4o-mini supports response schemas: structured output "auto" sends the reply's schema
    assert sent["response_format"]["type"] == "json_schema"
    assert set(sent["response_format"]["json_schema"]["schema"]["required"]) >= {"status", "edits"}
    assert sent["max_tokens"] == EVOLUTION_ROLE_MAX_TOKENS["implementer"]
    assert sent["_headers"]["authorization"] == "Bearer sk-fake"
    system, user = sent["messages"][0]["content"], sent["messages"][1]["content"]
    assert system.startswith("You are the implementer.") and '"edits"' in system and "exactly once" in system
    assert "----- BEGIN FILE pkg/calc.py -----\n" + CALC.rstrip("\n") in user
    assert "README.md" in user and ".git/" not in user  # the listing, without git internals
    log = [json.loads(line) for line in result.transcript_path.read_text().splitlines()]
    assert [entry["event"] for entry in log] == ["request", "reply", "applied", "result"]
    assert log[2]["files"] == ["pkg/calc.py", "pkg/test_calc.py"]


def test_read_only_role_returns_schema_valid_json_and_changes_nothing(backend, fake_llm, repo, tmp_path):
    before = _snapshot(repo)
    answer = {"clusters": [{"id": "c1", "root_cause": "add() uses the minus operator (pkg/calc.py:2)"}]}
    fake_llm.script(json.dumps(answer))
    result = backend.run_role(_request(repo, tmp_path, role=Role.LOCATOR, access=Access.READ_ONLY,
                                       schema=LOCATOR_SCHEMA, user_input="Tasks t1, t2 fail: sums are wrong."))

    assert result.exit_code == 0 and result.output == answer and result.error == ""
    assert _snapshot(repo) == before
    system = fake_llm.requests[0]["messages"][0]["content"]
    assert "cannot run commands" in system and '"clusters"' in system and '"edits"' not in system
    # Nothing was named, so files are chosen by the words they share with the request ("calc" is not one of them),
    # and the listing still shows the model where to look.
    assert "pkg/calc.py" in fake_llm.requests[0]["messages"][1]["content"]


def test_files_named_in_prior_artifacts_are_shown(backend, fake_llm, repo, tmp_path):
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    (artifacts / "plan.json").write_text(json.dumps({"changes": [{"file": "calc.py", "change": "use +"}]}))
    fake_llm.script(_reply([]))
    request = _request(repo, tmp_path, user_input="Implement the plan.")
    request = RoleRequest(**{**request.__dict__, "extra_ro_dirs": (artifacts,)})
    assert backend.run_role(request).exit_code == 0
    assert "----- BEGIN FILE pkg/calc.py -----" in fake_llm.requests[0]["messages"][1]["content"]


def test_malformed_json_gets_one_repair_round(backend, fake_llm, repo, tmp_path):
    fake_llm.script("Sure! Here is the fix: {edits: oops",
                    _reply([{"path": "pkg/calc.py", "search": "    return a - b\n\n\ndef sub",
                             "replace": "    return a + b\n\n\ndef sub"}]))
    result = backend.run_role(_request(repo, tmp_path))

    assert result.exit_code == 0 and result.error == ""
    assert (repo / "pkg" / "calc.py").read_text().startswith("def add(a, b):\n    return a + b")
    assert fake_llm.call_count == 2
    repair = fake_llm.requests[1]["messages"]
    assert repair[-2] == {"role": "assistant", "content": "Sure! Here is the fix: {edits: oops"}
    assert "not valid JSON" in repair[-1]["content"]
    assert result.tokens_in > fake_llm.requests[0]["messages"][1]["content"].count(" ") // 10  # both calls counted


def test_schema_errors_twice_fail_the_role(backend, fake_llm, repo, tmp_path):
    fake_llm.script(default=json.dumps({"status": "MAYBE", "edits": []}))
    result = backend.run_role(_request(repo, tmp_path))
    assert result.exit_code != 0 and result.output is None and fake_llm.call_count == 2
    assert result.error.startswith("rejected after one repair round:") and "status" in result.error
    assert "summary" in fake_llm.requests[1]["messages"][-1]["content"]


@pytest.mark.parametrize("edits, reason", [
    ([{"path": "pkg/calc.py", "search": "return a * b", "replace": "x"}], "does not occur in the file"),
    ([{"path": "pkg/calc.py", "search": "return a - b", "replace": "return a + b"}], "occurs 2 times"),
    ([{"path": "../outside.py", "search": "", "replace": "evil"}], 'must not contain ".."'),
    ([{"path": "/etc/passwd", "search": "root", "replace": "toor"}], "not absolute"),
    ([{"path": ".git/config", "search": "", "replace": "x"}], "under .git"),
    ([{"path": "pkg/missing.py", "search": "a", "replace": "b"}], "does not exist"),
    ([{"path": "README.md", "search": "", "replace": "x"}], "already exists"),
    ([{"path": "pkg/calc.py", "search": "def add(a, b):\n    return a - b",
       "replace": "def add(a, b):\n    return a + b"},
      {"path": "pkg/calc.py", "search": "nowhere", "replace": "x"}], "edit 2 (pkg/calc.py)"),
    ([{"path": "pkg/calc.py", "replace": "x"}], "output.edits[0]: 'search' is a required property"),
])
def test_edits_that_do_not_apply_are_rejected_and_nothing_is_written(backend, fake_llm, repo, tmp_path, edits,
                                                                     reason):
    before = _snapshot(repo)
    fake_llm.script(default=_reply(edits))
    result = backend.run_role(_request(repo, tmp_path))

    assert result.exit_code != 0 and reason in result.error
    assert _snapshot(repo) == before and not (tmp_path / "outside.py").exists()
    assert fake_llm.call_count == 2 and reason in fake_llm.requests[1]["messages"][-1]["content"]


def test_a_symlink_out_of_the_workdir_is_refused(backend, fake_llm, repo, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    (repo / "link.txt").symlink_to(outside)
    fake_llm.script(default=_reply([{"path": "link.txt", "search": "keep", "replace": "owned"}]))
    result = backend.run_role(_request(repo, tmp_path))
    assert result.exit_code != 0 and "leaves the repository" in result.error
    assert outside.read_text() == "keep\n"


def _configured(fake_llm, monkeypatch, **config):
    monkeypatch.setenv("FAKE_LLM_KEY", "sk-fake")
    return backend_get(name="litellm", config={"model": "openai/gpt-4o-mini", "api_base": fake_llm.api_base,
                                                "api_key_env": "FAKE_LLM_KEY", **config})


def test_file_size_limits(fake_llm, repo, tmp_path, monkeypatch):
    backend = _configured(fake_llm, monkeypatch, max_file_bytes=60)
    fake_llm.script(default=_reply([{"path": "pkg/calc.py", "search": "a - b\n\n", "replace": "a + b\n\n"}]))
    result = backend.run_role(_request(repo, tmp_path))
    assert result.exit_code != 0 and "over the 60-byte limit" in result.error
    assert "pkg/calc.py: " in fake_llm.requests[0]["messages"][1]["content"]  # listed under "Not shown"


def test_provider_errors_and_timeouts(fake_llm, repo, tmp_path, monkeypatch):
    backend = _configured(fake_llm, monkeypatch, max_retries=0)
    fake_llm.script({"status": 400, "body": {"error": {"message": "bad model", "type": "invalid_request_error"}}})
    failed = backend.run_role(_request(repo, tmp_path))
    assert failed.exit_code != 0 and "model call failed" in failed.error and not failed.timed_out

    fake_llm.script(lambda request: time.sleep(3) or _reply([]))
    slow = backend.run_role(_request(repo, tmp_path, timeout_s=0.5))
    assert slow.timed_out and slow.exit_code != 0 and "timed out" in slow.error
    assert (repo / "pkg" / "calc.py").read_text() == CALC


def test_429s_are_retried_with_waits_cut_to_the_deadline(fake_llm, repo, tmp_path, monkeypatch):
    from clear import llm

    waits: list[float] = []
    monkeypatch.setattr(llm, "sleep", waits.append)
    backend = _configured(fake_llm, monkeypatch, max_retries=2)
    fake_llm.script({"status": 429, "headers": {"Retry-After": "100"}}, default=_reply([], summary="no change"))
    result = backend.run_role(_request(repo, tmp_path, role=Role.LOCATOR, access=Access.READ_ONLY,
                                       schema=IMPLEMENTER_SCHEMA, timeout_s=20.0))
    assert result.exit_code == 0 and fake_llm.call_count == 2
    assert len(waits) == 1 and 0 < waits[0] <= 20.0  # Retry-After 100 s, cut to what is left of the role's 20 s

    fake_llm.script(default={"status": 429, "headers": {"retry-after-ms": "1"}})
    spent = backend.run_role(_request(repo, tmp_path))
    assert fake_llm.call_count == 3 and spent.exit_code != 0 and "RateLimitError" in spent.error
    assert not spent.timed_out


def test_cancel_returns_without_waiting_for_the_model(fake_llm, repo, tmp_path, monkeypatch):
    backend = _configured(fake_llm, monkeypatch)
    fake_llm.script(lambda request: time.sleep(3) or _reply([
        {"path": "pkg/calc.py", "search": "def add(a, b):\n    return a - b", "replace": "x"}]))
    timer = threading.Timer(0.3, backend.cancel)
    timer.start()
    result = backend.run_role(_request(repo, tmp_path))
    timer.join()
    assert result.error == "cancelled" and result.exit_code != 0 and not result.timed_out
    assert (repo / "pkg" / "calc.py").read_text() == CALC


def test_preflight_never_raises(fake_llm, monkeypatch):
    assert not LiteLLMPatcherBackend(config={}).preflight().ok
    assert "no model configured" in LiteLLMPatcherBackend(config={}).preflight().error

    up = LiteLLMPatcherBackend(config={"model": "openai/m", "api_base": fake_llm.api_base}).preflight()
    assert up.ok and up.version.startswith("litellm ") and fake_llm.call_count == 0  # no completion was paid for

    down = LiteLLMPatcherBackend(config={"model": "openai/m", "api_base": "http://127.0.0.1:9/v1"}).preflight()
    assert not down.ok and "does not answer" in down.error

    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    keyless = LiteLLMPatcherBackend(config={"model": "openai/m", "api_key_env": "NO_SUCH_KEY_VAR"}).preflight()
    assert not keyless.ok and "NO_SUCH_KEY_VAR" in keyless.error


def test_the_model_call_limits_default_to_the_settings_and_the_config_takes_precedence(fake_llm, repo, tmp_path,
                                                                                        monkeypatch, settings):
    from clear import llm

    monkeypatch.setattr(llm, "sleep", lambda seconds: None)
    settings.CLEAR_JUDGE_MAX_TOKENS, settings.CLEAR_JUDGE_STRUCTURED_OUTPUT = 900, "on"
    settings.CLEAR_JUDGE_MAX_RETRIES = 1
    locate = {"role": Role.LOCATOR, "access": Access.READ_ONLY, "schema": IMPLEMENTER_SCHEMA}
    defaults = _configured(fake_llm, monkeypatch, model="openai/clear-local-model")
    assert defaults.limits["max_retries"] == 1 and defaults.max_tokens_ceiling == 900
    fake_llm.script({"drop": True}, default=_reply([], summary="no change"))
    assert defaults.run_role(_request(repo, tmp_path, **locate)).exit_code == 0
    assert fake_llm.call_count == 2  # the dropped connection was retried
    sent = fake_llm.requests[-1]
    assert sent["max_tokens"] == 900  # the locator's 1024, capped by the ceiling
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["name"] == "evolution_locator"

    own = _configured(fake_llm, monkeypatch, model="openai/clear-local-model", max_tokens=3000,
                      structured_output="off", max_retries=0)
    fake_llm.script({"drop": True}, default=_reply([], summary="no change"))
    failed = own.run_role(_request(repo, tmp_path, **locate))
    assert failed.exit_code != 0 and "model call failed (connection)" in failed.error and fake_llm.call_count == 1
    fake_llm.script(default=_reply([], summary="no change"))
    assert own.run_role(_request(repo, tmp_path, **locate)).exit_code == 0
    assert fake_llm.requests[0]["max_tokens"] == 3000 and own.max_tokens_ceiling == 3000
    assert fake_llm.requests[0]["response_format"] == {"type": "json_object"}


def test_a_role_reply_cut_twice_fails_with_the_length_cause(fake_llm, repo, tmp_path, monkeypatch):
    backend = _configured(fake_llm, monkeypatch, max_tokens=500, max_tokens_ceiling=800, structured_output="off")
    fake_llm.script(default={"content": '{"status": "DO', "finish_reason": "length"})
    result = backend.run_role(_request(repo, tmp_path))
    assert result.exit_code != 0 and "invalid_output:length" in result.error
    assert [r["max_tokens"] for r in fake_llm.requests] == [500, 800]


def test_with_structured_output_a_role_asks_for_room_for_its_whole_bounded_reply(fake_llm, repo, tmp_path,
                                                                                 monkeypatch):
    backend = _configured(fake_llm, monkeypatch, max_tokens=500, max_tokens_ceiling=800, structured_output="on")
    fake_llm.script(default={"content": '{"status": "DO', "finish_reason": "length"})
    backend.run_role(_request(repo, tmp_path))
    # The bounded schema's longest reply is more than the ceiling: asked with the ceiling once, never repeated.
    assert [r["max_tokens"] for r in fake_llm.requests] == [800]


@pytest.mark.parametrize("config, message", [
    ({"max_files": 0}, "'max_files' must be a positive integer"),
    ({"temperature": "hot"}, "'temperature' must be a number"),
    ({"max_tokens": -5}, "'max_tokens' must be a positive integer"),
    ({"max_tokens_ceiling": 0}, "'max_tokens_ceiling' must be a positive integer"),
    ({"structured_output": "always"}, "structured_output='always': use auto, on, off or json_object_schema"),
])
def test_bad_config_is_refused(config, message):
    with pytest.raises(BackendError, match=message):
        LiteLLMPatcherBackend(config={"model": "openai/m", **config})


# -- a whole job through the orchestrator ----------------------------------------------------------------------


@pytest.mark.django_db
def test_a_job_with_the_litellm_backend_reaches_a_verdict(fake_llm, monkeypatch, project, owner, router_target,
                                                          refund_insight, django_capture_on_commit_callbacks,
                                                          settings):
    from evolution.models import Artifact, Iteration
    from evolution.services import evolution_job_start
    from evolution.services.workspace import artifact_read
    from tests.evolution.fixture_repo import BUGGY_BRANCH, FIXED_BRANCH
    from tests.evolution.support import APPROVE_CODE, APPROVE_PLAN, DONE, LOCATOR_OUTPUT, PLAN_OUTPUT

    outputs = {"Locator": LOCATOR_OUTPUT, "Planner": PLAN_OUTPUT, "Plan Reviewer": APPROVE_PLAN,
               "Code Reviewer": APPROVE_CODE,
               "Implementer": {**DONE, "edits": [{"path": "router/agent.py", "search": BUGGY_BRANCH,
                                                  "replace": FIXED_BRANCH}]}}

    def answer(request):
        system = request["messages"][0]["content"]
        role = next(name for name in outputs if system.startswith(f"You are the {name}."))
        return json.dumps(outputs[role])

    fake_llm.script(default=answer)
    monkeypatch.setenv("FAKE_LLM_KEY", "sk-fake")
    config = {"model": "openai/gpt-4o-mini", "api_base": fake_llm.api_base, "api_key_env": "FAKE_LLM_KEY"}
    # Not the operator's command: each role checks the model endpoint, which the operator allows here (plain http
    # on 127.0.0.1, the fake's port).
    settings.CLEAR_EVOLUTION_MODEL_HOSTS = [urlsplit(fake_llm.api_base).netloc]
    settings.CLEAR_EVOLUTION_MODEL_ALLOW_HTTP = settings.CLEAR_EVOLUTION_MODEL_ALLOW_PRIVATE = True
    with django_capture_on_commit_callbacks(execute=True):
        job = evolution_job_start(project=project, target=router_target, insight=refund_insight,
                                  backend_name="litellm", backend_config=config, created_by=owner,
                                  policy_overrides={"trials": 2})
    job.refresh_from_db()

    assert job.state == "AWAITING_CONSENT", (job.terminal_reason, job.error)
    best = job.best_iteration
    assert best.verdict == "PROMOTE_ELIGIBLE" and best.score == 1.0
    patch = artifact_read(artifact=Artifact.objects.get(job=job, kind="patch")).decode()
    assert '+    if "refund" in text or "money back" in text:' in patch and '+        return "refunds"' in patch
    implementer = [r for r in fake_llm.requests if r["messages"][0]["content"].startswith("You are the Implementer")]
    assert "----- BEGIN FILE router/agent.py -----" in implementer[0]["messages"][1]["content"]
    assert Iteration.objects.filter(job=job).count() == 1
