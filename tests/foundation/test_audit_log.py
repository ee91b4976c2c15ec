"""Issue 23: the audit trail (key creation and revocation, logins, failed logins, throttling) and the owners' Settings →
Audit log page."""

import base64
from datetime import timedelta
from html import escape
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from clear.projects.models import AuditEvent
from clear.projects.selectors import audit_event_list
from clear.projects.services import (
    api_key_create,
    api_key_revoke,
    audit_event_record,
    membership_add,
    user_get_or_create,
)

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"
STRANGER = "203.0.113.66"
Kind = AuditEvent.Kind


def _client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _kinds(**filters) -> list[str]:
    return list(AuditEvent.objects.filter(**filters).order_by("pk").values_list("kind", flat=True))


def test_key_creation_and_revocation_through_the_ui_are_recorded(project, owner):
    client = _client_for(owner)
    client.post(f"/p/{project.slug}/settings/api-keys/create/", {"name": "ci"}, REMOTE_ADDR="198.51.100.9")
    key = project.api_keys.get(name="ci")
    client.post(f"/p/{project.slug}/settings/api-keys/{key.pk}/revoke/", REMOTE_ADDR="198.51.100.9")
    created, revoked = AuditEvent.objects.filter(project=project).order_by("pk")
    assert (created.kind, created.user, created.address) == (Kind.API_KEY_CREATED, owner, "198.51.100.9")
    assert created.detail == {"public_key": key.public_key, "name": "ci"}
    assert (revoked.kind, revoked.user, revoked.detail["public_key"]) == (Kind.API_KEY_REVOKED, owner, key.public_key)


def test_revoking_twice_is_one_event_and_the_command_records_its_key(project, owner):
    issued = api_key_create(project=project, name="robot")  # as `manage.py create_project` does: no user, no address
    api_key_revoke(api_key=issued.api_key, revoked_by=owner)
    api_key_revoke(api_key=issued.api_key, revoked_by=owner)
    assert _kinds(project=project) == [Kind.API_KEY_CREATED, Kind.API_KEY_REVOKED]
    assert AuditEvent.objects.get(kind=Kind.API_KEY_CREATED).address is None


def test_logins_and_failed_logins_are_recorded(owner):
    Client().post("/login/", {"username": owner.email, "password": "wrong"}, REMOTE_ADDR=STRANGER)
    Client().post("/login/", {"username": owner.email, "password": PASSWORD}, REMOTE_ADDR="198.51.100.20")
    failed, login = AuditEvent.objects.filter(user=owner).order_by("pk")
    assert (failed.kind, failed.address, failed.project) == (Kind.LOGIN_FAILED, STRANGER, None)
    assert (login.kind, login.address) == (Kind.LOGIN, "198.51.100.20")


def test_an_unknown_account_leaves_a_log_line_not_a_row(db, caplog):
    caplog.set_level("INFO", logger="clear.auth")
    Client().post("/login/", {"username": "my-password-typed-here", "password": "x"}, REMOTE_ADDR=STRANGER)
    assert not AuditEvent.objects.exists()
    messages = " ".join(record.getMessage() for record in caplog.records if record.name == "clear.auth")
    assert "login failed from 203.0.113.66 for an unknown account" in messages
    assert "my-password-typed-here" not in messages


def test_throttling_is_recorded_once_per_window(owner):
    for _ in range(10):
        Client().post("/login/", {"username": owner.email, "password": "wrong"}, REMOTE_ADDR=STRANGER)
    for _ in range(3):
        assert Client().post("/login/", {"username": owner.email, "password": PASSWORD},
                             REMOTE_ADDR=STRANGER).status_code == 429
    assert _kinds(user=owner) == [Kind.LOGIN_FAILED] * 10 + [Kind.LOGIN_THROTTLED]
    throttled = AuditEvent.objects.get(kind=Kind.LOGIN_THROTTLED)
    assert throttled.detail["per"] == "address" and 800 < throttled.detail["retry_after"] <= 900


def test_wrong_secrets_for_a_known_public_key_are_recorded_in_its_project(issued_key, project):
    public = issued_key.api_key.public_key
    for n in range(11):
        basic = "Basic " + base64.b64encode(f"{public}:sk-clear-guess{n}".encode()).decode()
        APIClient().get("/api/v1/project/", HTTP_AUTHORIZATION=basic, REMOTE_ADDR=STRANGER)
    kinds = _kinds(project=project)
    assert kinds == [Kind.API_KEY_CREATED] + [Kind.API_KEY_FAILED] * 10 + [Kind.API_KEY_THROTTLED]
    assert AuditEvent.objects.filter(kind=Kind.API_KEY_THROTTLED, address=STRANGER,
                                     detail__public_key=public).exists()


