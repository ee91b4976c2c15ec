"""A model URL that parsers read differently (user info, a backslash) is a 400 naming the field, at job creation
through the API: `http://127.0.0.1:8210\\@api.openai.com/v1` passed the model-host check (urlsplit reads the host
as api.openai.com) and the litellm preflight's urllib then raised http.client.InvalidURL, a 500 (issue 38)."""

import pytest

from evolution.backends.litellm_patcher import LiteLLMPatcherBackend
from evolution.models import EvolutionJob

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/evolution/jobs/"


@pytest.mark.parametrize("backend, field, url", [
    ("litellm", "api_base", "http://127.0.0.1:8210\\@api.openai.com/v1"),
    ("litellm", "api_base", "https://127.0.0.1:8210@api.openai.com/v1"),
    ("litellm", "api_base", "https://user:secret@api.openai.com/v1"),
    ("external", "model_url", "http://127.0.0.1:8210\\@api.openai.com/v1"),
], ids=["backslash-userinfo", "userinfo", "user-password", "external-backslash"])
def test_a_model_url_with_user_info_or_a_backslash_is_a_400_naming_it(api, router_target, refund_insight, backend,
                                                                      field, url):
    config = {"model": "openai/gpt-4o-mini", "api_key_env": "OPENAI_API_KEY", field: url}
    if backend == "external":
        config = {"template": "custom", "command": "agent", "api_key_env": "OPENAI_API_KEY", field: url}
    response = api.post(JOBS, {"target": router_target.pk, "insight": refund_insight.pk, "backend": backend,
                               "backend_config": config, "confirm": True}, format="json")
    assert response.status_code == 400, response.content
    assert f"backend_config.{field}" in response.json()["extra"]["fields"], response.json()
    assert not EvolutionJob.objects.exists()


def test_the_preflight_reports_an_unusable_api_base_instead_of_raising():
    # The operator's `manage.py evolution_job` is not confined: its preflight must still say what is wrong.
    preflight = LiteLLMPatcherBackend(config={"model": "openai/m",
                                              "api_base": "http://127.0.0.1:8210\\@api.openai.com/v1"}).preflight()
    assert not preflight.ok and "API base" in preflight.error, preflight
