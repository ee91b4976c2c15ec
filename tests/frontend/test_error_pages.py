"""Styled error pages: 404 and 500 keep the navigation and say what to do; the traceback stays in the server log;
under /api/ the error keeps the API's JSON body."""

from __future__ import annotations

import logging

import pytest
from django.test import Client

from tests.frontend.conftest import client_for

pytestmark = pytest.mark.django_db


def _explode(*args, **kwargs):
    raise RuntimeError("the overview's query broke")


def test_404_inside_a_project_keeps_the_navigation(project, owner):
    response = client_for(owner).get(f"/p/{project.slug}/no-such-page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert 'data-testid="error-page"' in html and "Page not found" in html
    assert '<nav aria-label="Project">' in html and f'href="/p/{project.slug}/insights/"' in html
    assert f"Back to {project.name}".replace("'", "&#x27;") in html


def test_404_of_an_object_says_what_is_missing(project, owner):
    response = client_for(owner).get(f"/p/{project.slug}/insights/987654/")
    assert response.status_code == 404
    assert 'data-testid="error-detail"' in response.content.decode()


def test_404_for_an_anonymous_visitor_offers_the_login(db):
    response = Client().get("/nothing-here/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "Page not found" in html and "/login/?next=/nothing-here/" in html and "<nav" not in html


def test_500_is_a_styled_page_and_the_log_keeps_the_traceback(project, owner, monkeypatch, caplog):
    monkeypatch.setattr("frontend.views.trace_list", _explode)
    client = client_for(owner)
    client.raise_request_exception = False
    with caplog.at_level(logging.ERROR, logger="django.request"):
        response = client.get(f"/p/{project.slug}/")
    assert response.status_code == 500
    html = response.content.decode()
    assert "Something went wrong" in html and "server log" in html
    assert '<nav aria-label="Project">' in html  # the user can go on from here
    assert "the overview's query broke" not in html  # no internals on the page
    record = next(r for r in caplog.records if r.name == "django.request")
    assert record.exc_info and "the overview's query broke" in str(record.exc_info[1])


def test_500_page_renders_even_when_the_navigation_cannot(project, owner, monkeypatch):
    monkeypatch.setattr("frontend.views.trace_list", _explode)
    monkeypatch.setattr("frontend.views_errors._project", _explode)
    client = client_for(owner)
    client.raise_request_exception = False
    response = client.get(f"/p/{project.slug}/")
    assert response.status_code == 500
    assert "Something went wrong" in response.content.decode()


def test_api_errors_stay_json(project, issued_key, monkeypatch):
    client = Client(headers={"Authorization": f"Bearer {issued_key.secret}"})
    response = client.get("/api/v1/no-such-endpoint/")
    assert response.status_code == 404 and response.json()["code"] == "no_endpoint"
    monkeypatch.setattr("traces.apis.trace_list_filtered", _explode)
    client.raise_request_exception = False
    response = client.get("/api/v1/traces/")
    assert response.status_code == 500
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["code"] == "server_error"
