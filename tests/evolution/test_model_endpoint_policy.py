"""A job's model endpoint is the one that would be called, checked by the outbound policy (issue 38): litellm's
api_base, else where litellm sends the model without one ("ollama/llama3" is a call to http://localhost:11434), the
external backend's model_url. It must be https (unless CLEAR_EVOLUTION_MODEL_ALLOW_HTTP), its host and port one of
CLEAR_EVOLUTION_MODEL_HOSTS (a host listed without a port is port 443) and its address public (unless
CLEAR_EVOLUTION_MODEL_ALLOW_PRIVATE; the metadata address never): a 400 naming backend_config.api_base, .model or
.model_url at job creation, and a failed job when a role is about to call it and it no longer passes."""

from urllib.parse import urlsplit

import pytest

from evolution.models import EvolutionJob
from tests.api.test_webhook_targets import PUBLIC, Resolver

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/evolution/jobs/"
NAME = "inside.example.test"  # resolves to 127.0.0.1 through the test resolver
LOOPBACK_HOSTS = ["127.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "2130706433", "0x7f.1", "0177.0.0.1", "169.254.169.254",
                  NAME]
LOCAL_PROVIDERS = ["ollama/llama3", "ollama_chat/llama3", "llamafile/m", "xinference/m", "lemonade/m",
                   "docker_model_runner/m"]


@pytest.fixture
def resolver(monkeypatch):
    return Resolver(monkeypatch, {NAME: ["127.0.0.1"], "api.openai.com": [PUBLIC]})


def _start(api, target, insight, backend: str, config: dict):
    return api.post(JOBS, {"target": target.pk, "insight": insight.pk, "backend": backend, "backend_config": config,
                           "confirm": True}, format="json")


def _refused(response, field: str) -> str:
    assert response.status_code == 400, response.content
    body = response.json()
    assert f"backend_config.{field}" in body["extra"]["fields"], body
    assert not EvolutionJob.objects.exists()
    return body["message"]


@pytest.mark.parametrize("host", LOOPBACK_HOSTS)
@pytest.mark.parametrize("backend", ["litellm", "external"])
def test_a_model_url_at_any_loopback_form_is_refused_even_when_listed(api, router_target, refund_insight, settings,
                                                                     resolver, backend, host):
    settings.CLEAR_EVOLUTION_MODEL_HOSTS = [host]  # the allow-list says which host, not which addresses are fine
    if backend == "litellm":
        config, field = {"model": "openai/gpt-4o-mini", "api_base": f"https://{host}/v1"}, "api_base"
    else:
        config, field = {"template": "custom", "command": "agent", "model_url": f"https://{host}"}, "model_url"
    message = _refused(_start(api, router_target, refund_insight, backend, config), field)
    assert "public address" in message


@pytest.mark.parametrize("model", LOCAL_PROVIDERS)
def test_a_local_provider_without_api_base_is_checked_as_its_default_url(api, router_target, refund_insight, model):
    message = _refused(_start(api, router_target, refund_insight, "litellm", {"model": model}), "model")
    assert "with no api_base calls http://" in message and "CLEAR_EVOLUTION_MODEL_ALLOW_HTTP" in message


def test_ollama_without_api_base_is_loopback_even_where_http_and_its_port_are_allowed(api, router_target,
                                                                                     refund_insight, settings):
    from evolution.backends.key_env import model_host_check

    settings.CLEAR_EVOLUTION_MODEL_HOSTS = ["localhost:11434"]
    settings.CLEAR_EVOLUTION_MODEL_ALLOW_HTTP = True
    message = _refused(_start(api, router_target, refund_insight, "litellm", {"model": "ollama/llama3"}), "model")
    assert "localhost resolves to a non-public address (loopback)" in message
    assert "CLEAR_EVOLUTION_MODEL_ALLOW_PRIVATE" in message
    settings.CLEAR_EVOLUTION_MODEL_ALLOW_PRIVATE = True  # an operator with a local model server
    model_host_check(backend="litellm", config={"model": "ollama/llama3"})


def test_a_provider_whose_endpoint_cannot_be_told_needs_api_base(api, router_target, refund_insight, monkeypatch):
    monkeypatch.delenv("LM_STUDIO_API_BASE", raising=False)
    message = _refused(_start(api, router_target, refund_insight, "litellm", {"model": "lm_studio/m"}), "model")
    assert "give api_base" in message


