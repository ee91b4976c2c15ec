"""clearctl: a thin client of Clear's REST API for CI and terminals (standard library only, no Django).

    CLEAR_URL=https://clear.example.com CLEAR_API_KEY=sk-clear-… clearctl runs start --release v42 --wait

Commands: gate (fail a CI build on new or worse insights against a baseline release: clear/cli_gate.py),
runs start|status|wait, traces list, tickets export.

Configuration: CLEAR_URL (default http://127.0.0.1:8000) and CLEAR_API_KEY (a project's secret key), or --url and
--api-key. Exit codes, the same for every command:
  0  success;
  1  a verdict or a failure of Clear's: the gate failed (more new or worse insights than allowed), the run waited for
     did not succeed (or not within --timeout), or Clear failed the request (5xx, e.g. a failed export; rate limited);
  2  something to fix before trying again: bad arguments (argparse's, or the API's 4xx such as an unknown judge, run
     id or release without traces), a missing or refused key (401/403: CLEAR_API_KEY), Clear unreachable or CLEAR_URL
     not its base URL, an output file that cannot be written. `gate` answers 2 for every error, so its 1 always means
     the gate failed.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000"
FINAL_STATUSES = {"succeeded", "failed", "cancelled", "budget_exhausted"}
USER_AGENT = "clearctl/1"
MAX_THROTTLE_WAITS = 5


class CliError(Exception):
    def __init__(self, message: str, exit_code: int = 1, *, code: str = ""):
        super().__init__(message)
        self.exit_code = exit_code
        self.code = code  # the API's error code, e.g. "release_without_traces"; "" when no API answer said


class Client:
    def __init__(self, url: str, api_key: str, timeout: float = 60.0):
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.last_status: int | None = None  # of the last response, e.g. 200 (a run reused) or 201 (started)

    def request(self, method: str, path: str, *, body: dict | None = None, params: dict | None = None,
                raw: bool = False) -> Any:
        """The response's JSON (its text with raw=True); API errors raise CliError with the API's message."""
        url = path if path.startswith("http") else self.url + path
        query = urllib.parse.urlencode({k: v for k, v in (params or {}).items() if v not in (None, "")}, doseq=True)
        if query:
            url += ("&" if "?" in url else "?") + query
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.api_key}", "User-Agent": USER_AGENT}
        if not raw:
            headers["Accept"] = "application/json"
        if data is not None:
            headers["Content-Type"] = "application/json"
        for attempt in range(MAX_THROTTLE_WAITS + 1):
            request = urllib.request.Request(url, data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    self.last_status = response.status
                    content = response.read()
                    if raw:
                        return content.decode("utf-8")
                    return json.loads(content) if content else None
            except urllib.error.HTTPError as exc:
                if exc.code == 429 and attempt < MAX_THROTTLE_WAITS:
                    time.sleep(float(exc.headers.get("Retry-After") or 1))
                    continue
                message, code = _error_text(exc)
                # A 4xx would fail again as sent (arguments, key, URL): the caller has something to fix. A 5xx or a
                # rate limit that outlasted the waits is Clear's failure, like a failed gate: a CI retry may pass.
                usage = 400 <= exc.code < 500 and exc.code != 429
                raise CliError(message, 2 if usage else 1, code=code) from None
            except urllib.error.URLError as exc:
                raise CliError(f"Cannot reach Clear at {self.url}: {exc.reason}. Check CLEAR_URL.", 2) from None
            except ValueError as exc:  # not a URL at all, or a body that is not JSON (not Clear's API)
                raise CliError(f"Unexpected answer from {url}: {exc}. Check CLEAR_URL (Clear's base URL, e.g. "
                               "https://clear.example.com).", 2) from None
            except (OSError, http.client.HTTPException) as exc:  # dropped or timed out after connecting
                raise CliError(f"Lost the connection to Clear at {self.url}: {str(exc) or type(exc).__name__}. Check "
                               "CLEAR_URL and that Clear is running.", 2) from None
        raise CliError("Still rate limited after several waits; try again later.")  # pragma: no cover

    def pages(self, path: str, params: dict, limit: int):
        """Rows of a cursor-paginated list, following `next` until `limit` rows."""
        page = self.request("GET", path, params={**params, "page_size": min(limit, 500)})
        count = 0
        while True:
            for row in page["results"]:
                yield row
                count += 1
                if count >= limit:
                    return
            if not page.get("next"):
                return
            page = self.request("GET", page["next"])


def _error_text(exc: urllib.error.HTTPError) -> tuple[str, str]:
    """The message to print, and the API's error code ("" when the answer is not Clear's JSON)."""
    hint = {401: " Check CLEAR_API_KEY (or --api-key): a secret key of the project, sk-clear-….",
            403: " Check CLEAR_API_KEY (or --api-key): the key was refused here; use a secret key (sk-clear-…) of "
                 "the project you mean, and check that no proxy in front of Clear blocks it."}.get(exc.code, "")
    try:
        body = json.loads(exc.read())
        return f"{body.get('message', '')} [{exc.code} {body.get('code', '')}]{hint}", str(body.get("code") or "")
    except (ValueError, AttributeError):
        return f"HTTP {exc.code} {exc.reason} from {exc.url}.{hint or ' Check CLEAR_URL.'}", ""


def _write_file(path: str, data: str | bytes) -> None:
    """Write a report; a path that cannot be written is the caller's to fix (exit 2), not a failed command."""
    try:
        if isinstance(data, bytes):
            with open(path, "wb") as handle:
                handle.write(data)
        else:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(data)
    except OSError as exc:
        raise CliError(f"Cannot write {path}: {exc.strerror or exc}. Check the output path.", 2) from None


