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
skipped and counted. Requests time out, and 429 / 5xx answers are retried honouring Retry-After (langfuse_client.py); API objects become
events in langfuse_events.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone

from clear.projects.models import Project
from traces.models import Trace
from traces.normalize import normalize_ingestion_batch
from traces.normalize.values import langfuse_trace_id
from traces.services.finalize import trace_finalize
from traces.services.imports import span_keys_stored
from traces.services.ingest import langfuse_batch_ingest
from traces.services.langfuse_client import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    LangfuseClient,
    LangfusePullError,
    PullSummary,
)
from traces.services.langfuse_events import observation_event, score_event, trace_event

DEFAULT_PAGE_SIZE = 100
_V2_OBSERVATION_FIELDS = "core,basic,time,io,metadata,model,usage,prompt"

ProgressCallback = Callable[[str, int], None]  # (what: "traces" | "observations" | "scores", how many so far)


def _iso(value: datetime) -> str:
    return value.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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
    "langfuse_pull",
    "parse_time",
]