def test_the_operators_provider_variable_is_what_is_checked_and_is_not_shown(api, router_target, refund_insight,
                                                                             settings, monkeypatch):
    monkeypatch.setenv("OLLAMA_API_BASE", "https://10.20.30.40:11434")
    settings.CLEAR_EVOLUTION_MODEL_HOSTS = ["10.20.30.40:11434"]
    message = _refused(_start(api, router_target, refund_insight, "litellm", {"model": "ollama/llama3"}), "model")
    assert "OLLAMA_API_BASE" in message and "(private)" in message and "10.20.30.40" not in message


@pytest.mark.parametrize("url, allow_http, problem", [
    ("http://api.openai.com:8210/v1", False, "plain http:// is refused"),
    ("http://api.openai.com/v1", False, "plain http:// is refused"),
    ("http://api.openai.com:8210/v1", True, "api.openai.com:8210 is not a model host"),
    ("http://api.openai.com/v1", True, "api.openai.com:80 is not a model host"),
    ("https://api.openai.com:8210/v1", False, "api.openai.com:8210 is not a model host"),
])
def test_a_listed_host_is_https_on_port_443_unless_the_operator_says_otherwise(api, router_target, refund_insight,
                                                                              settings, resolver, url, allow_http,
                                                                              problem):
    settings.CLEAR_EVOLUTION_MODEL_ALLOW_HTTP = allow_http
    message = _refused(_start(api, router_target, refund_insight, "litellm",
                              {"model": "openai/gpt-4o-mini", "api_base": url}), "api_base")
    assert problem in message


def test_what_the_operator_lists_passes(settings, resolver):
    from evolution.backends.key_env import model_host_check

    for config in ({"model": "openai/gpt-4o-mini"}, {"model": "openai/gpt-4o-mini",
                                                     "api_base": "https://api.openai.com/v1"}):
        model_host_check(backend="litellm", config=config)
    settings.CLEAR_EVOLUTION_MODEL_HOSTS = ["api.openai.com:80", "api.openai.com:8210"]
    settings.CLEAR_EVOLUTION_MODEL_ALLOW_HTTP = True
    model_host_check(backend="litellm", config={"model": "m", "api_base": "http://api.openai.com/v1"})
    model_host_check(backend="external", config={"template": "custom", "model_url": "http://api.openai.com:8210"})


def test_a_job_whose_endpoint_no_longer_passes_fails_before_its_first_model_call(
        api, router_target, refund_insight, settings, fake_llm, monkeypatch, django_capture_on_commit_callbacks):
    """Checked again before each role: here the operator stops allowing private addresses after the job was saved
    (the same check catches a name that resolves elsewhere now, or a narrower host list)."""
    settings.CLEAR_EVOLUTION_BACKEND_ENV_ALLOW = [*settings.CLEAR_EVOLUTION_BACKEND_ENV_ALLOW, "FAKE_LLM_KEY"]
    monkeypatch.setenv("FAKE_LLM_KEY", "sk-fake")
    settings.CLEAR_EVOLUTION_MODEL_HOSTS = [urlsplit(fake_llm.api_base).netloc]
    settings.CLEAR_EVOLUTION_MODEL_ALLOW_HTTP = settings.CLEAR_EVOLUTION_MODEL_ALLOW_PRIVATE = True
    config = {"model": "openai/gpt-4o-mini", "api_base": fake_llm.api_base, "api_key_env": "FAKE_LLM_KEY"}
    with django_capture_on_commit_callbacks(execute=False) as queued:
        response = _start(api, router_target, refund_insight, "litellm", config)
    assert response.status_code == 201, response.content
    settings.CLEAR_EVOLUTION_MODEL_ALLOW_PRIVATE = False
    with django_capture_on_commit_callbacks(execute=True):
        for callback in queued:
            callback()
    job = EvolutionJob.objects.get()
    assert job.state == "FAILED", (job.state, job.error)
    assert "127.0.0.1 is not a public address (loopback)" in job.error, job.error
    assert [r for r in fake_llm.requests if r.get("messages")] == []  # no model call was made
