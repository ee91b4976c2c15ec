from html import escape

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def _client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_anonymous_is_sent_to_login(project):
    response = Client().get(f"/p/{project.slug}/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


@pytest.mark.parametrize("who", ["owner", "teammate"])
def test_members_see_the_overview_with_next_steps(request, project, who):
    response = _client_for(request.getfixturevalue(who)).get(f"/p/{project.slug}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert escape(project.name) in html
    assert "what to do next" in html
    assert "/v1/traces" in html


@pytest.mark.parametrize("path", ["/p/{slug}/", "/p/{slug}/settings/api-keys/"])
def test_outsider_gets_404_for_another_projects_pages(project, outsider, outsider_project, path):
    client = _client_for(outsider)
    assert client.get(path.format(slug=project.slug)).status_code == 404
    assert client.post(f"/p/{project.slug}/settings/api-keys/create/").status_code == 404
    assert client.get(path.format(slug=outsider_project.slug)).status_code == 200


def test_project_switcher_lists_only_own_projects(project, outsider_project, owner):
    html = _client_for(owner).get(f"/p/{project.slug}/").content.decode()
    assert 'id="project-switcher"' in html
    assert escape(project.name) in html
    assert escape(outsider_project.name) not in html


def test_home_redirects_to_a_project(project, owner):
    response = _client_for(owner).get("/")
    assert response.status_code == 302
    assert response["Location"] == f"/p/{project.slug}/"


def test_secret_is_shown_once_on_creation(project, owner):
    client = _client_for(owner)
    client.post(f"/p/{project.slug}/settings/api-keys/create/", {"name": "ci"})
    first = client.get(f"/p/{project.slug}/settings/api-keys/").content.decode()
    assert 'data-testid="issued-secret"' in first
    second = client.get(f"/p/{project.slug}/settings/api-keys/").content.decode()
    assert 'data-testid="issued-secret"' not in second
