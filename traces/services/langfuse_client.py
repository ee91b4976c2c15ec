"""A small client for Langfuse's public API (GET only): Basic auth public:secret, timeouts, retries of 429 / 5xx
answers honouring Retry-After, page- and cursor-based listings, and errors that say what to check (used by
langfuse_pull).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import requests

from clear.errors import ClearError

DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 5
MAX_RETRY_WAIT = 60.0
_RETRY_STATUSES = {429, 500, 502, 503, 504}


class LangfusePullError(ClearError):
    code = "langfuse_pull"


class LangfuseAuthError(LangfusePullError):
    status_code = 401
    code = "langfuse_auth"


class LangfuseUnreachable(LangfusePullError):
    status_code = 502
    code = "langfuse_unreachable"


@dataclass
class PullSummary:
    host: str = ""
    window: tuple[str, str] = ("", "")
    traces: int = 0
    observations: int = 0
    scores: int = 0
    scores_skipped: int = 0
    events_refused: list[str] = field(default_factory=list)  # "observation <id>: <reason>"
    spans_created: int = 0
    spans_already_present: int = 0
    traces_touched: int = 0
    traces_created: int = 0
    observations_api: str = ""
    scores_api: str = ""
    requests: int = 0
    retries: int = 0


def host_normalize(*, host: str) -> str:
    """The base URL: scheme and host required, a trailing `/` or `/api/public` dropped."""
    value = (host or "").strip().rstrip("/")
    for suffix in ("/api/public", "/api"):
        if value.endswith(suffix):
            value = value[: -len(suffix)]
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise LangfusePullError(
            f"--host must be the Langfuse base URL with its scheme, e.g. https://cloud.langfuse.com or "
            f"http://localhost:3000; got {host!r}."
        )
    return value


def _retry_after(response: requests.Response, attempt: int) -> float:
    header = response.headers.get("Retry-After")
    if header:
        try:
            return max(0.0, min(float(header), MAX_RETRY_WAIT))
        except ValueError:
            try:
                when = parsedate_to_datetime(header)
                return max(0.0, min((when - datetime.now(timezone.utc)).total_seconds(), MAX_RETRY_WAIT))
            except (TypeError, ValueError):
                pass
    return min(2.0 ** attempt, MAX_RETRY_WAIT)


class LangfuseClient:
    """GETs on the public API with Basic auth, timeouts, retries (429/5xx, Retry-After) and clear errors."""

    def __init__(
        self,
        *,
        host: str,
        public_key: str,
        secret_key: str,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        sleep: Callable[[float], None] = time.sleep,
        summary: PullSummary | None = None,
    ) -> None:
        self.host = host_normalize(host=host)
        self.timeout = timeout
        self.retries = retries
        self.sleep = sleep
        self.summary = summary or PullSummary()
        self.session = requests.Session()
        self.session.auth = (public_key, secret_key)
        self.session.headers.update({"Accept": "application/json", "User-Agent": "clear-langfuse-pull/1"})

    def close(self) -> None:
        self.session.close()

    def get(self, path: str, params: dict[str, Any], *, missing_ok: bool = False) -> dict | None:
        """The JSON body; None for 404/410 when `missing_ok` (an endpoint this server does not have)."""
        url = f"{self.host}{path}"
        attempt = 0
        while True:
            self.summary.requests += 1
            try:
                response = self.session.get(url, params=params, timeout=self.timeout)
            except requests.Timeout:
                problem = f"no answer within {self.timeout:g}s"
            except requests.ConnectionError as exc:
                problem = f"connection failed ({_short(exc)})"
            else:
                problem = None
            if problem is not None:
                if attempt < min(self.retries, 2):
                    attempt += 1
                    self.summary.retries += 1
                    self.sleep(min(0.5 * 2 ** (attempt - 1), 5.0))
                    continue
                raise LangfuseUnreachable(
                    f"Could not reach Langfuse at {self.host}: {problem}. Check --host (the base URL of your "
                    "Langfuse, e.g. https://cloud.langfuse.com) and that it is reachable from here."
                )
            status = response.status_code
            if status in _RETRY_STATUSES and attempt < self.retries:
                wait = _retry_after(response, attempt)
                attempt += 1
                self.summary.retries += 1
                self.sleep(wait)
                continue
            if status in (401, 403):
                raise LangfuseAuthError(
                    f"The keys were refused by {self.host} (HTTP {status} on {path}): check --public-key and "
                    "--secret-key (a project's pk-lf-... / sk-lf-... pair from Langfuse > Settings > API keys; "
                    "organisation or scores-only keys cannot read traces)."
                )
            if status in (404, 410) and missing_ok:
                return None
            if status >= 400:
                raise LangfusePullError(
                    f"{self.host} answered HTTP {status} on {path}{' after retries' if attempt else ''}: "
                    f"{_short_body(response)}"
                    + (" Check --host: is this a Langfuse server?" if status in (404, 405) else "")
                )
            try:
                body = response.json()
            except ValueError:
                raise LangfusePullError(
                    f"{self.host} answered {path} with something that is not JSON ({_short_body(response)}): check "
                    "--host, it must be the Langfuse base URL."
                ) from None
            if not isinstance(body, dict) or not isinstance(body.get("data"), list):
                raise LangfusePullError(
                    f"{self.host} answered {path} without a `data` list: check --host, it must be the Langfuse "
                    "base URL."
                )
            return body

    def pages(self, path: str, params: dict[str, Any], *, limit: int, missing_ok: bool = False
              ) -> Iterator[list[dict]] | None:
        """Page-based listing (`page` from 1, `meta.totalPages`); None when the endpoint is missing."""
        first = self.get(path, {**params, "page": 1, "limit": limit}, missing_ok=missing_ok)
        if first is None:
            return None
        return self._page_iter(path, params, limit=limit, first=first)

    def _page_iter(self, path: str, params: dict[str, Any], *, limit: int, first: dict) -> Iterator[list[dict]]:
        body, page, previous_ids = first, 1, None
        while True:
            data = [item for item in body["data"] if isinstance(item, dict)]
            ids = [item.get("id") for item in data]
            if data and ids == previous_ids:
                return  # a server that ignores `page` would loop forever
            if data:
                yield data
            meta = body.get("meta") if isinstance(body.get("meta"), dict) else {}
            total_pages = meta.get("totalPages")
            if not data or (isinstance(total_pages, int) and page >= total_pages):
                return
            if not isinstance(total_pages, int) and len(body["data"]) < limit:
                return
            page += 1
            previous_ids = ids
            body = self.get(path, {**params, "page": page, "limit": limit})

    def cursor_pages(self, path: str, params: dict[str, Any], *, limit: int, missing_ok: bool = False
                     ) -> Iterator[list[dict]] | None:
        """Cursor-based listing (`meta.cursor`, absent = done); None when the endpoint is missing."""
        first = self.get(path, {**params, "limit": limit}, missing_ok=missing_ok)
        if first is None:
            return None
        return self._cursor_iter(path, params, limit=limit, first=first)

    def _cursor_iter(self, path: str, params: dict[str, Any], *, limit: int, first: dict) -> Iterator[list[dict]]:
        body, seen = first, set()
        while True:
            data = [item for item in body["data"] if isinstance(item, dict)]
            if data:
                yield data
            meta = body.get("meta") if isinstance(body.get("meta"), dict) else {}
            cursor = meta.get("cursor")
            if not cursor or not data or cursor in seen:
                return
            seen.add(cursor)
            body = self.get(path, {**params, "limit": limit, "cursor": cursor})


def _short(exc: Exception) -> str:
    text = str(exc)
    for marker in ("Connection refused", "Name or service not known", "nodename nor servname", "timed out",
                   "No route to host", "Temporary failure in name resolution"):
        if marker in text:
            return marker
    return text[:200]


def _short_body(response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        text = " ".join(response.text.split())
        return text[:200] or "(empty body)"
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])[:300]
    return str(body)[:200]


__all__ = [
    "LangfuseAuthError",
    "LangfuseClient",
    "LangfusePullError",
    "LangfuseUnreachable",
    "PullSummary",
    "host_normalize",
]