def test_bearer_guesses_name_no_project(issued_key, project):
    for n in range(11):
        APIClient().get("/api/v1/project/", HTTP_AUTHORIZATION=f"Bearer sk-clear-guess{n}", REMOTE_ADDR=STRANGER)
    assert _kinds() == [Kind.API_KEY_CREATED]  # the issued key's; guesses are log lines


# --- Which events a project shows ------------------------------------------------------------------------------------

def test_a_project_shows_its_events_and_its_members_logins_since_they_joined(project, owner, teammate,
                                                                                 outsider, outsider_project):
    api_key_create(project=project, name="ours", created_by=owner)
    api_key_create(project=outsider_project, name="theirs", created_by=outsider)
    newcomer, _ = user_get_or_create(email="dana@example.com", password=PASSWORD)
    before = audit_event_record(kind=Kind.LOGIN, user=newcomer, address=STRANGER)
    before.created_at = timezone.now() - timedelta(days=1)
    before.save(update_fields=["created_at"])
    membership_add(project=project, user=newcomer)
    after = audit_event_record(kind=Kind.LOGIN_FAILED, user=newcomer, address=STRANGER)
    teammate_login = audit_event_record(kind=Kind.LOGIN, user=teammate, address=STRANGER)
    outsider_login = audit_event_record(kind=Kind.LOGIN, user=outsider, address=STRANGER)

    ours = list(audit_event_list(project=project))
    assert [event.kind for event in ours][:3] == [Kind.LOGIN, Kind.LOGIN_FAILED, Kind.API_KEY_CREATED]
    assert teammate_login in ours and after in ours
    assert before not in ours and outsider_login not in ours
    assert all(event.detail.get("name") != "theirs" for event in ours)
    assert outsider_login in audit_event_list(project=outsider_project)


def test_the_owner_sees_the_audit_log(project, owner, teammate):
    Client().post("/login/", {"username": teammate.email, "password": "wrong"}, REMOTE_ADDR=STRANGER)
    api_key_create(project=project, name="ci <prod>", created_by=owner, address="198.51.100.9")
    client = _client_for(owner)
    settings_page = client.get(f"/p/{project.slug}/settings/api-keys/").content.decode()
    assert f"/p/{project.slug}/settings/audit-log/" in settings_page
    response = client.get(f"/p/{project.slug}/settings/audit-log/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-testid="audit-table"' in html
    assert html.index("API key created") < html.index("Failed login")  # newest first
    assert escape("“ci <prod>”") in html and "198.51.100.9" in html and STRANGER in html
    assert teammate.email in html
    template = (Path(__file__).parents[2] / "frontend/templates/frontend/audit_log.html").read_text()
    assert "<script" not in template and "style=" not in template  # the coming CSP allows no inline code or style


def test_members_get_403_and_outsiders_404(project, teammate, outsider, outsider_project):
    member = _client_for(teammate)
    assert member.get(f"/p/{project.slug}/settings/audit-log/").status_code == 403
    assert f"/p/{project.slug}/settings/audit-log/" not in member.get(
        f"/p/{project.slug}/settings/api-keys/").content.decode()
    assert _client_for(outsider).get(f"/p/{project.slug}/settings/audit-log/").status_code == 404
    assert Client().get(f"/p/{project.slug}/settings/audit-log/").status_code == 302  # to the login page


def test_the_audit_log_pages(project, owner):
    for n in range(55):
        audit_event_record(kind=Kind.API_KEY_CREATED, project=project, user=owner, detail={"name": f"key {n:02d}"})
    client = _client_for(owner)
    first = client.get(f"/p/{project.slug}/settings/audit-log/").content.decode()
    assert first.count("<tr data-kind=") == 50
    assert "key 54" in first and "key 04" not in first
    next_url = first.split('rel="next"', 1)[0].rsplit('href="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
    second = client.get(f"/p/{project.slug}/settings/audit-log/{next_url}").content.decode()
    assert second.count("<tr data-kind=") == 5 and "key 04" in second and "key 00" in second
