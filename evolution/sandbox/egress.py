"""Egress for a sandboxed coding-agent CLI: its configured model host and port, and nothing else.

The sandbox has its own network namespace (a loopback of its own, no route out), so its only way out is a Unix socket
bound into it. Inside, relay.py listens on the sandbox's 127.0.0.1:INNER_PORT and passes each TCP connection byte for
byte to that socket. On the host, EgressProxy answers it: an HTTP CONNECT (the HTTPS_PROXY route) is tunnelled only
when it names the allowed host and port; anything else is a client that takes the relay for the model server (an
http:// model URL rewritten by local_url) and is piped straight to it. The host side opens no connection but the one
to the allowed destination, so the host's loopback services and sockets stay out of reach.
"""

from __future__ import annotations

import logging
import shutil
import socket
import tempfile
import threading
import time
from http import HTTPStatus
from pathlib import Path
from typing import Self
from urllib.parse import urlsplit, urlunsplit

logger = logging.getLogger(__name__)

INNER_PORT = 3128  # the conventional proxy port; free in the sandbox's own network namespace
SOCKET_NAME = "egress.sock"
RELAY_NAME = "relay.py"
DEFAULT_PORTS = {"http": 80, "https": 443}
CONNECT_PREFIX = b"CONNECT "
MAX_HEADER_BYTES = 16 * 1024
CHUNK = 64 * 1024
# The accept loop polls so it notices a stop without another thread having to wake it.
ACCEPT_POLL_S = 0.2
STOP_TIMEOUT_S = 5.0
# After a refusal, how long to drain what the client sent early: closing on unread bytes resets the connection, and
# the client may lose the response that says why.
REFUSAL_DRAIN_S = 1.0
ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"


def _normal_host(host: str) -> str:
    return host.strip().removeprefix("[").removesuffix("]").rstrip(".").lower()


def egress_from_url(url: str) -> tuple[str, int]:
    """The (host, port) a model URL talks to: https defaults to 443, http to 80."""
    # Messages name the part that is wrong, not the URL: model URLs may carry keys in their query.
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower() if "://" in url else ""
    if scheme not in DEFAULT_PORTS:
        raise ValueError(f"a model URL must start with http:// or https://, not {scheme + '://' if scheme else 'none'}")
    if not parts.hostname:
        raise ValueError(f"the {scheme}:// model URL names no host")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"the {scheme}:// model URL for {parts.hostname} has an invalid port") from exc
    return _normal_host(parts.hostname), port or DEFAULT_PORTS[scheme]


def _split_authority(text: str) -> tuple[str, int] | None:
    """host:port or [v6]:port of a CONNECT request; None when it is not one."""
    if text.startswith("["):
        close = text.find("]")
        if close < 0 or text[close + 1:close + 2] != ":":
            return None
        host, port_text = text[1:close], text[close + 2:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or ":" in host:  # an unbracketed IPv6 address is ambiguous
            return None
    if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5) or not 0 < int(port_text) < 65536:
        return None
    host = _normal_host(host)
    return (host, int(port_text)) if host else None


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _reply(conn: socket.socket, *, status: int, reason: str, drain: bool = True) -> None:
    """A complete HTTP error response, then (with drain) a close the client can read it before."""
    body = (reason + "\n").encode("utf-8", "replace")
    head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    try:
        conn.settimeout(REFUSAL_DRAIN_S)
        conn.sendall(head.encode("ascii") + body)
        if not drain:
            return
        conn.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + REFUSAL_DRAIN_S
        while time.monotonic() < deadline and conn.recv(CHUNK):
            pass
    except OSError:
        pass


