"""Issue 23: failed logins and failed API keys are limited per (account, client address) and per client address
(CLEAR_AUTH_FAILURE_RATE, 10/15min by default); past it 429 with Retry-After, the right password or key too, but only
from there: the same account from another address still gets in."""

import base64
import logging

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from rest_framework.test import APIClient

from clear.projects import auth_throttle
from clear.projects.auth_throttle import Rate, rate_parse
from clear.projects.client_address import client_address_get
from tests.conftest import auth_throttle_clear

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"  # tests/conftest.py's users
HOME, STRANGER = "198.51.100.20", "203.0.113.66"


def _login(client: Client, email: str, password: str, address: str = STRANGER, **meta):
    return client.post("/login/", {"username": email, "password": password}, REMOTE_ADDR=address, **meta)


def _fail_logins(email: str, times: int = 10, address: str = STRANGER, **meta) -> None:
    for _ in range(times):
        response = _login(Client(), email, "wrong password", address, **meta)
        assert response.status_code == 200, response.status_code
        assert "do not match an account" in response.content.decode()


def _logged_in(response) -> bool:
    return response.status_code == 302 and "_auth_user_id" in response.client.session


# --- Logins ----------------------------------------------------------------------------------------------------------

def test_the_eleventh_failed_login_is_throttled_and_the_owner_still_logs_in_from_home(owner, caplog):
    _fail_logins(owner.email)
    with caplog.at_level(logging.WARNING, logger="clear.auth"):
        eleventh = _login(Client(), owner.email, "wrong password")
    assert eleventh.status_code == 429
    assert 800 < int(eleventh["Retry-After"]) <= 900
    html = eleventh.content.decode()
    assert 'data-testid="login-throttled"' in html and "Try again in 15 minutes" in html
    assert f'value="{owner.email}"' in html  # the form comes back filled in
    assert any("login throttled" in record.getMessage() and STRANGER in record.getMessage()
               for record in caplog.records)
    # The right password from the guesser's address is refused too: a right guess must look like a wrong one.
    right_from_there = _login(Client(), owner.email, PASSWORD)
    assert right_from_there.status_code == 429
    assert "_auth_user_id" not in right_from_there.client.session
    assert _logged_in(_login(Client(), owner.email, PASSWORD, address=HOME))


def test_spraying_many_accounts_from_one_address_is_throttled(owner, teammate):
    for n in range(10):
        _login(Client(), f"nobody{n}@example.com", "wrong password")
    assert _login(Client(), teammate.email, PASSWORD).status_code == 429
    assert _logged_in(_login(Client(), teammate.email, PASSWORD, address=HOME))


def test_case_does_not_buy_more_tries(owner):
    for n in range(10):
        _login(Client(), owner.email.upper() if n % 2 else owner.email, "wrong password")
    assert _login(Client(), owner.email.title(), "wrong password").status_code == 429


def test_a_login_forgives_the_accounts_typos_but_not_the_address(owner, teammate):
    _fail_logins(owner.email, times=9)
    assert _logged_in(_login(Client(), owner.email, PASSWORD))
    _fail_logins(teammate.email, times=1)  # the address' tenth
    assert _login(Client(), teammate.email, PASSWORD).status_code == 429


def test_blank_fields_are_not_counted(owner):
    for _ in range(12):
        assert Client().post("/login/", {"username": owner.email, "password": ""},
                             REMOTE_ADDR=STRANGER).status_code == 200
    assert _logged_in(_login(Client(), owner.email, PASSWORD))


def test_the_window_expires(owner, monkeypatch):
    now = [1_000_000.0]
    monkeypatch.setattr(auth_throttle, "clock", lambda: now[0])
    _fail_logins(owner.email)
    now[0] += 600
    refused = _login(Client(), owner.email, PASSWORD)
    assert refused.status_code == 429 and refused["Retry-After"] == "300"
    now[0] += 301
    assert _logged_in(_login(Client(), owner.email, PASSWORD))


