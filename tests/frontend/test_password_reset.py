"""Password reset by e-mail (frontend/views_password.py): the login page's "Forgot your password?" → the address →
the mail's one-time link → a new password. Pages through the test client, then the whole walk in headless Chromium
against the live server, with the mail read from the locmem outbox (the live server runs in this process)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.cache import caches
from django.test import Client

from tests.frontend.support import PASSWORD, Checker, axe_violations, describe, login
from tests.support.browser import CspWatch, screenshot

ROOT = Path(settings.BASE_DIR)
NEW_PASSWORD = "a new and better passphrase 42"
LINK = re.compile(r"(https?://\S+/password-reset/[^/\s]+/[^/\s]+/)")


@pytest.fixture
def reset_counter(owner):
    """The account's reset-mail count starts at zero (it lives in the throttle cache, which outlives a test)."""
    cache = caches[settings.CLEAR_API_THROTTLE_CACHE]
    cache.delete(f"password_reset_mail_{owner.pk}")
    yield
    cache.delete(f"password_reset_mail_{owner.pk}")


def _request_reset(client: Client, email: str, **extra):
    return client.post("/password-reset/", {"email": email}, **extra)


def _link(message) -> str:
    match = LINK.search(message.body)
    assert match, message.body
    return match.group(1)


@pytest.mark.django_db
def test_the_login_page_links_to_the_reset_form(client):
    html = client.get("/login/").content.decode()
    assert 'href="/password-reset/"' in html and "Forgot your password?" in html
    page = client.get("/password-reset/").content.decode()
    assert "<title>Reset your password · Clear</title>" in page
    assert '<label for="id_email">E-mail</label>' in page and '<main class="centered" id="main">' in page


@pytest.mark.django_db
def test_a_known_address_gets_a_mail_with_an_absolute_one_time_link(client, owner, reset_counter):
    response = _request_reset(client, "Alice@Example.com")  # the address as typed, any case
    assert response.status_code == 302 and response["Location"] == "/password-reset/sent/"
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["alice@example.com"] and message.subject == "Reset your Clear password"
    assert message.from_email == settings.DEFAULT_FROM_EMAIL
    link = _link(message)
    assert link.startswith("http://testserver/password-reset/"), link  # the request's own address
    assert "within 24 hours" in message.body

    # The link: the token moves into the session, the form sets the password, the link is spent.
    response = client.get(link)
    assert response.status_code == 302 and response["Location"].endswith("/set-password/")
    form_page = client.get(response["Location"])
    assert "Choose a new password" in form_page.content.decode()
    response = client.post(response["Location"], {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD})
    assert response.status_code == 302 and response["Location"] == "/password-reset/complete/"
    owner.refresh_from_db()
    assert owner.check_password(NEW_PASSWORD) and not owner.check_password(PASSWORD)
    again = Client().get(link, follow=True).content.decode()
    assert 'data-testid="password-reset-invalid"' in again


@pytest.mark.django_db
def test_an_unknown_address_gets_the_same_page_and_no_mail(client, owner, reset_counter):
    known = _request_reset(client, "alice@example.com")
    unknown = _request_reset(Client(), "nobody@example.com")
    assert (unknown.status_code, unknown["Location"]) == (known.status_code, known["Location"])
    known_page = client.get(known["Location"]).content.decode()
    unknown_page = Client().get(unknown["Location"]).content.decode()
    strip = re.compile(r'name="csrfmiddlewaretoken" value="[^"]*"')
    assert strip.sub("", known_page) == strip.sub("", unknown_page)
    assert [m.to for m in mail.outbox] == [["alice@example.com"]]


@pytest.mark.django_db
def test_the_link_starts_with_clear_public_url_when_it_is_set(client, owner, settings, reset_counter):
    settings.CLEAR_PUBLIC_URL = "https://clear.example.com/"
    _request_reset(client, "alice@example.com")
    assert _link(mail.outbox[0]).startswith("https://clear.example.com/password-reset/")


@pytest.mark.django_db
def test_behind_a_tls_proxy_the_link_is_https_on_the_requests_host(client, owner, settings, reset_counter):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.ALLOWED_HOSTS = ["clear.example.com"]
    _request_reset(client, "alice@example.com", HTTP_HOST="clear.example.com", HTTP_X_FORWARDED_PROTO="https")
    assert _link(mail.outbox[0]).startswith("https://clear.example.com/password-reset/")


@pytest.mark.django_db
def test_a_forged_host_sends_no_mail(client, owner, settings, reset_counter):
    settings.ALLOWED_HOSTS = ["clear.example.com"]
    response = _request_reset(client, "alice@example.com", HTTP_HOST="evil.example.net")
    assert response.status_code == 400 and mail.outbox == []


@pytest.mark.django_db
def test_an_account_gets_at_most_the_rate_of_mails_and_the_page_does_not_tell(client, owner, settings,
                                                                               reset_counter):
    settings.CLEAR_PASSWORD_RESET_RATE = "2/h"
    responses = [_request_reset(client, "alice@example.com") for _ in range(4)]
    assert {(r.status_code, r["Location"]) for r in responses} == {(302, "/password-reset/sent/")}
    assert len(mail.outbox) == 2
    owner.refresh_from_db()
    assert owner.check_password(PASSWORD)  # asking for resets changes nothing: no lock-out


