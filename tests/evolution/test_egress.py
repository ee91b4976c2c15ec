"""The egress proxy against real sockets and processes: the relay as a plain process and inside bubblewrap.

Inside bwrap with --unshare-net the relay's Unix socket is the only way out, so what the client reaches there is
what the proxy lets through. The bubblewrap cases skip when bwrap does not work here, except under CI=true.
"""

import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from functools import cache

import pytest

from evolution.sandbox.egress import INNER_PORT, EgressProxy, egress_from_url

RUN_TIMEOUT_S = 4.0


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"allowed {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def allowed_port() -> Iterator[int]:
    """The model server: an HTTP server on the host's loopback."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def other() -> Iterator[socket.socket]:
    """A host loopback service the sandbox must not reach; a connection to it would wait in its backlog."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    yield listener
    listener.close()


def _no_connection(listener: socket.socket) -> bool:
    try:
        listener.accept()[0].close()
    except BlockingIOError:
        return True
    return False


@cache
def _bwrap_problem() -> str:
    if not shutil.which("bwrap"):
        return "bwrap is not on PATH"
    probe = subprocess.run(
        ["bwrap", "--unshare-net", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"],
        check=False, capture_output=True, text=True, timeout=10,
    )
    return "" if probe.returncode == 0 else f"bwrap --unshare-net fails here: {probe.stderr.strip()[:300]}"


def _require_bwrap() -> None:
    if problem := _bwrap_problem():
        if os.environ.get("CI") == "true":
            pytest.fail(problem + " (CI=true: .ci/run must install bubblewrap)")
        pytest.skip(problem)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(params=["process", "bwrap"])
def where(request) -> str:
    if request.param == "bwrap":
        _require_bwrap()
    return request.param


def _proxy(allowed_port: int, where: str) -> EgressProxy:
    # As a plain process the relay listens on the host's loopback, where 3128 may be taken (or used by a parallel
    # test); inside bwrap the network namespace is its own.
    return EgressProxy("127.0.0.1", allowed_port, inner_port=INNER_PORT if where == "bwrap" else _free_port())


def _run(proxy: EgressProxy, cmd: list[str], *, where: str, python: str = sys.executable,
         **kwargs: object) -> subprocess.CompletedProcess:
    argv = proxy.wrap(cmd, python=python)
    if where == "bwrap":
        argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net", "--unshare-pid",
                "--die-with-parent", "--", *argv]
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, **kwargs)


CLIENT = textwrap.dedent("""
    import json, socket, sys
    relay, allowed, other = (int(arg) for arg in sys.argv[1:4])

    def exchange(data, *, then=b""):
        sock = socket.create_connection(("127.0.0.1", relay), timeout=3)
        sock.sendall(data)
        reply = b""
        while then and b"\\r\\n\\r\\n" not in reply:
            reply += sock.recv(4096)
        if then:
            head, _, reply = reply.partition(b"\\r\\n\\r\\n")
            if not head.startswith(b"HTTP/1.1 200"):
                return head.decode()
            sock.sendall(then)
        while chunk := sock.recv(4096):
            reply += chunk
        return reply.decode()

    get = b"GET /models HTTP/1.1\\r\\nHost: model\\r\\nConnection: close\\r\\n\\r\\n"
    result = {
        "tunnel": exchange(b"CONNECT 127.0.0.1:%d HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n" % allowed, then=get),
        "plain": exchange(get),
        "other": exchange(b"CONNECT 127.0.0.1:%d HTTP/1.1\\r\\n\\r\\n" % other),
        "metadata": exchange(b"CONNECT 169.254.169.254:80 HTTP/1.1\\r\\n\\r\\n"),
    }
    try:
        socket.create_connection(("127.0.0.1", other), timeout=2).close()
        result["direct"] = "CONNECTED"
    except OSError as exc:
        result["direct"] = "BLOCKED %s" % type(exc).__name__
    print(json.dumps(result))
""")