def test_an_empty_rate_turns_the_throttle_off(owner, settings):
    settings.CLEAR_AUTH_FAILURE_RATE = ""
    _fail_logins(owner.email, times=15)
    assert _logged_in(_login(Client(), owner.email, PASSWORD))


def test_the_rate_setting_is_honoured(owner, settings):
    settings.CLEAR_AUTH_FAILURE_RATE = "3/h"
    _fail_logins(owner.email, times=3)
    refused = _login(Client(), owner.email, PASSWORD)
    assert refused.status_code == 429 and 3500 < int(refused["Retry-After"]) <= 3600


# --- Client address --------------------------------------------------------------------------------------------------

def test_x_forwarded_for_is_ignored_by_default(owner):
    for n in range(10):
        _login(Client(), owner.email, "wrong password", address=STRANGER, HTTP_X_FORWARDED_FOR=f"192.0.2.{n}")
    refused = _login(Client(), owner.email, PASSWORD, address=STRANGER, HTTP_X_FORWARDED_FOR="192.0.2.200")
    assert refused.status_code == 429


def test_x_forwarded_for_is_believed_behind_a_trusted_proxy(owner, settings):
    settings.CLEAR_TRUSTED_PROXIES = ["10.0.0.0/8"]
    proxy = "10.1.2.3"
    _fail_logins(owner.email, address=proxy, HTTP_X_FORWARDED_FOR=STRANGER)
    assert _login(Client(), owner.email, PASSWORD, proxy, HTTP_X_FORWARDED_FOR=STRANGER).status_code == 429
    # A client's own X-Forwarded-For entry (left of what the proxy appended) does not move it elsewhere.
    spoofed = _login(Client(), owner.email, PASSWORD, proxy, HTTP_X_FORWARDED_FOR=f"{HOME}, {STRANGER}")
    assert spoofed.status_code == 429
    assert _logged_in(_login(Client(), owner.email, PASSWORD, proxy, HTTP_X_FORWARDED_FOR=HOME))


@pytest.mark.parametrize("remote, forwarded, trusted, expected", [
    ("198.51.100.7", "203.0.113.1", [], "198.51.100.7"),
    ("10.0.0.5", "203.0.113.1", [], "10.0.0.5"),
    ("10.0.0.5", "203.0.113.1", ["10.0.0.0/8"], "203.0.113.1"),
    ("10.0.0.5", "1.2.3.4, 203.0.113.1", ["10.0.0.5"], "203.0.113.1"),  # the left entry is the client's own claim
    ("10.0.0.5", "203.0.113.1, 10.0.0.9", ["10.0.0.0/8"], "203.0.113.1"),  # two proxies
    ("10.0.0.5", "10.0.0.8, 10.0.0.9", ["10.0.0.0/8"], "10.0.0.8"),  # all internal: the first
    ("10.0.0.5", "", ["10.0.0.0/8"], "10.0.0.5"),
    ("10.0.0.5", "garbage", ["10.0.0.0/8"], "10.0.0.5"),
    ("10.0.0.5", "203.0.113.1:5123", ["10.0.0.0/8"], "203.0.113.1"),
    ("10.0.0.5", "[2001:db8::1]:443", ["10.0.0.0/8"], "2001:db8::1"),
    ("::ffff:198.51.100.7", "", [], "198.51.100.7"),
    ("", "203.0.113.1", ["10.0.0.0/8"], ""),
])
def test_client_address(settings, remote, forwarded, trusted, expected):
    settings.CLEAR_TRUSTED_PROXIES = trusted
    meta = {"REMOTE_ADDR": remote, "HTTP_X_FORWARDED_FOR": forwarded}
    assert client_address_get(meta=meta) == expected


def test_a_bad_trusted_proxy_setting_is_refused(settings):
    settings.CLEAR_TRUSTED_PROXIES = ["10.0.0.0/8", "not-an-address"]
    with pytest.raises(ImproperlyConfigured, match="CLEAR_TRUSTED_PROXIES"):
        client_address_get(meta={"REMOTE_ADDR": "10.0.0.1"})


