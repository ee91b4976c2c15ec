"""A small client for GitHub-compatible issues APIs (github.com, GitHub Enterprise `/api/v3`, Gitea `/api/v1`).

Only what pushing tickets needs: list a repository's issues (every state, paginated through the Link header),
create one, update one. Errors become IssueTrackerError with a message a person can act on: the HTTP status and a
reason from FAILURE_REASONS, never the tracker's own words (its body, its `message`), since the base URL is the
project's choice and whatever answers there writes what it likes. The token never appears in a message.

Every request of a push goes to the addresses the base URL's host resolved to when the push began, once checked by
the outbound policy (clear.outbound, purpose `tracker`: https and public addresses unless the operator's
CLEAR_TRACKER_ALLOW_HTTP / CLEAR_TRACKER_ALLOW_PRIVATE say otherwise); the Host header, SNI and the certificate
check use the name; no redirect is followed (the token would go along).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from urllib.parse import quote, urljoin, urlsplit

from urllib3 import HTTPHeaderDict
from urllib3.exceptions import HTTPError, NewConnectionError, ProtocolError, SSLError, TimeoutError
from urllib3.response import BaseHTTPResponse

from clear.outbound import (
    OutboundInvalidError,
    OutboundTarget,
    OutboundUnresolvedError,
    outbound_target_resolve,
)
from clear.outbound.pinned import outbound_request

from .body import FINGERPRINT_RE
from .errors import IssueTrackerError

TIMEOUT_SECONDS = 20
MAX_REPLY_BYTES = 32 * 1024 * 1024  # a page of 100 issues of GitHub's longest bodies; past it the reply is cut off
MAX_PAGES = 200  # 20,000 issues; past that the search gives up rather than loop on a broken Link header
USER_AGENT = "clear-tickets"
_LINK_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')
FAILURE_REASONS = ("bad credentials", "forbidden", "not found", "gone", "refused", "rate limited", "server error",
                   "timed out", "could not connect", "unexpected reply", "address not allowed")
LINK_MAX = 500  # Ticket.external_url
NUMBER_MAX = 2**31 - 1  # Ticket.external_number


@dataclass(frozen=True)
class RemoteIssue:
    number: int
    url: str
    title: str
    body: str
    state: str  # open or closed


def _next_link(header: str | None) -> str | None:
    for part in (header or "").split(","):
        match = _LINK_NEXT.search(part)
        if match:
            return match.group(1)
    return None


def _number(value) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= NUMBER_MAX:
        return None
    return value


@dataclass(frozen=True)
class Reply:
    """An answer of the tracker, read whole (up to MAX_REPLY_BYTES)."""

    status_code: int
    headers: HTTPHeaderDict  # case-insensitive, as HTTP header names are
    content: bytes

    def json(self):
        return json.loads(self.content)


def _read(response: BaseHTTPResponse) -> Reply:
    data = response.read(MAX_REPLY_BYTES + 1, decode_content=True) or b""
    if len(data) > MAX_REPLY_BYTES:
        data = b""  # cut off: not JSON, an unexpected reply
    return Reply(status_code=response.status, headers=HTTPHeaderDict(response.headers), content=data)


class IssueTracker:
    def __init__(self, *, base_url: str, repository: str, token: str):
        self.base_url = base_url.rstrip("/")
        self.repository = repository
        owner, name = repository.split("/", 1)
        self.issues_url = f"{self.base_url}/repos/{quote(owner, safe='')}/{quote(name, safe='')}/issues"
        host = (urlsplit(self.base_url).hostname or "").lower()
        self._link_hosts = {host, host.removeprefix("api.")} - {""}
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
                         "X-GitHub-Api-Version": "2022-11-28", "User-Agent": USER_AGENT}
        self._target: OutboundTarget | None = None

    def _pinned(self) -> OutboundTarget:
        """The base URL's host resolved and checked once per push (this object's life): every request after goes to
        those addresses, whatever DNS says in between."""
        if self._target is None:
            try:
                self._target = outbound_target_resolve(url=self.base_url, purpose="tracker", field="base_url")
            except OutboundUnresolvedError:
                raise self._unreachable("could not connect") from None
            except OutboundInvalidError as exc:  # a refused address, or plain http the operator no longer allows
                message = exc.message.removeprefix("base_url: ").rstrip(".")
                raise IssueTrackerError(
                    f"The issue tracker at {self.base_url} was not contacted: {message}; change the connection's "
                    "base_url.", reason="address not allowed", fatal=True) from None
        return self._target

    def _request(self, method: str, url: str, *, json_body=None) -> Reply:
        target = self._pinned()
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = dict(self._headers)
        body = None
        if json_body is not None:
            body = json.dumps(json_body).encode()
            headers["Content-Type"] = "application/json"
        try:
            pinned = outbound_request(target=target, method=method, path=path, body=body, headers=headers,
                                      timeout=TIMEOUT_SECONDS)
            try:
                response = _read(pinned.response)
            finally:
                pinned.close()
        except (NewConnectionError, SSLError, ProtocolError):  # NewConnectionError is a TimeoutError too
            raise self._unreachable("could not connect") from None
        except TimeoutError:
            raise self._unreachable("timed out") from None
        except HTTPError:
            raise self._unreachable("unexpected reply") from None
        except OSError:
            raise self._unreachable("could not connect") from None
        if not 200 <= response.status_code < 300:  # a redirect is not followed: the token would go along
            raise self._error(response, method)
        return response

    def _unreachable(self, reason: str) -> IssueTrackerError:
        return IssueTrackerError(
            f"Could not reach the issue tracker at {self.base_url}: {reason}; the push will be tried again later.",
            reason=reason, transient=True)

    def _error(self, response: Reply, method: str) -> IssueTrackerError:
        status = response.status_code
        if status == 401:
            return IssueTrackerError(
                "The issue tracker rejected the token (401 Unauthorized): bad credentials; check the connection's "
                "token.", reason="bad credentials", http_status=401, fatal=True)
        if status == 403 and response.headers.get("X-RateLimit-Remaining") == "0" or status == 429:
            return IssueTrackerError(
                f"The issue tracker answered {status}: rate limited; the push will be tried again later.",
                reason="rate limited", http_status=status, transient=True)
        if status == 403:
            return IssueTrackerError(
                f"The issue tracker answered 403: forbidden; the token may not {method} issues of {self.repository}: "
                "give it the issues read and write permission.", reason="forbidden", http_status=403, fatal=True)
        if status == 404:
            return IssueTrackerError(
                f"Repository {self.repository} was not found at {self.base_url} (404 not found): check owner/name, "
                "the base URL, and that the token can see the repository.", reason="not found", http_status=404,
                fatal=True)
        if status == 410:
            return IssueTrackerError("The issue was deleted on the tracker (410): gone.", reason="gone",
                                     http_status=410)
        if status == 422:
            return IssueTrackerError(
                "The issue tracker answered 422: refused; it did not accept the issue's title or body.",
                reason="refused", http_status=422)
        if status >= 500:
            return IssueTrackerError(
                f"The issue tracker answered {status}: server error; the push will be tried again later.",
                reason="server error", http_status=status, transient=True)
        return IssueTrackerError(f"The issue tracker answered {status}: unexpected reply.",
                                 reason="unexpected reply", http_status=status)

    def _unexpected(self, response: Reply, what: str) -> IssueTrackerError:
        return IssueTrackerError(
            f"The issue tracker at {self.base_url} answered {response.status_code}: unexpected reply ({what}).",
            reason="unexpected reply", http_status=response.status_code)

    def _json(self, response: Reply):
        try:
            return response.json()
        except ValueError:
            raise self._unexpected(response, "not JSON: is the base URL its API root?") from None

    def _link(self, url) -> str:
        """The issue's page, kept only when it is https on the tracker's own host: a link elsewhere would send the
        people who follow it wherever the tracker's answer says. GitHub's API is on api.github.com, its pages on
        github.com: the host without `api.` counts as the tracker's own too."""
        if not isinstance(url, str) or len(url) > LINK_MAX or any(c.isspace() or c < " " for c in url):
            return ""
        if "\\" in url:  # browsers read it as a slash: the host they go to would not be the one checked here
            return ""
        try:
            parts = urlsplit(url)
            host = parts.hostname
        except ValueError:
            return ""
        if parts.scheme != "https" or "@" in parts.netloc or not host:
            return ""
        return url if host in self._link_hosts else ""

    def _issue(self, data, response: Reply) -> RemoteIssue:
        number = _number(data.get("number")) if isinstance(data, dict) else None
        if number is None:
            raise self._unexpected(response, "no issue number")
        return RemoteIssue(number=number, url=self._link(data.get("html_url")), title=str(data.get("title") or ""),
                           body=str(data.get("body") or ""), state=str(data.get("state") or "open"))

    def issues_by_fingerprint(self) -> dict[str, RemoteIssue]:
        """Every issue of the repository (pull requests aside) whose body holds a Clear fingerprint comment; the
        lowest number wins when two hold the same one."""
        found: dict[str, RemoteIssue] = {}
        url: str | None = f"{self.issues_url}?state=all&per_page=100"
        origin = urlsplit(self.base_url).netloc
        for _ in range(MAX_PAGES):
            if url is None:
                break
            response = self._request("GET", url)
            page = self._json(response)
            if not isinstance(page, list):
                raise self._unexpected(response, "the issue list is not a list")
            for item in page:
                if not isinstance(item, dict) or "pull_request" in item or _number(item.get("number")) is None:
                    continue
                match = FINGERPRINT_RE.search(str(item.get("body") or ""))
                if match:
                    issue = self._issue(item, response)
                    if match.group(1) not in found or issue.number < found[match.group(1)].number:
                        found[match.group(1)] = issue
            url = _next_link(response.headers.get("Link"))
            if url is not None:
                url = urljoin(self.issues_url, url)
                if urlsplit(url).netloc != origin:  # the token is never sent to another host
                    raise self._unexpected(response, "the next page is on another host")
        return found

    def create(self, *, title: str, body: str) -> RemoteIssue:
        response = self._request("POST", self.issues_url, json_body={"title": title, "body": body})
        return self._issue(self._json(response), response)

    def update(self, *, number: int, title: str, body: str, state: str, state_reason: str | None) -> RemoteIssue:
        data = {"title": title, "body": body, "state": state}
        if state_reason:
            data["state_reason"] = state_reason
        response = self._request("PATCH", f"{self.issues_url}/{int(number)}", json_body=data)
        return self._issue(self._json(response), response)
