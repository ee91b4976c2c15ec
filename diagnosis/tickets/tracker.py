"""A small client for GitHub-compatible issues APIs (github.com, GitHub Enterprise `/api/v3`, Gitea `/api/v1`).

Only what pushing tickets needs: list a repository's issues (every state, paginated through the Link header),
create one, update one. Errors become IssueTrackerError with a message a person can act on; the token never
appears in a message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, urljoin, urlsplit

import requests

from .body import FINGERPRINT_RE
from .errors import IssueTrackerError

TIMEOUT_SECONDS = 20
MAX_PAGES = 200  # 20,000 issues; past that the search gives up rather than loop on a broken Link header
USER_AGENT = "clear-tickets"
_LINK_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


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


def _issue(data: dict) -> RemoteIssue:
    return RemoteIssue(number=int(data["number"]), url=str(data.get("html_url") or data.get("url") or ""),
                       title=str(data.get("title") or ""), body=str(data.get("body") or ""),
                       state=str(data.get("state") or "open"))


class IssueTracker:
    def __init__(self, *, base_url: str, repository: str, token: str, session: requests.Session | None = None):
        self.base_url = base_url.rstrip("/")
        self.repository = repository
        owner, name = repository.split("/", 1)
        self.issues_url = f"{self.base_url}/repos/{quote(owner, safe='')}/{quote(name, safe='')}/issues"
        self.session = session or requests.Session()
        self.session.headers.update({"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
                                     "X-GitHub-Api-Version": "2022-11-28", "User-Agent": USER_AGENT})

    def _request(self, method: str, url: str, **kwargs) -> requests.Response:
        try:
            response = self.session.request(method, url, timeout=TIMEOUT_SECONDS, allow_redirects=False, **kwargs)
        except requests.RequestException as exc:
            raise IssueTrackerError(f"Could not reach the issue tracker at {self.base_url}: {type(exc).__name__}",
                                    transient=True) from None
        if response.status_code >= 400:
            raise self._error(response, method)
        return response

    def _error(self, response: requests.Response, method: str) -> IssueTrackerError:
        status = response.status_code
        try:
            data = response.json()
        except ValueError:
            data = {}
        detail = str(data.get("message") or "")[:300] if isinstance(data, dict) else ""
        errors = data.get("errors") if isinstance(data, dict) else None
        if errors:
            detail += " " + "; ".join(str(e.get("message") or e.get("code") or e) if isinstance(e, dict) else str(e)
                                      for e in errors[:5])[:500]
        suffix = f" ({detail.strip()})" if detail.strip() else ""
        if status == 401:
            return IssueTrackerError(f"The issue tracker rejected the token (401 Unauthorized){suffix}: check the "
                                     "connection's token.", http_status=401, fatal=True)
        if status == 403 and response.headers.get("X-RateLimit-Remaining") == "0" or status == 429:
            return IssueTrackerError(f"The issue tracker's rate limit was reached ({status}){suffix}; the push will "
                                     "be tried again later.", http_status=status, transient=True)
        if status == 403:
            return IssueTrackerError(f"The token may not {method} issues of {self.repository} (403 Forbidden)"
                                     f"{suffix}: give it the issues read and write permission.", http_status=403,
                                     fatal=True)
        if status == 404:
            return IssueTrackerError(f"Repository {self.repository} was not found at {self.base_url} (404){suffix}: "
                                     "check owner/name, the base URL, and that the token can see the repository.",
                                     http_status=404, fatal=True)
        if status == 410:
            return IssueTrackerError(f"The issue was deleted on the tracker (410 Gone){suffix}.", http_status=410)
        if status == 422:
            return IssueTrackerError(f"The issue tracker refused the issue (422 Unprocessable Entity){suffix}.",
                                     http_status=422)
        if status >= 500:
            return IssueTrackerError(f"The issue tracker failed ({status}){suffix}; the push will be tried again "
                                     "later.", http_status=status, transient=True)
        return IssueTrackerError(f"The issue tracker answered {status}{suffix}.", http_status=status)

    def _json(self, response: requests.Response):
        try:
            return response.json()
        except ValueError:
            raise IssueTrackerError(f"The issue tracker at {self.base_url} did not answer JSON "
                                    f"({response.status_code}): is the base URL its API root?") from None

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
                raise IssueTrackerError(f"The issue tracker's issue list at {self.issues_url} is not a list.")
            for item in page:
                if not isinstance(item, dict) or "pull_request" in item or "number" not in item:
                    continue
                match = FINGERPRINT_RE.search(str(item.get("body") or ""))
                if match:
                    issue = _issue(item)
                    if match.group(1) not in found or issue.number < found[match.group(1)].number:
                        found[match.group(1)] = issue
            url = _next_link(response.headers.get("Link"))
            if url is not None:
                url = urljoin(self.issues_url, url)
                if urlsplit(url).netloc != origin:  # the token is never sent to another host
                    raise IssueTrackerError(f"The issue tracker's next page link points to another host: {url!r}.")
        return found

    def create(self, *, title: str, body: str) -> RemoteIssue:
        return _issue(self._json(self._request("POST", self.issues_url, json={"title": title, "body": body})))

    def update(self, *, number: int, title: str, body: str, state: str, state_reason: str | None) -> RemoteIssue:
        data = {"title": title, "body": body, "state": state}
        if state_reason:
            data["state_reason"] = state_reason
        return _issue(self._json(self._request("PATCH", f"{self.issues_url}/{int(number)}", json=data)))
