import base64
import hashlib

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from clear.projects.models import ApiKey, Project
from clear.projects.services import api_key_revoke

pytestmark = pytest.mark.django_db


def _basic(public: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{public}:{secret}".encode()).decode()


def test_it_stores_only_a_hash_of_the_secret(issued_key):
    stored = ApiKey.objects.get(pk=issued_key.api_key.pk)
    values = [str(getattr(stored, field.attname)) for field in ApiKey._meta.fields]
    assert issued_key.secret not in values
    assert stored.secret_hash == hashlib.sha256(issued_key.secret.encode()).hexdigest()
    assert not any(issued_key.secret in value for value in values)


def test_it_accepts_bearer_and_basic(issued_key, project):
    client = APIClient()
    bearer = client.get("/api/v1/project/", HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")
    assert bearer.status_code == 200, bearer.content
    assert bearer.json()["name"] == project.name
    basic = client.get("/api/v1/project/", HTTP_AUTHORIZATION=_basic(issued_key.api_key.public_key, issued_key.secret))
    assert basic.status_code == 200
    assert basic.json()["slug"] == project.slug


def test_langfuse_sdk_auth_check_endpoint(issued_key, project):
    response = APIClient().get(
        "/api/public/projects", HTTP_AUTHORIZATION=_basic(issued_key.api_key.public_key, issued_key.secret)
    )
    assert response.status_code == 200
    assert response.json()["data"][0]["id"] == str(project.id)
    assert response.json()["data"][0]["name"] == project.name


@pytest.mark.parametrize(
    "authorization, code, words",
    [
        (None, "missing_credentials", "Missing API key"),
        ("Bearer sk-clear-not-a-real-key", "invalid_credentials", "secret key is not valid"),
        ("Bearer ", "malformed_credentials", "empty"),
        ("Token abc", "malformed_credentials", "Unsupported authorization scheme"),
        ("Basic !!!notbase64", "malformed_credentials", "base64"),
        ("Basic " + base64.b64encode(b"pk-only").decode(), "malformed_credentials", "secret is missing"),
    ],
)
def test_it_rejects_bad_credentials_with_a_message(issued_key, authorization, code, words):
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    response = APIClient().get("/api/v1/project/", **headers)
    assert response.status_code == 401
    body = response.json()
    assert body["code"] == code
    assert words in body["message"]
    assert set(body) == {"message", "code", "extra"}
    assert "Bearer" in response["WWW-Authenticate"]


def test_it_rejects_a_public_key_of_another_pair(issued_key, project, owner):
    from clear.projects.services import api_key_create

    other = api_key_create(project=project, created_by=owner)
    response = APIClient().get("/api/v1/project/", HTTP_AUTHORIZATION=_basic(other.api_key.public_key, issued_key.secret))
    assert response.status_code == 401
    assert "public key does not belong" in response.json()["message"]


def test_it_rejects_a_revoked_key(issued_key):
    api_key_revoke(api_key=issued_key.api_key)
    response = APIClient().get("/api/v1/project/", HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")
    assert response.status_code == 401
    assert response.json()["code"] == "revoked_credentials"


def test_create_project_command_prints_keys_once(capsys):
    import json

    call_command("create_project", "Payments agent", "--owner", "dana@example.com", "--json")
    result = json.loads(capsys.readouterr().out)
    assert result["project"] == "Payments agent"
    project = Project.objects.get(name="Payments agent")
    assert project.memberships.get().user.email == "dana@example.com"
    key = ApiKey.objects.get(project=project)
    assert key.public_key == result["public_key"]
    assert key.secret_hash == hashlib.sha256(result["secret_key"].encode()).hexdigest()
    response = APIClient().get("/api/v1/project/", HTTP_AUTHORIZATION=f"Bearer {result['secret_key']}")
    assert response.json()["name"] == "Payments agent"


def test_create_project_command_refuses_a_duplicate_name():
    from django.core.management.base import CommandError

    call_command("create_project", "Twice")
    with pytest.raises(CommandError, match="exists already"):
        call_command("create_project", "Twice")