def test_only_the_allowed_destination_answers(allowed_port, other, where):
    other_port = other.getsockname()[1]
    with _proxy(allowed_port, where) as proxy:
        result = _run(proxy, [sys.executable, "-c", CLIENT, str(proxy.inner_port), str(allowed_port),
                              str(other_port)], where=where)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    # Both routes reach the model server: the CONNECT tunnel (HTTPS_PROXY) and a plain request to the relay.
    assert seen["tunnel"].startswith("HTTP/1.0 200") and seen["tunnel"].endswith("allowed /models"), seen
    assert seen["plain"].startswith("HTTP/1.0 200") and seen["plain"].endswith("allowed /models"), seen
    for refused in ("other", "metadata"):
        assert seen[refused].startswith("HTTP/1.1 403 Forbidden"), seen
        assert f"only 127.0.0.1:{allowed_port}" in seen[refused]
    if where == "bwrap":
        # The network namespace, not the proxy, is what keeps a direct connection from the host's loopback.
        assert seen["direct"].startswith("BLOCKED"), seen
        assert _no_connection(other)
        socket.create_connection(("127.0.0.1", other_port), timeout=2).close()  # reachable from the host: a real test
        assert not _no_connection(other)
    else:
        assert seen["direct"] == "CONNECTED"  # no namespace: the relay alone confines nothing


def test_the_relay_works_for_another_uid(allowed_port, other):
    """The sandbox's user is not the server's: it must read the relay and connect to the socket."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if os.geteuid() != 0 or python is None:
        pytest.skip("needs root (to run as nobody) and a system python3 nobody can execute")
    with _proxy(allowed_port, "process") as proxy:
        result = _run(proxy, [python, "-c", CLIENT, str(proxy.inner_port), str(allowed_port),
                              str(other.getsockname()[1])], where="process", python=python, user=65534, group=65534)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["plain"].endswith("allowed /models")


def _connect(proxy: EgressProxy, request: bytes) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(RUN_TIMEOUT_S)
    sock.connect(str(proxy.socket_path))
    if request:
        sock.sendall(request)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything until the proxy closes; a close with unread bytes on its side (a reset) ends it too."""
    data = b""
    with sock:
        try:
            while chunk := sock.recv(4096):
                data += chunk
        except ConnectionResetError:
            pass
    return data