def _client(args: argparse.Namespace) -> Client:
    api_key = args.api_key or os.environ.get("CLEAR_API_KEY", "")
    if not api_key:
        raise CliError("Set CLEAR_API_KEY to a project's secret key (sk-clear-…), or pass --api-key.", 2)
    url = args.url or os.environ.get("CLEAR_URL") or DEFAULT_URL
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CliError(f"CLEAR_URL must be Clear's base URL, e.g. https://clear.example.com; got {url!r}.", 2)
    return Client(url, api_key)


def _split(values: list[str] | None) -> list[str]:
    """--judges a,b --judges c → [a, b, c]."""
    return [item.strip() for value in values or [] for item in value.split(",") if item.strip()]


def _progress_line(run: dict) -> str:
    progress = run.get("progress") or {}
    total, done, skipped = progress.get("total", 0), progress.get("done", 0), progress.get("skipped", 0)
    fraction = progress.get("fraction", 0.0)
    width = 30
    filled = int(round(fraction * width))
    return (f"[{'#' * filled}{'.' * (width - filled)}] {done + skipped}/{total} traces "
            f"({skipped} skipped) {run['status']}")


def _wait(client: Client, run_id: str, *, interval: float, timeout: float | None) -> dict:
    """Poll a run until it finishes, drawing a progress bar on stderr."""
    deadline = time.monotonic() + timeout if timeout else None
    tty = sys.stderr.isatty()
    last = None
    while True:
        run = client.request("GET", f"/api/v1/runs/{run_id}/")
        line = _progress_line(run)
        if tty:
            sys.stderr.write("\r" + line)
        elif line != last:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()
        last = line
        if run["status"] in FINAL_STATUSES:
            if tty:
                sys.stderr.write("\n")
            return run
        if deadline is not None and time.monotonic() > deadline:
            if tty:
                sys.stderr.write("\n")
            raise CliError(f"Run {run_id} is still {run['status']} after {timeout:g} s.")
        time.sleep(interval)


def _print_run(run: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(run, indent=2))
        return
    progress = run.get("progress") or {}
    print(f"run {run['id']}  {run['status']}")
    print(f"  release {run.get('release') or '(any)'}  judges {', '.join(run.get('judges') or [])}")
    print(f"  traces {progress.get('done', 0)} judged, {progress.get('skipped', 0)} skipped of "
          f"{progress.get('total', 0)}; tokens {run.get('input_tokens', 0) + run.get('output_tokens', 0)}; "
          f"cost {run.get('cost', 0):.4f}")
    failing = (run.get("summary") or {}).get("failing_by_judge") or {}
    for judge, count in failing.items():
        print(f"  {count:6d} failing  {judge}")
    if run.get("failure_message"):
        print(f"  error: {run['failure_message']}")


def _run_exit_code(run: dict) -> int:
    return 0 if run["status"] == "succeeded" else 1


def cmd_runs_start(args: argparse.Namespace) -> int:
    client = _client(args)
    body: dict[str, Any] = {"release": args.release or "", "judges": _split(args.judges), "name": args.name or ""}
    for field in ("since", "until", "model", "node", "outcome"):
        if getattr(args, field):
            body[field] = getattr(args, field)
    if args.sample_rate is not None:
        body["sample_rate"] = args.sample_rate
    if args.budget_tokens is not None:
        body["budget_tokens"] = args.budget_tokens
    if args.budget_cost is not None:
        body["budget_cost"] = args.budget_cost
    run = client.request("POST", "/api/v1/runs/", body=body)
    print(f"Started run {run['id']} over {run['progress']['total']} traces.", file=sys.stderr)
    if args.wait:
        run = _wait(client, run["id"], interval=args.interval, timeout=args.timeout)
        run = client.request("GET", f"/api/v1/runs/{run['id']}/")
        _print_run(run, args.json)
        return _run_exit_code(run)
    print(json.dumps(run, indent=2) if args.json else run["id"])
    return 0


def cmd_runs_status(args: argparse.Namespace) -> int:
    run = _client(args).request("GET", f"/api/v1/runs/{args.run_id}/")
    _print_run(run, args.json)
    return 0