@pytest.mark.parametrize("value, expected", [
    ("10/15min", Rate(10, 900)), ("600/min", Rate(600, 60)), ("5/30s", Rate(5, 30)), ("100/d", Rate(100, 86400)),
    ("3/h", Rate(3, 3600)), ("10 / 15 mins", Rate(10, 900)), ("2/2hours", Rate(2, 7200)), ("", None), (None, None),
])
def test_rate_parse(value, expected):
    assert rate_parse(value) == expected


@pytest.mark.parametrize("value", ["10", "ten/min", "10/15", "10/fortnight", "0/min", "10/0min", "-1/min"])
def test_rate_parse_refuses_nonsense(value):
    with pytest.raises(ImproperlyConfigured, match="CLEAR_AUTH_FAILURE_RATE"):
        rate_parse(value)


def test_the_settings_check_names_a_bad_rate(settings):
    from clear.projects.checks import auth_settings_check

    assert auth_settings_check(None) == []
    settings.CLEAR_AUTH_FAILURE_RATE = "lots"
    assert [error.obj for error in auth_settings_check(None)] == ["CLEAR_AUTH_FAILURE_RATE"]


# --- API keys ---------------------------------------------------------------------------------------------------------

def _basic(public: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{public}:{secret}".encode()).decode()


def _fail_keys(times: int = 10, address: str = STRANGER, authorization: str = "Bearer sk-clear-guess") -> None:
    for n in range(times):
        response = APIClient().get("/api/v1/project/", HTTP_AUTHORIZATION=f"{authorization}{n}", REMOTE_ADDR=address)
        assert response.status_code == 401, response.content


def test_the_eleventh_wrong_key_is_throttled_and_a_valid_key_works_elsewhere(issued_key, caplog):
    _fail_keys()
    with caplog.at_level(logging.WARNING, logger="clear.auth"):
        eleventh = APIClient().get("/api/v1/project/", HTTP_AUTHORIZATION="Bearer sk-clear-guess-11",
                                   REMOTE_ADDR=STRANGER)
    assert eleventh.status_code == 429
    assert 800 < int(eleventh["Retry-After"]) <= 900
    body = eleventh.json()
    assert set(body) == {"message", "code", "extra"}
    assert body["code"] == "auth_throttled" and body["extra"]["retry_after"] == int(eleventh["Retry-After"])
    assert any("api_key throttled" in record.getMessage() for record in caplog.records)
    valid = f"Bearer {issued_key.secret}"
    assert APIClient().get("/api/v1/project/", HTTP_AUTHORIZATION=valid, REMOTE_ADDR=STRANGER).status_code == 429
    assert APIClient().get("/api/v1/project/", HTTP_AUTHORIZATION=valid, REMOTE_ADDR=HOME).status_code == 200


def test_wrong_keys_do_not_throttle_logins(owner):
    _fail_keys()
    assert _logged_in(_login(Client(), owner.email, PASSWORD))


def test_a_known_public_key_is_throttled_per_address_with_basic(issued_key):
    public = issued_key.api_key.public_key
    for n in range(10):
        response = APIClient().get("/api/v1/project/", HTTP_AUTHORIZATION=_basic(public, f"sk-clear-guess{n}"),
                                   REMOTE_ADDR=STRANGER)
        assert response.json()["code"] == "invalid_credentials"
    refused = APIClient().get("/api/v1/project/", HTTP_AUTHORIZATION=_basic(public, issued_key.secret),
                              REMOTE_ADDR=STRANGER)
    assert refused.status_code == 429
    assert APIClient().get("/api/v1/project/", HTTP_AUTHORIZATION=_basic(public, issued_key.secret),
                           REMOTE_ADDR=HOME).status_code == 200


def test_revoked_and_malformed_keys_are_not_guesses(issued_key, owner):
    from clear.projects.services import api_key_create, api_key_revoke

    stale = api_key_create(project=issued_key.api_key.project, created_by=owner)
    api_key_revoke(api_key=stale.api_key)
    for _ in range(6):
        for authorization in (f"Bearer {stale.secret}", "Bearer ", "Token abc"):
            assert APIClient().get("/api/v1/project/", HTTP_AUTHORIZATION=authorization,
                                   REMOTE_ADDR=STRANGER).status_code == 401
    assert APIClient().get("/api/v1/project/", HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}",
                           REMOTE_ADDR=STRANGER).status_code == 200


