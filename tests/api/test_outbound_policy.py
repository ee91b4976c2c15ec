"""Every outbound URL through one policy (issue 38): webhooks, the issue tracker's base_url and git sources reach
only public addresses, every spelling of loopback and the metadata address included, and a name is pinned to the
address that was checked. The tracker is https only unless CLEAR_TRACKER_ALLOW_HTTP, reaches loopback and private
addresses only with CLEAR_TRACKER_ALLOW_PRIVATE, and connects at each push to the address it checked then (a name
that rebinds to loopback after connecting reaches nothing). Git sources: the pure check and the `git -c` options that
pin git itself (clear.outbound). Model endpoints: tests/evolution/test_model_endpoint_policy.py."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from rest_framework.test import APIClient

from diagnosis.tickets.models import IssueTrackerConnection, Ticket
from tests.api.test_webhook_targets import PUBLIC, Resolver
from tests.tickets.fake_github import FakeGitHub
from tests.tickets.test_tickets_api import make_tickets

pytestmark = pytest.mark.django_db

NAME = "inside.example.test"  # resolves to 127.0.0.1 through the test resolver
# Every spelling of a loopback or metadata host a key holder tried (issue 38), as the host part of a URL.
LOOPBACK_HOSTS = ["127.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "2130706433", "0x7f.1", "0177.0.0.1", "169.254.169.254",
                  NAME]
TRACKER = "/api/v1/tickets/tracker/"


@pytest.fixture
def api(issued_key):
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")


@pytest.fixture
def resolver(monkeypatch):
    return Resolver(monkeypatch, {NAME: ["127.0.0.1"]})


@pytest.fixture
def github():
    server = FakeGitHub().start()
    yield server
    server.stop()


def _fields(response, field: str) -> str:
    assert response.status_code == 400, response.content
    body = response.json()
    assert field in body["extra"]["fields"], body
    return body["message"]


# --- webhooks ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", LOOPBACK_HOSTS)
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_webhook_to_any_loopback_form_is_a_400_naming_url(api, resolver, host, scheme):
    response = api.post("/api/v1/webhooks/", {"url": f"{scheme}://{host}:8200/admin/", "events": ["insight.created"]},
                        format="json")
    _fields(response, "url")


def test_a_webhook_name_resolving_to_loopback_is_refused_at_delivery_too(project, resolver):
    from clear.webhooks.models import Webhook, WebhookDelivery
    from clear.webhooks.services import webhook_delivery_attempt, webhook_event_emit

    Webhook.objects.create(project=project, url=f"http://{NAME}:8200/admin/", secret="s" * 20,
                           events=["insight.created"])  # an old row: saved before the check
    [delivery] = webhook_event_emit(project=project, event="insight.created", payload={})
    assert webhook_delivery_attempt(delivery_id=delivery.pk) is None
    delivery = WebhookDelivery.objects.get(pk=delivery.pk)
    assert delivery.status == "failed" and "(loopback)" in delivery.error and delivery.response_code is None


# --- the issue tracker ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", LOOPBACK_HOSTS)
def test_a_tracker_base_url_at_any_loopback_form_is_a_400_naming_base_url(api, resolver, host):
    response = api.put(TRACKER, {"base_url": f"https://{host}:8215/api/v3", "repository": "acme/desk",
                                 "token": "t" * 20}, format="json")
    message = _fields(response, "base_url")
    assert "public address" in message
    assert not IssueTrackerConnection.objects.exists()


def test_a_tracker_is_https_unless_the_operator_allows_http(api, settings, monkeypatch):
    Resolver(monkeypatch, {"tracker.example.test": [PUBLIC]})
    body = {"base_url": "http://tracker.example.test/api/v3", "repository": "acme/desk", "token": "t" * 20}
    message = _fields(api.put(TRACKER, body, format="json"), "base_url")
    assert "CLEAR_TRACKER_ALLOW_HTTP" in message
    settings.CLEAR_TRACKER_ALLOW_HTTP = True
    assert api.put(TRACKER, body, format="json").status_code == 200


def test_allow_private_lets_a_loopback_tracker_through_but_not_metadata(api, settings):
    settings.CLEAR_TRACKER_ALLOW_PRIVATE = True
    ok = api.put(TRACKER, {"base_url": "https://127.0.0.1:8215", "repository": "a/b", "token": "t" * 20},
                 format="json")
    assert ok.status_code == 200, ok.content
    message = _fields(api.put(TRACKER, {"base_url": "https://169.254.169.254", "repository": "a/b"}, format="json"),
                      "base_url")
    assert "(link-local)" in message and "CLEAR_TRACKER_ALLOW_PRIVATE" not in message


def _push(api, project) -> IssueTrackerConnection:
    """A push through the API (eager Celery: it runs inside the request)."""
    assert api.post("/api/v1/tickets/push/").status_code == 202
    return IssueTrackerConnection.objects.get(project=project)


def test_a_push_to_an_old_row_at_loopback_reaches_nothing(api, project, github, settings):
    settings.CLEAR_TRACKER_ALLOW_HTTP = True  # the fake speaks http; loopback stays refused
    make_tickets(project, "aa", n=2)
    # Saved before the check existed: the push checks again and connects to nothing.
    IssueTrackerConnection.objects.create(project=project, base_url=github.url, repository=github.repository,
                                          token=github.token)
    connection = _push(api, project)
    assert github.requests == []
    assert "not a public address (loopback)" in connection.last_error
    assert not Ticket.objects.filter(project=project).exclude(external_number=None).exists()


def test_a_tracker_name_that_rebinds_to_loopback_after_connecting_reaches_nothing(api, project, settings, github,
                                                                                  monkeypatch):
    settings.CLEAR_TRACKER_ALLOW_HTTP = True  # the fake speaks http; loopback stays refused
    resolver = Resolver(monkeypatch, {"tracker.example.test": [PUBLIC, "127.0.0.1"]})
    make_tickets(project, "bb", n=2)
    port = github.server.server_address[1]
    response = api.put(TRACKER, {"base_url": f"http://tracker.example.test:{port}", "repository": github.repository,
                                 "token": github.token}, format="json")
    assert response.status_code == 200, response.content  # public when connected
    connection = _push(api, project)
    assert github.requests == [] and resolver.calls["tracker.example.test"] == 2
    assert "resolves to a non-public address (loopback)" in connection.last_error
    assert "127.0.0.1" not in api.get(TRACKER).content.decode()  # the key holder does not learn the address


def test_a_push_connects_to_the_address_it_checked_with_the_name_as_host(api, project, settings, github,
                                                                         monkeypatch):
    """Pinning: resolved once when the push begins; every request of it (the issue list, each create) goes to that
    address, though any later lookup would say another; the Host header keeps the name."""
    settings.CLEAR_TRACKER_ALLOW_HTTP = settings.CLEAR_TRACKER_ALLOW_PRIVATE = True
    resolver = Resolver(monkeypatch, {"tracker.example.test": ["127.0.0.1", "127.0.0.1", "127.0.0.2"]})
    make_tickets(project, "cc", n=3)
    port = github.server.server_address[1]
    base_url = f"http://tracker.example.test:{port}"
    assert api.put(TRACKER, {"base_url": base_url, "repository": github.repository, "token": github.token},
                   format="json").status_code == 200
    connection = _push(api, project)
    assert connection.last_error == "", connection.last_error
    assert resolver.calls["tracker.example.test"] == 2  # at connecting, and once for the whole push
    writes = github.writes()
    assert len(writes) >= 3 and len(github.hosts) == len(github.requests) > len(writes)
    assert set(github.hosts) == {f"tracker.example.test:{port}"}


class _Listener:
    """A TCP listener that only counts connections: what a redirect would reach."""

    def __init__(self, host: str = "127.0.0.2"):
        self.sock = socket.create_server((host, 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self):
        self.stop.set()
        self.thread.join()
        self.sock.close()


def test_a_tracker_redirect_to_loopback_is_not_followed(api, project, settings, github, monkeypatch):
    settings.CLEAR_TRACKER_ALLOW_HTTP = settings.CLEAR_TRACKER_ALLOW_PRIVATE = True  # the fake stands for a public host
    Resolver(monkeypatch, {"tracker.example.test": ["127.0.0.1"]})
    inside = _Listener()
    try:
        github.replies = {method: (302, b"", {"Location": f"http://127.0.0.2:{inside.port}/admin"})
                          for method in ("GET", "POST", "PATCH")}
        make_tickets(project, "dd", n=1)
        port = github.server.server_address[1]
        api.put(TRACKER, {"base_url": f"http://tracker.example.test:{port}", "repository": github.repository,
                          "token": github.token}, format="json")
        connection = _push(api, project)
    finally:
        inside.close()
    assert inside.connections == 0
    assert connection.last_error and "302" in connection.last_error and "127.0.0.2" not in connection.last_error


# --- git sources: the policy's pure check, and git pinned to the checked address -----------------------------------


GIT_REFUSED = [
    "https://127.0.0.1/x.git", "https://[::1]/x.git", "https://[::ffff:127.0.0.1]/x.git", "https://2130706433/x.git",
    "https://0x7f.1/x.git", "https://0177.0.0.1/x.git", "https://169.254.169.254/x.git", f"https://{NAME}/x.git",
    "ssh://[::1]/x", "ssh://git@127.0.0.1:2222/x.git", f"ssh://git@{NAME}/x.git", "git@2130706433:x.git",
    "git@[::1]:x.git", "[git@127.0.0.1:2222]:x.git", "localhost:x.git", "git@0x7f.1:x.git", "git@0177.0.0.1:x",
    f"git@{NAME}:acme/agent.git", "git@[::ffff:a9fe:a9fe]:x.git",
]
GIT_INVALID = ["git://github.com/x.git", "file:///srv/x.git", "ext::sh -c id", "ext::sh", "/srv/repos/x.git",
               "./x.git", "ftp://github.com/x.git", "-oProxyCommand=id:x", "git@-oProxyCommand=id:x",
               "https://127.0.0.1\\@github.com/x.git", "https://a@b@github.com/x.git", "https://gïthub.com/x.git"]


@pytest.mark.parametrize("url", GIT_REFUSED)
def test_a_git_source_at_any_loopback_form_is_refused(resolver, url):
    from clear.outbound import OutboundRefusedError, outbound_target_resolve, outbound_url_check

    with pytest.raises(OutboundRefusedError) as refused:
        outbound_url_check(url=url, purpose="git", field="source")
    assert refused.value.extra["fields"] == {"source": [refused.value.message.removeprefix("source: ")]}
    assert refused.value.status_code == 400 and "public address" in refused.value.message
    with pytest.raises(OutboundRefusedError):
        outbound_target_resolve(url=url, purpose="git", field="source")


@pytest.mark.parametrize("url", GIT_INVALID)
def test_what_is_not_a_remote_git_url_is_refused(url):
    from clear.outbound import OutboundInvalidError, outbound_url_check

    with pytest.raises(OutboundInvalidError) as invalid:
        outbound_url_check(url=url, purpose="git", field="source")
    assert "source" in invalid.value.extra["fields"]


def test_git_over_http_needs_the_operators_setting(settings, monkeypatch):
    from clear.outbound import OutboundRefusedError, outbound_url_check

    Resolver(monkeypatch, {"git.example.test": [PUBLIC]})
    with pytest.raises(OutboundRefusedError, match="CLEAR_GIT_ALLOW_HTTP"):
        outbound_url_check(url="http://git.example.test/x.git", purpose="git", field="source")
    settings.CLEAR_GIT_ALLOW_HTTP = True
    assert outbound_url_check(url="http://git.example.test/x.git", purpose="git", field="source").port == 80


@pytest.mark.parametrize("url, scheme, user, host, port, path", [
    ("https://github.com/acme/agent.git", "https", "", "github.com", 443, "/acme/agent.git"),
    ("https://tok:x@git.example.com:8443/a.git", "https", "tok", "git.example.com", 8443, "/a.git"),
    ("ssh://git@github.com/acme/agent.git", "ssh", "git", "github.com", 22, "/acme/agent.git"),
    ("ssh://git@[2606:4700::1]:2222/a", "ssh", "git", "2606:4700::1", 2222, "/a"),
    ("git@github.com:acme/agent.git", "ssh", "git", "github.com", 22, "acme/agent.git"),
    ("GitHub.com:acme/agent.git", "ssh", "", "github.com", 22, "acme/agent.git"),
    ("[git@github.com:2222]:acme/agent.git", "ssh", "git", "github.com", 2222, "acme/agent.git"),
    ("git@[2606:4700::1]:a.git", "ssh", "git", "2606:4700::1", 22, "a.git"),
])
def test_git_urls_are_parsed_as_git_reads_them(url, scheme, user, host, port, path):
    from clear.outbound import outbound_url_parse

    target = outbound_url_parse(url=url, purpose="git", field="source")
    assert (target.scheme, target.user, target.host, target.port, target.path) == (scheme, user, host, port, path)


def test_allow_private_lets_a_loopback_git_host_through_but_not_metadata(settings, resolver):
    from clear.outbound import OutboundRefusedError, outbound_target_resolve

    settings.CLEAR_GIT_ALLOW_PRIVATE = True
    target = outbound_target_resolve(url=f"git@{NAME}:x.git", purpose="git", field="source")
    assert [str(a) for a in target.addresses] == ["127.0.0.1"]
    with pytest.raises(OutboundRefusedError, match="link-local") as refused:
        outbound_target_resolve(url="https://169.254.169.254/x.git", purpose="git", field="source")
    assert "CLEAR_GIT_ALLOW_PRIVATE" not in refused.value.message


def test_the_git_pin_options(settings, monkeypatch):
    from clear.outbound import outbound_target_resolve
    from clear.outbound.pinned import outbound_git_pin

    Resolver(monkeypatch, {"git.example.test": ["93.184.216.34"], "v6.example.test": ["2606:4700::1"]})
    https = outbound_git_pin(target=outbound_target_resolve(url="https://git.example.test:8443/a.git", purpose="git",
                                                            field="source"))
    assert https.config == ("-c", "http.curloptResolve=git.example.test:8443:93.184.216.34",
                            "-c", "http.followRedirects=false")
    assert https.env == {"NO_PROXY": "*", "no_proxy": "*"}
    v6 = outbound_git_pin(target=outbound_target_resolve(url="https://v6.example.test/a.git", purpose="git",
                                                         field="source"))
    assert v6.config[1] == "http.curloptResolve=v6.example.test:443:[2606:4700::1]"
    ssh = outbound_git_pin(target=outbound_target_resolve(url="ssh://git@git.example.test:2222/a.git", purpose="git",
                                                          field="source"), ssh_command="ssh -i /keys/id")
    assert ssh.config == ()
    assert ssh.env["GIT_SSH_COMMAND"] == (
        "ssh -i /keys/id -o HostName=93.184.216.34 -o 'HostKeyAlias=[git.example.test]:2222' -o CheckHostIP=no "
        "-o ProxyCommand=none -o ProxyJump=none -o CanonicalizeHostname=no")
    scp = outbound_git_pin(target=outbound_target_resolve(url="git@git.example.test:a.git", purpose="git",
                                                          field="source"))
    assert "-o HostKeyAlias=git.example.test " in scp.env["GIT_SSH_COMMAND"]


class _GitServer:
    """An HTTP server on 127.0.0.1 that answers git's first request with a redirect and records its Host header."""

    def __init__(self, location: str):
        self.hosts: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                server.hosts.append(self.headers.get("Host") or "")
                self.send_response(302)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.http.server_address[1]
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self):
        self.http.shutdown()
        self.http.server_close()


