"""The LiteLLM patcher leaves no connection to the model server open once a role ends (issue 25, item 5).

A real OpenAI-compatible server (uvicorn under llama-cpp-python, vLLM, Ollama) keeps HTTP/1.1 connections alive,
so the fake server here does too; it counts the connections whose handler is still waiting for the next request.
"""

import json
import time
from pathlib import Path

import pytest

from evolution.backends import backend_get
from evolution.backends.base import Access, Role, RoleRequest
from tests.support.fake_llm import FakeLLMServer

LOCATOR_SCHEMA = {"type": "object", "required": ["clusters"],
                  "properties": {"clusters": {"type": "array", "minItems": 1, "items": {"type": "object"}}}}
ANSWER = json.dumps({"clusters": [{"id": "c1", "root_cause": "add() subtracts"}]})


class KeepAliveFakeLLM(FakeLLMServer):
    """The fake server speaking HTTP/1.1 with keep-alive, counting the connections it holds open."""

    def __init__(self) -> None:
        self.opened = 0
        self.open_now = 0
        super().__init__()

    def _handler_class(self):
        base = super()._handler_class()
        server = self

        class Handler(base):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server.opened += 1
                    server.open_now += 1

            def finish(self) -> None:  # runs once the client has closed its end
                with server._lock:
                    server.open_now -= 1
                super().finish()

        return Handler


@pytest.fixture
def keep_alive_llm():
    server = KeepAliveFakeLLM().start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def key_variables_allowed(settings, monkeypatch):
    settings.CLEAR_EVOLUTION_BACKEND_ENV_ALLOW = [*settings.CLEAR_EVOLUTION_BACKEND_ENV_ALLOW, "FAKE_LLM_KEY"]
    monkeypatch.setenv("FAKE_LLM_KEY", "sk-fake")


def _open_after(server: KeepAliveFakeLLM, seconds: float = 5.0) -> int:
    deadline = time.monotonic() + seconds
    while server.open_now and time.monotonic() < deadline:
        time.sleep(0.05)
    return server.open_now


@pytest.mark.parametrize("replies", [[ANSWER], ["not json at all", ANSWER], ["nope", "still not json"]],
                         ids=["one-call", "repaired", "rejected-after-repair"])
def test_a_role_closes_every_connection_it_opened(keep_alive_llm, tmp_path: Path, replies):
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    backend = backend_get(name="litellm", config={"model": "openai/gpt-4o-mini", "api_base": keep_alive_llm.api_base,
                                                   "api_key_env": "FAKE_LLM_KEY"})
    keep_alive_llm.script(*replies)
    result = backend.run_role(RoleRequest(
        role=Role.LOCATOR, iteration=1, round=0, system_prompt="You are the locator.", user_input="calc.py: add()",
        workdir=tmp_path / "repo", access=Access.READ_ONLY, output_schema=LOCATOR_SCHEMA, timeout_s=30.0,
        log_dir=tmp_path / "logs"))
    assert keep_alive_llm.call_count == len(replies) and keep_alive_llm.opened >= 1
    assert result.exit_code == (0 if replies[-1] == ANSWER else 1), result.error
    assert _open_after(keep_alive_llm) == 0, f"{keep_alive_llm.open_now} connection(s) left open"
