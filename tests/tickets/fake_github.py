"""A GitHub-compatible issues API on 127.0.0.1 for the push tests: list (state=all, per_page, page, Link header),
create, update; bearer-token check; 404 for other repositories; 422 for titles the test marks as refused; any reply
a test forces for a method (`replies`); issues' html_url on its own host unless a test sets `html_base`."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class FakeGitHub:
    def __init__(self, *, token: str = "ghp_fake_token_0123456789", repository: str = "acme/support-desk",
                 max_page_size: int = 4):
        self.token, self.repository, self.max_page_size = token, repository, max_page_size
        self.issues: dict[int, dict] = {}
        self.requests: list[tuple[str, str]] = []
        self.hosts: list[str] = []  # each request's Host header
        self.refused_titles: set[str] = set()  # substrings of titles answered with 422
        # method -> (status, body: JSON-able or bytes, headers): answered to every request with that method
        self.replies: dict[str, tuple[int, object, dict]] = {}
        self.html_base: str | None = None  # where issues' html_url point; default https:// on this fake's host
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def html_url(self, number: int) -> str:
        base = self.html_base or f"https://127.0.0.1:{self.server.server_address[1]}"
        return f"{base}/{self.repository}/issues/{number}"

    def start(self) -> FakeGitHub:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                fake.handle(self, "GET")

            def do_POST(self):
                fake.handle(self, "POST")

            def do_PATCH(self):
                fake.handle(self, "PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # --- helpers for tests ---------------------------------------------------------------------------------------

    def add(self, *, title: str, body: str = "", state: str = "open", pull_request: bool = False) -> dict:
        with self.lock:
            number = max(self.issues, default=0) + 1
            issue = {"number": number, "title": title, "body": body, "state": state, "state_reason": None,
                     "html_url": self.html_url(number)}
            if pull_request:
                issue["pull_request"] = {"url": self.html_url(number).replace("/issues/", "/pull/")}
            self.issues[number] = issue
            return issue

    def clear_issues(self) -> list[dict]:
        return [i for i in self.issues.values() if "clear-fingerprint" in (i["body"] or "") and "pull_request" not in i]

    def writes(self) -> list[tuple[str, str]]:
        return [r for r in self.requests if r[0] != "GET"]

    # --- the API -------------------------------------------------------------------------------------------------

    def handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(request.path)
        length = int(request.headers.get("Content-Length") or 0)
        raw = request.rfile.read(length) if length else b""
        with self.lock:
            self.requests.append((method, request.path))
            self.hosts.append(request.headers.get("Host") or "")
            forced = self.replies.get(method)
        if forced is not None:
            return self.reply(request, *forced)
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return self.reply(request, 401, {"message": "Bad credentials"})
        prefix = f"/repos/{self.repository}/issues"
        if not parts.path.startswith(prefix):
            return self.reply(request, 404, {"message": "Not Found"})
        rest = parts.path[len(prefix):].strip("/")
        data = json.loads(raw or b"{}")
        with self.lock:
            if method == "GET" and not rest:
                return self.list(request, parse_qs(parts.query), prefix)
            if method == "POST" and not rest:
                return self.create(request, data)
            if method == "PATCH" and rest.isdigit() and int(rest) in self.issues:
                return self.update(request, self.issues[int(rest)], data)
        return self.reply(request, 404, {"message": "Not Found"})

    def list(self, request, query: dict, prefix: str) -> None:
        state = query.get("state", ["open"])[0]
        size = min(int(query.get("per_page", ["30"])[0]), self.max_page_size)
        page = int(query.get("page", ["1"])[0])
        rows = [i for i in sorted(self.issues.values(), key=lambda i: -i["number"])
                if state == "all" or i["state"] == state]
        chunk = rows[(page - 1) * size:page * size]
        headers = {}
        if page * size < len(rows):
            base = f"http://{request.headers.get('Host')}{prefix}"
            headers["Link"] = (f'<{base}?state={state}&per_page={size}&page={page + 1}>; rel="next", '
                               f'<{base}?state={state}&per_page={size}&page=1>; rel="first"')
        self.reply(request, 200, chunk, headers)

    def _refused(self, title: str) -> bool:
        return not title or any(t in title for t in self.refused_titles)

    def create(self, request, data: dict) -> None:
        if self._refused(data.get("title") or ""):
            return self.reply(request, 422, {"message": "Validation Failed",
                                             "errors": [{"resource": "Issue", "code": "invalid", "field": "title"}]})
        number = max(self.issues, default=0) + 1
        issue = {"number": number, "title": data["title"], "body": data.get("body") or "", "state": "open",
                 "state_reason": None, "html_url": self.html_url(number)}
        self.issues[number] = issue
        self.reply(request, 201, issue)

    def update(self, request, issue: dict, data: dict) -> None:
        if "title" in data and self._refused(data["title"]):
            return self.reply(request, 422, {"message": "Validation Failed"})
        for name in ("title", "body", "state", "state_reason"):
            if name in data:
                issue[name] = data[name]
        self.reply(request, 200, issue)

    def reply(self, request, status: int, body, headers: dict | None = None) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json" if not isinstance(body, bytes) else "text/html")
        request.send_header("Content-Length", str(len(raw)))
        for name, value in (headers or {}).items():
            request.send_header(name, value)
        request.end_headers()
        request.wfile.write(raw)