def test_git_connects_to_the_checked_address_and_does_not_follow_a_redirect(settings, monkeypatch, tmp_path):
    """With the pin, git reaches a name no DNS knows at the address that was checked (the Host header keeps the
    name), and a redirect to another loopback address is not followed."""
    from clear.outbound import outbound_target_resolve
    from clear.outbound.pinned import outbound_git_pin

    settings.CLEAR_GIT_ALLOW_PRIVATE = settings.CLEAR_GIT_ALLOW_HTTP = True  # the server stands for a public host
    inside = _Listener()
    server = _GitServer(location=f"http://127.0.0.2:{inside.port}/x.git/info/refs?service=git-upload-pack")
    Resolver(monkeypatch, {"git.example.test": ["127.0.0.1"]})
    try:
        url = f"http://git.example.test:{server.port}/x.git"
        pin = outbound_git_pin(target=outbound_target_resolve(url=url, purpose="git", field="source"))
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_CONFIG_GLOBAL": os.devnull,
               "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", **pin.env}
        result = subprocess.run(["git", *pin.config, "ls-remote", url], env=env, capture_output=True, text=True,
                                timeout=30, check=False)
    finally:
        server.close()
        inside.close()
    assert result.returncode != 0
    assert server.hosts == [f"git.example.test:{server.port}"], result.stderr
    assert inside.connections == 0