class EgressProxy:
    """The host side of a sandbox's only way out: a Unix socket that reaches (host, port) and nothing else.

    A context manager: entering creates `dir` with `egress.sock` (any uid may connect) and `relay.py` (any uid may
    read) and starts serving; leaving stops the threads, closes every connection and removes `dir`. Connection
    errors are logged, never raised.
    """

    def __init__(
        self, host: str, port: int, *, inner_port: int = INNER_PORT, max_connections: int = 64,
        header_timeout_s: float = 30.0, connect_timeout_s: float = 30.0, idle_timeout_s: float = 900.0,
        parent: Path | None = None,
    ) -> None:
        self.host = _normal_host(host)
        if not self.host:
            raise ValueError("the egress host is empty")
        if not 0 < port < 65536 or not 0 < inner_port < 65536:
            raise ValueError(f"ports must lie in 1..65535, got {port} and inner port {inner_port}")
        self.port = port
        self.inner_port = inner_port
        self._header_timeout_s = header_timeout_s
        self._connect_timeout_s = connect_timeout_s
        # Generous: a model may think for minutes before the first byte of a non-streamed answer.
        self._idle_timeout_s = idle_timeout_s
        self._parent = parent
        self._slots = threading.BoundedSemaphore(max_connections)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._dir: Path | None = None
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None

    @property
    def dir(self) -> Path:
        if self._dir is None:
            raise RuntimeError("the egress proxy is not running; use it as a context manager")
        return self._dir

    @property
    def socket_path(self) -> Path:
        return self.dir / SOCKET_NAME

    @property
    def relay_path(self) -> Path:
        return self.dir / RELAY_NAME

    def wrap(self, cmd: list[str], *, python: str) -> list[str]:
        """cmd started by the relay, which runs inside the sandbox and exits with cmd's exit code."""
        return [python, str(self.relay_path), "--port", str(self.inner_port), "--socket", str(self.socket_path),
                "--", *cmd]

    def env(self) -> dict[str, str]:
        """Variables that send a CLI's https:// traffic through the relay."""
        proxy = f"http://127.0.0.1:{self.inner_port}"
        # No HTTP_PROXY or ALL_PROXY: clients would then send local_url's plain requests to the relay in proxy form
        # (an absolute URL naming the relay itself) rather than as the origin request the model server expects.
        # An empty NO_PROXY keeps an inherited exception list from sending the model host around the relay.
        return {
            "HTTPS_PROXY": proxy, "https_proxy": proxy, "NO_PROXY": "", "no_proxy": "",
            # Node's own fetch and http honour the proxy variables only when asked to (Node 24+; ignored before).
            "NODE_USE_ENV_PROXY": "1",
        }

    def local_url(self, url: str) -> str:
        """An http:// URL of the allowed destination rewritten to the relay's address; any other URL unchanged."""
        parts = urlsplit(url)
        if parts.scheme.lower() != "http" or not parts.hostname:
            return url
        try:
            port = parts.port or DEFAULT_PORTS["http"]
        except ValueError:
            return url
        if (_normal_host(parts.hostname), port) != (self.host, self.port):
            return url
        userinfo, at, _ = parts.netloc.rpartition("@")
        netloc = f"{userinfo}{at}127.0.0.1:{self.inner_port}"
        return urlunsplit(("http", netloc, parts.path, parts.query, parts.fragment))

    def __enter__(self) -> Self:
        if self._dir is not None:
            raise RuntimeError("the egress proxy is already running")
        path = Path(tempfile.mkdtemp(prefix="clear-egress-", dir=self._parent))
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # The sandbox runs as another uid: it must traverse the dir, read the relay and connect to the socket.
            path.chmod(0o755)
            (path / RELAY_NAME).write_text(RELAY_SCRIPT)
            (path / RELAY_NAME).chmod(0o644)
            listener.bind(str(path / SOCKET_NAME))
            (path / SOCKET_NAME).chmod(0o666)
            listener.listen(128)
            listener.settimeout(ACCEPT_POLL_S)
        except BaseException:
            listener.close()
            shutil.rmtree(path, ignore_errors=True)
            raise
        self._dir, self._listener = path, listener
        self._stop.clear()
        self._accept_thread = threading.Thread(target=self._accept_loop, name="clear-egress-accept", daemon=True)
        self._accept_thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving, end every connection and remove the dir; safe to call twice."""
        if self._dir is None:
            return
        with self._lock:
            self._stop.set()
        if self._accept_thread is not None:
            self._accept_thread.join(STOP_TIMEOUT_S)
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            sockets, threads = list(self._sockets), list(self._threads)
        for sock in sockets:
            _shutdown(sock)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [thread.name for thread in threads if thread.is_alive()]
        if stuck:
            # A connect to the destination in flight cannot be interrupted; it closes itself when it returns.
            logger.warning("egress proxy: %d connection threads still finishing after stop", len(stuck))
        shutil.rmtree(self._dir, ignore_errors=True)
        self._dir, self._listener, self._accept_thread = None, None, None

    def _track(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._stop.is_set():
                return False
            self._sockets.add(sock)
            return True

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while not self._stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if self._stop.is_set():
                    break
                logger.warning("egress proxy: accept failed: %s", exc)
                time.sleep(ACCEPT_POLL_S)
                continue
            if not self._slots.acquire(blocking=False):
                logger.warning("egress proxy: refused a connection, all slots are busy")
                # No drain: that would stall this loop, the one thread that must keep up when many connect.
                _reply(conn, status=503, reason="too many connections through the egress proxy", drain=False)
                conn.close()
                continue
            thread = threading.Thread(target=self._serve, args=(conn,), name="clear-egress-conn", daemon=True)
            with self._lock:
                self._threads.add(thread)
            try:
                thread.start()
            except RuntimeError as exc:  # no thread to be had: refuse this one, keep accepting
                logger.warning("egress proxy: cannot start a connection thread: %s", exc)
                with self._lock:
                    self._threads.discard(thread)
                self._slots.release()
                conn.close()

    def _serve(self, conn: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            if not self._track(conn):
                return
            head = self._read_head(conn)
            if head is None:
                return
            rest = head
            if head.startswith(CONNECT_PREFIX):
                # Bytes after the header (a TLS hello sent without waiting) belong to the tunnel.
                rest = head.partition(b"\r\n\r\n")[2]
                refusal = self._refusal(head.partition(b"\r\n")[0].decode("latin-1"))
                if refusal is not None:
                    logger.warning("egress proxy: refused %s", refusal[1])
                    _reply(conn, status=refusal[0], reason=refusal[1])
                    return
            upstream = self._connect(conn)
            if upstream is None:
                return
            if head.startswith(CONNECT_PREFIX):
                conn.sendall(ESTABLISHED)
            if rest:
                upstream.sendall(rest)
            self._pipe(conn, upstream)
        except OSError as exc:
            logger.info("egress proxy: connection ended: %s", exc)
        except Exception:  # a thread's error must not go unseen, nor reach the caller
            logger.exception("egress proxy: connection failed")
        finally:
            for sock in (conn, upstream):
                if sock is not None:
                    sock.close()
                    with self._lock:
                        self._sockets.discard(sock)
            self._slots.release()
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _read_head(self, conn: socket.socket) -> bytes | None:
        """Enough of the start to tell a CONNECT (its whole header) from a plain request (whatever came first)."""
        conn.settimeout(self._header_timeout_s)
        deadline = time.monotonic() + self._header_timeout_s
        data = b""
        while True:
            if not data.startswith(CONNECT_PREFIX[:len(data)]) or (
                    data.startswith(CONNECT_PREFIX) and b"\r\n\r\n" in data):
                return data
            if len(data) > MAX_HEADER_BYTES:
                _reply(conn, status=431, reason=f"CONNECT header larger than {MAX_HEADER_BYTES} bytes")
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                logger.info("egress proxy: no request within %ss", self._header_timeout_s)
                return None
            conn.settimeout(remaining)
            try:
                chunk = conn.recv(CHUNK)
            except TimeoutError:
                continue
            if not chunk:
                return None
            data += chunk

    def _refusal(self, request_line: str) -> tuple[int, str] | None:
        parts = request_line.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return 400, "malformed CONNECT request line"
        target = _split_authority(parts[1])
        if target is None:
            return 400, f"CONNECT needs host:port, got {parts[1][:200]!r}"
        if target != (self.host, self.port):
            return 403, f"egress to {parts[1][:200]} is not allowed; only {self.host}:{self.port} is"
        return None

    def _connect(self, conn: socket.socket) -> socket.socket | None:
        # The only outbound connection the host side ever opens, and the only name it resolves.
        try:
            upstream = socket.create_connection((self.host, self.port), timeout=self._connect_timeout_s)
        except OSError as exc:
            logger.warning("egress proxy: cannot reach %s:%s: %s", self.host, self.port, exc)
            _reply(conn, status=502, reason=f"cannot reach {self.host}:{self.port}: {exc}")
            return None
        if not self._track(upstream):
            upstream.close()
            return None
        return upstream

    def _pipe(self, conn: socket.socket, upstream: socket.socket) -> None:
        last_activity = [time.monotonic()]
        for sock in (conn, upstream):
            sock.settimeout(self._idle_timeout_s)
        # Two threads rather than one select loop: a peer that does not read then blocks only its own direction.
        back = threading.Thread(target=self._pump, args=(upstream, conn, last_activity), name="clear-egress-pump",
                                daemon=True)
        back.start()
        self._pump(conn, upstream, last_activity)
        back.join()

    def _pump(self, src: socket.socket, dst: socket.socket, last_activity: list[float]) -> None:
        try:
            while True:
                try:
                    data = src.recv(CHUNK)
                except TimeoutError:
                    # One direction may be quiet for long while the other streams; only both quiet is idle.
                    if time.monotonic() - last_activity[0] < self._idle_timeout_s:
                        continue
                    logger.info("egress proxy: closing a connection idle for %ss", self._idle_timeout_s)
                    raise
                if not data:
                    # Half-close, so a request body's end reaches the server while its answer still flows back.
                    dst.shutdown(socket.SHUT_WR)
                    return
                last_activity[0] = time.monotonic()
                dst.sendall(data)
        except OSError:
            _shutdown(src)
            _shutdown(dst)


# relay.py runs inside the sandbox with whatever interpreter the runner binds in: standard library only, and syntax
# old Pythons read. It exits 125 when it cannot listen (before starting the command), 127 when the command cannot
# start, else with the command's code (128 + signal when a signal ended it).
RELAY_SCRIPT = (Path(__file__).parent / "relay.py").read_text(encoding="utf-8")
