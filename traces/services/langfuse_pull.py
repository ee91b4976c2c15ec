"""Pull traces, observations and scores from an existing Langfuse through its public API (`manage.py langfuse_pull`).

Endpoints (Basic auth public:secret, research/observability.md §4.4):

* traces — `GET /api/public/traces`, page-based (`page` from 1, `limit`, `meta.totalPages`), window
  `fromTimestamp` / `toTimestamp`, ordered `timestamp.asc`;
* observations — `GET /api/public/observations` (v1, page-based, window `fromStartTime` / `toStartTime`); when the
  server no longer has it (404/410, Langfuse v4 Cloud), `GET /api/public/v2/observations` (cursor-based, `meta.cursor`,
  all field groups, `parseIoAsJson=true`);
* scores — `GET /api/public/v2/scores` (page-based, window `fromTimestamp` / `toTimestamp`); older servers without it
  get `GET /api/public/scores`.

Everything pulled is turned into Langfuse ingestion events (`trace-create`, `<type>-create`, `score-create`) and
stored through `normalize_ingestion_batch` + `langfuse_batch_ingest`, so the mapping (ids, nodes, usage, outcome
scores) is the one used for pushed Langfuse data, and a re-pull is idempotent (creates are upserts, scores are
upserted by their Langfuse id). Observations are selected by their own start time, so an observation of a trace that
started just before the window is pulled with it only if it started inside the window. Scores whose trace is neither
pulled nor already stored (a trace outside the window) and scores without a trace (session or dataset-run scores) are
skipped and counted. Requests time out, and 429 / 5xx answers are retried honouring Retry-After.
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
from clear.projects.models import Project
from traces.models import Trace
from traces.normalize import normalize_ingestion_batch
from traces.normalize.values import langfuse_trace_id
from traces.services.finalize import trace_finalize
from traces.services.imports import span_keys_stored
from traces.services.ingest import langfuse_batch_ingest

DEFAULT_PAGE_SIZE = 100
DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 5
MAX_RETRY_WAIT = 60.0
_RETRY_STATUSES = {429, 500, 502, 503, 504}
_V2_OBSERVATION_FIELDS = "core,basic,time,io,metadata,model,usage,prompt"
_OBSERVATION_EVENTS = {
    "GENERATION": "generation-create",
    "SPAN": "span-create",
    "EVENT": "event-create",
    "AGENT": "agent-create",
    "TOOL": "tool-create",
    "CHAIN": "chain-create",
    "RETRIEVER": "retriever-create",
    "EVALUATOR": "evaluator-create",
    "EMBEDDING": "embedding-create",
    "GUARDRAIL": "guardrail-create",
}
_LEVELS = {"DEBUG", "DEFAULT", "WARNING", "ERROR"}
_SCORE_TYPES = {"NUMERIC", "CATEGORICAL", "BOOLEAN", "TEXT", "CORRECTION"}
_STRING_SCORE_TYPES = {"CATEGORICAL", "TEXT", "CORRECTION"}

ProgressCallback = Callable[[str, int], None]  # (what: "traces" | "observations" | "scores", how many so far)


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


def _iso(value: datetime) -> str:
    return value.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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


# ---------------------------------------------------------------------------------------------------------------
# Langfuse API objects -> ingestion events


def _put(body: dict, key: str, value: Any) -> None:
    if value is not None:
        body[key] = value


def _numbers(value: Any) -> dict | None:
    """A usage / cost map keeping what the ingestion schema accepts (numbers >= 0, nested maps, a unit string)."""
    if not isinstance(value, dict):
        return None
    out = {}
    for key, item in value.items():
        if isinstance(item, bool):
            continue
        if isinstance(item, (int, float)) and item >= 0:
            out[key] = item
        elif isinstance(item, str) and key == "unit":
            out[key] = item
        elif isinstance(item, str):
            try:
                number = float(item)
            except ValueError:
                continue
            if number >= 0:
                out[key] = int(number) if number.is_integer() else number
        elif isinstance(item, dict):
            out[key] = item
    return out or None


def trace_event(*, trace: dict) -> dict | None:
    trace_id = trace.get("id")
    if not isinstance(trace_id, str) or not trace_id.strip():
        return None
    body: dict[str, Any] = {"id": trace_id}
    for key in ("timestamp", "name", "input", "output", "sessionId", "userId", "release", "version",
                "environment", "metadata", "externalId"):
        _put(body, key, trace.get(key))
    if isinstance(trace.get("tags"), list):
        body["tags"] = [t for t in trace["tags"] if isinstance(t, str)]
    if isinstance(trace.get("public"), bool):
        body["public"] = trace["public"]
    return {"id": f"clear-pull-trace-{trace_id}", "type": "trace-create", "timestamp": trace.get("timestamp"),
            "body": body}


def observation_event(*, observation: dict) -> dict | None:
    obs_id = observation.get("id")
    if not isinstance(obs_id, str) or not obs_id.strip():
        return None
    kind = str(observation.get("type") or "SPAN").upper()
    event_type = _OBSERVATION_EVENTS.get(kind, "span-create")
    body: dict[str, Any] = {"id": obs_id}
    for key in ("traceId", "parentObservationId", "name", "startTime", "endTime", "completionStartTime", "input",
                "output", "metadata", "statusMessage", "version", "environment"):
        _put(body, key, observation.get(key))
    model = observation.get("model") or observation.get("providedModelName")
    if isinstance(model, str) and model:
        body["model"] = model
    level = observation.get("level")
    if isinstance(level, str) and level.upper() in _LEVELS:
        body["level"] = level.upper()
    if isinstance(observation.get("modelParameters"), dict):
        body["modelParameters"] = observation["modelParameters"]
    usage_details = _numbers(observation.get("usageDetails"))
    cost_details = _numbers(observation.get("costDetails"))
    usage = _numbers(observation.get("usage"))
    if usage_details:
        body["usageDetails"] = usage_details
    if usage and not usage_details:
        body["usage"] = usage
    if not cost_details:
        for key in ("calculatedTotalCost", "totalCost"):
            total = observation.get(key)
            if isinstance(total, (int, float)) and not isinstance(total, bool) and total >= 0:
                cost_details = {"total": total}
                break
    if cost_details:
        body["costDetails"] = cost_details
    prompt_name, prompt_version = observation.get("promptName"), observation.get("promptVersion")
    if prompt_name is not None and prompt_version is not None:
        body["promptName"], body["promptVersion"] = prompt_name, prompt_version
    return {"id": f"clear-pull-observation-{obs_id}", "type": event_type,
            "timestamp": observation.get("startTime"), "body": body}


def score_event(*, score: dict) -> dict | None:
    score_id = score.get("id")
    if not isinstance(score_id, str) or not score_id.strip():
        return None
    data_type = score.get("dataType") if score.get("dataType") in _SCORE_TYPES else None
    value = score.get("value")
    string_value = score.get("stringValue")
    if (data_type in _STRING_SCORE_TYPES or value is None) and isinstance(string_value, str):
        value = string_value
    body: dict[str, Any] = {"id": score_id, "value": value}
    for key in ("traceId", "observationId", "name", "comment", "source", "environment", "metadata"):
        _put(body, key, score.get(key))
    _put(body, "dataType", data_type)
    return {"id": f"clear-pull-score-{score_id}", "type": "score-create", "timestamp": score.get("timestamp"),
            "body": body}


# ---------------------------------------------------------------------------------------------------------------
# pulling and storing


class _Store:
    def __init__(self, *, project: Project, summary: PullSummary) -> None:
        self.project = project
        self.summary = summary
        self.trace_ids: set[str] = set()

    def events(self, *, kind: str, events: list[dict]) -> None:
        if not events:
            return
        batch = normalize_ingestion_batch(payload={"batch": events})
        for error in batch.errors:
            event_id = str(error.get("id") or "")
            self.summary.events_refused.append(
                f"{kind} {event_id.removeprefix(f'clear-pull-{kind}-')}: {error.get('message')}"
            )
        keys = {(s.trace_id, s.span_id) for s in batch.spans}
        present = span_keys_stored(project=self.project, keys=keys)
        langfuse_batch_ingest(project=self.project, batch=batch)
        self.summary.spans_created += len(keys - present)
        self.summary.spans_already_present += len(keys & present)
        self.trace_ids.update(trace_id for trace_id, _ in keys)
        self.trace_ids.update(update.trace_id for update in batch.traces)
        self.trace_ids.update(update.trace_id for update in batch.updates if update.trace_id)
        self.trace_ids.update(score.trace_id for score in batch.scores)


def langfuse_pull(
    *,
    project: Project,
    host: str,
    public_key: str,
    secret_key: str,
    from_time: datetime,
    to_time: datetime,
    page_size: int = DEFAULT_PAGE_SIZE,
    timeout: float = DEFAULT_TIMEOUT,
    retries: int = DEFAULT_RETRIES,
    progress: ProgressCallback | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> PullSummary:
    """Pull the window [from_time, to_time) into `project` and finalise the touched traces."""
    if from_time.tzinfo is None or to_time.tzinfo is None:
        raise LangfusePullError("The time window needs time zones (e.g. 2025-01-01T00:00:00Z).")
    if from_time >= to_time:
        raise LangfusePullError(f"--from ({_iso(from_time)}) must be before --to ({_iso(to_time)}).")
    if not public_key or not secret_key:
        raise LangfusePullError("Both --public-key and --secret-key are needed (Basic auth public:secret).")
    summary = PullSummary(window=(_iso(from_time), _iso(to_time)))
    client = LangfuseClient(host=host, public_key=public_key, secret_key=secret_key, timeout=timeout,
                            retries=retries, sleep=sleep, summary=summary)
    summary.host = client.host
    store = _Store(project=project, summary=summary)
    started = datetime.now(timezone.utc)
    limit = max(1, min(page_size, 1000))
    try:
        # traces
        traces_window = {"fromTimestamp": _iso(from_time), "toTimestamp": _iso(to_time), "orderBy": "timestamp.asc"}
        pulled_traces: set[str] = set()
        for page in client.pages("/api/public/traces", traces_window, limit=limit):
            events = [e for e in (trace_event(trace=t) for t in page) if e is not None]
            pulled_traces.update(langfuse_trace_id(e["body"]["id"]) for e in events)
            store.events(kind="trace", events=events)
            summary.traces += len(events)
            if progress:
                progress("traces", summary.traces)

        # observations: v1 (page-based), or v2 (cursor-based) on servers without v1
        window = {"fromStartTime": _iso(from_time), "toStartTime": _iso(to_time)}
        pages = client.pages("/api/public/observations", window, limit=limit, missing_ok=True)
        summary.observations_api = "v1"
        if pages is None:
            v2 = {**window, "fields": _V2_OBSERVATION_FIELDS, "parseIoAsJson": "true"}
            pages = client.cursor_pages("/api/public/v2/observations", v2, limit=limit, missing_ok=True)
            summary.observations_api = "v2"
            if pages is None:
                raise LangfusePullError(
                    f"{client.host} has neither /api/public/observations nor /api/public/v2/observations: check "
                    "--host, it must be the Langfuse base URL."
                )
        for page in pages:
            events = [e for e in (observation_event(observation=o) for o in page) if e is not None]
            store.events(kind="observation", events=events)
            summary.observations += len(events)
            if progress:
                progress("observations", summary.observations)

        # scores
        window = {"fromTimestamp": _iso(from_time), "toTimestamp": _iso(to_time)}
        pages = client.pages("/api/public/v2/scores", window, limit=limit, missing_ok=True)
        summary.scores_api = "v2"
        if pages is None:
            pages = client.pages("/api/public/scores", window, limit=limit, missing_ok=True)
            summary.scores_api = "v1"
        for page in pages or []:
            keep = []
            candidates = [(s, score_event(score=s)) for s in page]
            raw_ids = {s.get("traceId") for s, _ in candidates if isinstance(s.get("traceId"), str)}
            ids = {raw: langfuse_trace_id(raw) for raw in raw_ids if raw.strip()}
            stored = set(Trace.objects.filter(project=project, trace_id__in=set(ids.values()))
                         .values_list("trace_id", flat=True))
            for score, event in candidates:
                trace_id = ids.get(score.get("traceId"))
                if event is None or trace_id is None or (trace_id not in pulled_traces and trace_id not in stored
                                                         and trace_id not in store.trace_ids):
                    summary.scores_skipped += 1
                    continue
                keep.append(event)
            before = len(summary.events_refused)
            store.events(kind="score", events=keep)
            summary.scores += len(keep) - (len(summary.events_refused) - before)
            if progress:
                progress("scores", summary.scores)
    finally:
        client.close()

    touched = Trace.objects.filter(project=project, trace_id__in=store.trace_ids)
    pks = sorted(touched.values_list("pk", flat=True))
    for pk in pks:
        trace_finalize(trace_pk=pk)
    summary.traces_touched = len(pks)
    summary.traces_created = touched.filter(first_received_at__gte=started).count()
    return summary


def parse_time(*, value: str) -> datetime:
    """An ISO-8601 time or date (`2025-01-01`, `2025-01-01T12:00:00Z`); naive values are UTC."""
    text = (value or "").strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise LangfusePullError(
            f"{value!r} is not an ISO-8601 time: use e.g. 2025-01-01 or 2025-01-01T12:00:00Z."
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


__all__ = [
    "LangfuseAuthError",
    "LangfuseClient",
    "LangfusePullError",
    "LangfuseUnreachable",
    "PullSummary",
    "host_normalize",
    "langfuse_pull",
    "observation_event",
    "parse_time",
    "score_event",
    "trace_event",
]