def test_ingestion_endpoints_answer_429_with_the_throttles_retry_after(issued_key):
    _fail_keys()
    otlp = Client().post("/v1/traces", data=b"{}", content_type="application/json",
                         HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}", REMOTE_ADDR=STRANGER)
    assert otlp.status_code == 429 and 800 < int(otlp["Retry-After"]) <= 900
    langfuse = Client().post("/api/public/ingestion", data=b'{"batch": []}', content_type="application/json",
                             HTTP_AUTHORIZATION=_basic(issued_key.api_key.public_key, issued_key.secret),
                             REMOTE_ADDR=STRANGER)
    assert langfuse.status_code == 429 and langfuse.json()["error"] == "auth_throttled"
    assert int(langfuse["Retry-After"]) == int(otlp["Retry-After"])
    ok = Client().post("/v1/traces", data=b"{}", content_type="application/json",
                       HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}", REMOTE_ADDR=HOME)
    assert ok.status_code == 200, ok.content


def test_wrong_ingestion_keys_count_like_api_keys(issued_key):
    for n in range(10):
        response = Client().post("/api/public/ingestion", data=b'{"batch": []}', content_type="application/json",
                                 HTTP_AUTHORIZATION=f"Bearer sk-clear-wrong{n}", REMOTE_ADDR=STRANGER)
        assert response.status_code == 401
    assert APIClient().get("/api/v1/project/", HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}",
                           REMOTE_ADDR=STRANGER).status_code == 429


# --- Shared counters --------------------------------------------------------------------------------------------------

@pytest.fixture
def redis_throttle_cache(settings):
    """The throttle's cache on the test Redis, as production has it: every process sees the same counters."""
    caches = dict(settings.CACHES)
    caches[settings.CLEAR_AUTH_THROTTLE_CACHE] = {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                                  "LOCATION": settings.CELERY_BROKER_URL}
    settings.CACHES = caches
    auth_throttle_clear()
    yield
    auth_throttle_clear()


def test_counts_are_shared_through_redis(redis_throttle_cache, settings, owner):
    from django.core.cache.backends.redis import RedisCache

    assert settings.CACHES[settings.CLEAR_AUTH_THROTTLE_CACHE]["BACKEND"].endswith("RedisCache")
    # Two cache clients with their own connection pools count like two web processes would.
    other_process = RedisCache(settings.CELERY_BROKER_URL, {})
    for n in range(5):
        auth_throttle.auth_failure_add(realm=auth_throttle.LOGIN, account="alice@example.com", address=STRANGER)
    _fail_logins(owner.email, times=5)
    keys = [key for key in other_process._cache.get_client().scan_iter(match="*auth-failures:*")]
    assert keys, "the counters are in Redis"
    assert _login(Client(), owner.email, PASSWORD).status_code == 429
    assert _logged_in(_login(Client(), owner.email, PASSWORD, address=HOME))


def test_concurrent_failures_are_all_counted(redis_throttle_cache):
    from concurrent.futures import ThreadPoolExecutor

    def fail(_):
        return auth_throttle.auth_failure_add(realm=auth_throttle.API_KEY, account=None, address=STRANGER)

    with ThreadPoolExecutor(max_workers=8) as pool:
        counts = sorted(pool.map(fail, range(40)))
    assert counts == list(range(1, 41))