@pytest.mark.django_db
def test_a_mismatched_new_password_is_refused_with_the_reason(client, owner, reset_counter):
    _request_reset(client, "alice@example.com")
    form_url = client.get(_link(mail.outbox[0]))["Location"]
    response = client.post(form_url, {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD + "x"})
    html = response.content.decode()
    assert response.status_code == 200 and 'data-testid="password-error"' in html and 'aria-invalid="true"' in html
    owner.refresh_from_db()
    assert owner.check_password(PASSWORD)


@pytest.mark.django_db
def test_a_logged_in_user_sees_the_pages_in_the_layout(owner, project):
    client = Client()
    client.force_login(owner)
    html = client.get("/password-reset/").content.decode()
    assert '<main class="content" id="main">' in html and 'id="id_email"' in html


def test_mail_settings_come_from_the_environment_and_secret_files(tmp_path):
    secret = tmp_path / "smtp-password"
    secret.write_text("from-a-file\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMAIL_")}
    env.update(DJANGO_SETTINGS_MODULE="clear.settings.base", DEBUG="0", SECRET_KEY="s" * 50,
               EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend", EMAIL_HOST="smtp.example.com",
               EMAIL_PORT="587", EMAIL_HOST_USER="clear", EMAIL_HOST_PASSWORD_FILE=str(secret), EMAIL_USE_TLS="1",
               DEFAULT_FROM_EMAIL="Clear <clear@example.com>")
    code = ("import django; django.setup(); from django.conf import settings as s; "
            "print(s.EMAIL_BACKEND, s.EMAIL_HOST, s.EMAIL_PORT, s.EMAIL_HOST_USER, s.EMAIL_HOST_PASSWORD, "
            "s.EMAIL_USE_TLS, s.DEFAULT_FROM_EMAIL, sep='|')")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.stdout.strip() == ("django.core.mail.backends.smtp.EmailBackend|smtp.example.com|587|clear|"
                                     "from-a-file|True|Clear <clear@example.com>"), result.stderr
    unset = {k: v for k, v in env.items() if not k.startswith("EMAIL_")}
    default = subprocess.run([sys.executable, "-c", "import django; django.setup(); from django.conf import "
                              "settings as s; print(s.EMAIL_BACKEND)"], cwd=ROOT, env=unset, capture_output=True,
                             text=True, timeout=60)
    assert default.stdout.strip() == "django.core.mail.backends.console.EmailBackend", default.stderr


# ---- in the browser ----------------------------------------------------------------------------------------------


def _check_anonymous_page(page, axe_path, name: str, problems: list[str]) -> None:
    """The shared checks (tests/frontend/support.py's Checker) of a page without the navigation, as the login page: a
    title, one <main>, one <h1>, every field labelled, no serious or critical axe violation, a strict
    Content-Security-Policy and no violation of it; a screenshot in var/screenshots/."""
    assert page.title().endswith("· Clear"), page.title()
    assert page.locator("main").count() == 1 and page.locator("h1").count() == 1, name
    for field in page.locator("input:not([type=hidden]):not([hidden])").all():
        assert page.locator(f"label[for={field.get_attribute('id')}]").count() == 1, name
    violations = axe_violations(page, axe_path)
    screenshot(page, name)
    if violations:
        problems.append(f"{name}:\n{describe(violations)}")
    csp = CspWatch.of(page)
    header = csp.header_problem(page)
    if header:
        problems.append(f"{name}: {header}")
    refused = csp.take()
    if refused:
        problems.append(f"{name}: Content-Security-Policy violations:\n    " + "\n    ".join(refused))


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_password_reset_in_the_browser(live_server, page, project, owner, axe_path, reset_counter):
    problems: list[str] = []
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    page.goto(live_server.url + "/login/")
    page.click("text=Forgot your password?")
    page.wait_for_selector("#id_email")
    assert page.url == live_server.url + "/password-reset/"
    _check_anonymous_page(page, axe_path, "password-reset-01-request", problems)

    page.fill("#id_email", "alice@example.com")
    page.click("button[type=submit]")
    page.wait_for_selector("[data-testid=password-reset-sent]")
    assert page.title() == "Check your mail · Clear"
    _check_anonymous_page(page, axe_path, "password-reset-02-sent", problems)

    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["alice@example.com"]
    link = _link(mail.outbox[0])
    assert link.startswith(live_server.url + "/password-reset/"), link  # the address the browser used

    page.goto(link)
    page.wait_for_selector("#id_new_password1")
    assert "/set-password/" in page.url  # the token left the address bar (and so any Referer)
    _check_anonymous_page(page, axe_path, "password-reset-03-new-password", problems)
    page.fill("#id_new_password1", NEW_PASSWORD)
    page.fill("#id_new_password2", NEW_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("[data-testid=password-reset-complete]")
    _check_anonymous_page(page, axe_path, "password-reset-04-complete", problems)

    # The old password no longer works...
    login(page, live_server.url)
    assert "/login/" in page.url and page.locator(".flash.error").count() == 1
    # ...the new one does, and lands on the overview.
    page.fill("#id_username", "alice@example.com")
    page.fill("#id_password", NEW_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/p/{project.slug}/")
    assert "what to do next" in page.content()
    check = Checker(page, axe_path)
    check("password-reset-05-overview")
    check.assert_clean()

    # The spent link says so.
    page.goto(link)
    page.wait_for_selector("[data-testid=password-reset-invalid]")
    assert get_user_model().objects.get(pk=owner.pk).check_password(NEW_PASSWORD)
    assert not errors, errors
    assert not problems, "\n".join(problems)