def cmd_runs_wait(args: argparse.Namespace) -> int:
    client = _client(args)
    _wait(client, args.run_id, interval=args.interval, timeout=args.timeout)
    run = client.request("GET", f"/api/v1/runs/{args.run_id}/")
    _print_run(run, args.json)
    return _run_exit_code(run)


def cmd_traces_list(args: argparse.Namespace) -> int:
    client = _client(args)
    params = {"release": args.release, "outcome": args.outcome, "node": args.node, "since": args.since,
              "until": args.until, "task_id": args.task_id}
    rows = list(client.pages("/api/v1/traces/", params, args.limit))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'TRACE ID':32}  {'START':20}  {'OUTCOME':8}  {'SPANS':>5}  {'ERRORS':>6}  {'RELEASE':12}  NAME")
    for row in rows:
        start = (row.get("start_time") or "")[:19].replace("T", " ")
        print(f"{row['trace_id']:32}  {start:20}  {row.get('outcome') or '-':8}  {row['span_count']:>5}  "
              f"{row['error_count']:>6}  {(row.get('release') or '-')[:12]:12}  {row.get('name', '')[:60]}")
    return 0


def cmd_tickets_export(args: argparse.Namespace) -> int:
    text = _client(args).request("GET", "/api/v1/tickets/export/", params={"output": args.format,
                                                                           "status": args.status}, raw=True)
    if args.output and args.output != "-":
        _write_file(args.output, text)
        print(f"Wrote {args.output}.", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="clearctl", description="Clear's REST API from the command line.")
    parser.add_argument("--url", help=f"Clear's base URL (default: $CLEAR_URL or {DEFAULT_URL})")
    parser.add_argument("--api-key", help="a project's secret key (default: $CLEAR_API_KEY)")
    groups = parser.add_subparsers(dest="group", required=True)
    from clear.cli_gate import add_gate_parser  # it imports this module's client

    add_gate_parser(groups)

    runs = groups.add_parser("runs", help="diagnosis runs").add_subparsers(dest="command", required=True)
    start = runs.add_parser("start", help="start a diagnosis run")
    start.add_argument("--release", help="judge the traces of this release (service.version)")
    start.add_argument("--judges", action="append", help="judge names or aliases (rules, rubrics, llm), comma "
                                                         "separated or repeated; default: the project's defaults")
    start.add_argument("--model", help="the LLM judges' model")
    start.add_argument("--since", help="traces started at or after (ISO 8601)")
    start.add_argument("--until", help="traces started before (ISO 8601)")
    start.add_argument("--node", help="traces with a span of this node")
    start.add_argument("--outcome", choices=["success", "failure"])
    start.add_argument("--name")
    start.add_argument("--sample-rate", type=float)
    start.add_argument("--budget-tokens", type=int)
    start.add_argument("--budget-cost", type=float)
    start.add_argument("--wait", action="store_true", help="wait for the run to finish (exit 1 unless it succeeded)")
    start.set_defaults(func=cmd_runs_start)
    status = runs.add_parser("status", help="a run's status and progress")
    status.add_argument("run_id")
    status.set_defaults(func=cmd_runs_status)
    wait = runs.add_parser("wait", help="wait for a run to finish, with a progress bar on stderr")
    wait.add_argument("run_id")
    wait.set_defaults(func=cmd_runs_wait)
    for command in (start, status, wait):
        command.add_argument("--json", action="store_true", help="print the run as JSON")
    for command in (start, wait):
        command.add_argument("--interval", type=float, default=2.0, help="seconds between polls (default 2)")
        command.add_argument("--timeout", type=float, help="give up after this many seconds")

    traces = groups.add_parser("traces", help="traces").add_subparsers(dest="command", required=True)
    listing = traces.add_parser("list", help="list traces, newest first")
    listing.add_argument("--release")
    listing.add_argument("--outcome", choices=["success", "failure"])
    listing.add_argument("--node")
    listing.add_argument("--since")
    listing.add_argument("--until")
    listing.add_argument("--task-id")
    listing.add_argument("--limit", type=int, default=50, help="at most this many traces (default 50)")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=cmd_traces_list)

    tickets = groups.add_parser("tickets", help="tickets (one per insight)").add_subparsers(dest="command",
                                                                                           required=True)
    export = tickets.add_parser("export", help="the bug list as Markdown, CSV or JSON")
    export.add_argument("--format", choices=["md", "csv", "json"], default="md")
    export.add_argument("--status", default="open",
                        help="open (unresolved, the default), all, or one status: open, in_progress, fixed, wont_fix")
    export.add_argument("--output", "-o", help="write to this file instead of stdout")
    export.set_defaults(func=cmd_tickets_export)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CliError as exc:
        print(f"clearctl: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    # `python -m clear.cli`: run the importable module, so clear.cli_gate and this share one CliError.
    from clear.cli import main as _main

    sys.exit(_main())
