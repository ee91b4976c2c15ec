"""Issue 38, item 1 for git: a target's git URL goes through the outbound policy (clear/outbound), at registration
(a 400 naming the field) and again, pinned, at every clone, fetch and push in the worker. Before the change a key
holder's https:// URL to any loopback spelling, or to the cloud metadata address, was accepted and connected to."""

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from evolution import git
from evolution.errors import GitError
from evolution.models import EvolutionTarget
from evolution.services.confinement import git_error_reason

pytestmark = pytest.mark.django_db

TARGETS = "/api/v1/evolution/targets/"
LOOPBACK_FORMS = [
    "https://127.0.0.1/team/agent.git",
    "https://[::1]/team/agent.git",
    "https://[::ffff:127.0.0.1]/team/agent.git",
    "https://2130706433/team/agent.git",
    "https://0x7f.1/team/agent.git",
    "https://0177.0.0.1/team/agent.git",
    "https://169.254.169.254/latest/meta-data.git",
    "https://localhost/team/agent.git",
    "ssh://[::1]/team/agent.git",
    "ssh://git@127.0.0.1:2222/team/agent.git",
    "git@2130706433:team/agent.git",
    "https://git.internal.test/team/agent.git",  # resolves to loopback through the test resolver
    "http://git.example.com/team/agent.git",  # plain http: refused unless the operator widens it
]


@pytest.fixture
def test_resolver(monkeypatch):
    """git.internal.test resolves to 127.0.0.1 and git.example.com to a public address; nothing leaves the box."""
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host == "git.internal.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port or 443))]
        if host == "git.example.com":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", port or 443))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.mark.parametrize("source", LOOPBACK_FORMS)
def test_a_key_holder_registers_no_git_url_that_reaches_inside(key_holder, project, settings, test_resolver, source):
    settings.CLEAR_GIT_ALLOW_PRIVATE = False
    settings.CLEAR_GIT_ALLOW_HTTP = False
    response = key_holder.post(TARGETS, {"name": "inside", "source": source}, format="json")
    assert response.status_code == 400, (source, response.status_code, response.content[:300])
    body = response.json()
    assert "source" in body["extra"]["fields"], body
    # Refused for where it leads (not because a clone happened to fail): nothing was connected to.
    assert "public" in body["message"] or "plain http" in body["message"], body["message"]
    assert not EvolutionTarget.objects.exists()


@pytest.fixture
def listener():
    """A TCP listener on loopback that records every connection (and answers nothing)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.2)
    seen: list[tuple] = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                connection, peer = server.accept()
            except OSError:
                continue
            seen.append(peer)
            connection.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], seen
    stop.set()
    thread.join(timeout=2)
    server.close()


def test_the_worker_refuses_to_clone_an_inside_address_even_for_a_stored_target(settings, tmp_path, listener):
    # A target stored before the policy (or the operator's, registered from the shell): the clone is checked again.
    settings.CLEAR_GIT_ALLOW_PRIVATE = False
    port, seen = listener
    for source in (f"https://127.0.0.1:{port}/agent.git", f"https://[::ffff:127.0.0.1]:{port}/agent.git",
                   f"https://2130706433:{port}/agent.git", f"ssh://git@127.0.0.1:{port}/agent.git"):
        with pytest.raises(GitError) as caught:
            git.repo_mirror_sync(source=source, mirror_path=tmp_path / "mirror.git")
        assert git_error_reason(caught.value).startswith("its address is not allowed"), caught.value.message
    assert seen == []  # nothing even connected
    # The operator can open private hosts for their own git server.
    settings.CLEAR_GIT_ALLOW_PRIVATE = True
    with pytest.raises(GitError):
        git.repo_mirror_sync(source=f"https://127.0.0.1:{port}/agent.git", mirror_path=tmp_path / "mirror2.git")
    assert seen, "with CLEAR_GIT_ALLOW_PRIVATE the clone reaches the operator's host"


class _Redirect(BaseHTTPRequestHandler):
    target = ""

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(302)
        self.send_header("Location", self.target + self.path)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_redirect_is_not_followed(settings, tmp_path, listener):
    # Private and http allowed (an operator's own git server), yet a 302 elsewhere is not followed.
    settings.CLEAR_GIT_ALLOW_PRIVATE = True
    settings.CLEAR_GIT_ALLOW_HTTP = True
    port, seen = listener
    handler = type("Redirect", (_Redirect,), {"target": f"http://127.0.0.1:{port}"})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(GitError) as caught:
            git.repo_mirror_sync(source=f"http://127.0.0.1:{server.server_address[1]}/agent.git",
                                 mirror_path=tmp_path / "mirror.git")
    finally:
        server.shutdown()
        server.server_close()
    assert seen == [], "the redirect was followed"
    assert git_error_reason(caught.value) == "the server answered with a redirect, which Clear does not follow", \
        caught.value.message