def test_the_host_side_checks_the_connect_target(allowed_port, other):
    with EgressProxy("LocalHost", allowed_port) as proxy:
        for bad in (b"CONNECT localhost HTTP/1.1\r\n\r\n", b"CONNECT ::1:80 HTTP/1.1\r\n\r\n", b"CONNECT x\r\n\r\n"):
            assert _read_all(_connect(proxy, bad)).startswith(b"HTTP/1.1 400 Bad Request"), bad
        for elsewhere in (b"localhost:%d" % other.getsockname()[1], b"localhost.evil:%d" % allowed_port):
            reply = _read_all(_connect(proxy, b"CONNECT %s HTTP/1.1\r\n\r\n" % elsewhere))
            assert reply.startswith(b"HTTP/1.1 403 Forbidden"), reply
        # The host's name is compared without regard to case; the bytes sent early go through the tunnel.
        tunnel = _connect(proxy, b"CONNECT LOCALHOST:%d HTTP/1.1\r\n\r\nGET /early HTTP/1.0\r\n\r\n" % allowed_port)
        reply = _read_all(tunnel)
        assert reply.startswith(b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.0 200"), reply
        assert reply.endswith(b"allowed /early")
    assert _no_connection(other)


def test_connections_beyond_the_limit_are_turned_away(allowed_port):
    with EgressProxy("127.0.0.1", allowed_port, max_connections=1) as proxy, _connect(proxy, b"CON"):
        time.sleep(0.2)  # the first connection's thread holds the only slot
        # Nothing sent: the proxy answers at once and closes, and a request still on its way would meet a closed pipe.
        assert _read_all(_connect(proxy, b"")).startswith(b"HTTP/1.1 503")


def test_an_unreachable_destination_is_a_502():
    with EgressProxy("127.0.0.1", _free_port()) as proxy:
        assert _read_all(_connect(proxy, b"GET / HTTP/1.0\r\n\r\n")).startswith(b"HTTP/1.1 502 Bad Gateway")


def test_leaving_closes_connections_removes_the_dir_and_stops_the_threads(allowed_port):
    with EgressProxy("127.0.0.1", allowed_port) as proxy:
        tunnel = _connect(proxy, b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % allowed_port)
        assert tunnel.recv(4096) == b"HTTP/1.1 200 Connection established\r\n\r\n"
        half_sent = _connect(proxy, b"CONNECT 127.0.0.1")
        assert (proxy.dir / "relay.py").stat().st_mode & 0o777 == 0o644
        assert (proxy.socket_path.stat().st_mode & 0o777, proxy.dir.stat().st_mode & 0o777) == (0o666, 0o755)
        workdir = proxy.dir
        started = time.monotonic()
    assert time.monotonic() - started < 2
    assert not workdir.exists()
    assert _read_all(tunnel) == b"" and _read_all(half_sent) == b""
    assert [t.name for t in threading.enumerate() if t.name.startswith("clear-egress")] == []
    with pytest.raises(RuntimeError, match="not running"):
        proxy.dir  # noqa: B018 - the property raises


EXIT_WITH = "import os, sys; code = int(sys.argv[1]); os.kill(os.getpid(), -code) if code < 0 else sys.exit(code)"


@pytest.mark.parametrize(("child_code", "relay_code"), [(0, 0), (7, 7), (-signal.SIGKILL, 128 + signal.SIGKILL)])
def test_the_relay_exits_with_the_commands_code(allowed_port, where, child_code, relay_code):
    with _proxy(allowed_port, where) as proxy:
        result = _run(proxy, [sys.executable, "-c", EXIT_WITH, str(child_code)], where=where)
    assert result.returncode == relay_code, result.stderr


TRAP_TERM = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(42))
print("ready", flush=True)
time.sleep(10)
"""


def test_the_relay_forwards_sigterm_to_the_command(allowed_port):
    with _proxy(allowed_port, "process") as proxy:
        relay = subprocess.Popen(proxy.wrap([sys.executable, "-c", TRAP_TERM], python=sys.executable),
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert relay.stdout.readline() == "ready\n"
            relay.send_signal(signal.SIGTERM)
            assert relay.wait(timeout=RUN_TIMEOUT_S) == 42
        finally:
            relay.kill()
            relay.wait()
            relay.stdout.close()


def test_the_relay_refuses_to_start_the_command_when_it_cannot_listen(allowed_port, tmp_path):
    marker = tmp_path / "started"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        with EgressProxy("127.0.0.1", allowed_port, inner_port=taken.getsockname()[1]) as proxy:
            result = _run(proxy, [sys.executable, "-c", f"open({str(marker)!r}, 'w')"], where="process")
    assert result.returncode == 125
    assert "cannot listen on 127.0.0.1:" in result.stderr
    assert not marker.exists()


def test_env_and_local_url():
    with EgressProxy("Models.Example", 8000) as proxy:
        assert proxy.env()["HTTPS_PROXY"] == proxy.env()["https_proxy"] == f"http://127.0.0.1:{INNER_PORT}"
        assert proxy.env()["NO_PROXY"] == proxy.env()["no_proxy"] == ""
        assert "HTTP_PROXY" not in proxy.env() and "ALL_PROXY" not in proxy.env()
        assert proxy.local_url("http://models.example:8000/v1?x=1") == f"http://127.0.0.1:{INNER_PORT}/v1?x=1"
        assert proxy.local_url("http://u:p@MODELS.example:8000/v1") == f"http://u:p@127.0.0.1:{INNER_PORT}/v1"
        for unchanged in ("https://models.example:8000/v1", "http://models.example/v1", "http://other:8000/",
                          "http://models.example:bad/"):
            assert proxy.local_url(unchanged) == unchanged
        argv = proxy.wrap(["claude", "-p", "hi"], python="/usr/bin/python3")
        assert argv == ["/usr/bin/python3", str(proxy.dir / "relay.py"), "--port", str(INNER_PORT), "--socket",
                        str(proxy.dir / "egress.sock"), "--", "claude", "-p", "hi"]
    assert EgressProxy("[::1]", 80).host == "::1"


def test_egress_from_url():
    assert egress_from_url("https://API.anthropic.com/v1") == ("api.anthropic.com", 443)
    assert egress_from_url("http://localhost:11434") == ("localhost", 11434)
    assert egress_from_url("http://[::1]/v1") == ("::1", 80)
    for bad, message in [("ftp://host/", "http:// or https://, not ftp://"), ("localhost:8000", "not none"),
                         ("https:///v1", "names no host"), ("https://host:99999/", "invalid port")]:
        with pytest.raises(ValueError, match=message):
            egress_from_url(bad)
