"""Model-mode benchmark: Clear's LLM judges and insight naming against a real OpenAI-compatible model server.

    .venv/bin/python -m benchmarks.model_mode --api-base http://127.0.0.1:8012/v1 --model openai/smollm2 --traces 3
    .venv/bin/python -m benchmarks.model_mode --start-server /path/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --server-python /work/llamavenv/bin/python --traces 3 --json var/bench/model_mode.json

Per structured-output mode (`--modes on,off`: CLEAR_JUDGE_STRUCTURED_OUTPUT), in a child process with its own fresh
SQLite database (var/bench/model_mode/<mode>/, so the judge cache starts empty and every call is real):

1. migrate, create the projects `bench` and `probe`, import the N smallest tau-airline traces into `bench`;
2. start gunicorn on that database and post one OTLP/JSON trace every `--probe-seconds` to /v1/traces of `probe`
   for the whole measurement (a write lock held while a model thinks shows up as a slow or failed post);
3. `diagnosis_run_start(judges=llm.step,llm.trace, enqueue=False)` + `diagnosis_run_execute` (= `manage.py
   diagnose --inline`), then `insights_build` (names through the model);
4. every model request is recorded by wrapping `litellm.completion`, and every JSON conversation (first reply +
   at most one repair) by wrapping `llm_json_complete` where the judges and the naming call it.

Reports: share of judge calls (conversations) whose first reply was accepted (schema-valid and passing the judge's
checks) and accepted after the repair, share of requests ending on the length limit (finish_reason "length"),
requests and tokens per judged trace and per judged step, seconds per trace, run status and errors by cause,
insight names, "database is locked" seen (log records, exceptions, probe failures, gunicorn log).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.model_mode.attribution import attribution_bench, attribution_lines  # noqa: E402
from benchmarks.model_mode.observe import LOCKED, LockLog, Probe, Recorder  # noqa: E402
from benchmarks.model_mode.report import _table  # noqa: E402
from benchmarks.model_mode.texts import text_report  # noqa: E402

PYTHON = sys.executable
JUDGES = ["llm.step", "llm.trace"]


def _log(message: str) -> None:
    print(f"[model_mode {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _shared_dir() -> Path:
    return Path(os.environ.get("CLEAR_SHARED_DIR", str(REPO.parent / "shared"))).resolve()


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--api-base", default="", help="the server's OpenAI-compatible base URL, e.g. "
                                                  "http://127.0.0.1:8012/v1 (with --start-server: its own)")
    p.add_argument("--model", default="openai/smollm2", help="LiteLLM model string (CLEAR_JUDGE_MODEL)")
    p.add_argument("--api-key", default="sk-local", help="CLEAR_JUDGE_API_KEY (a local server ignores it)")
    p.add_argument("--start-server", metavar="GGUF", default="",
                   help="start llama-cpp-python's server on this GGUF for the benchmark and stop it after")
    p.add_argument("--server-python", default="python3", help="the Python that has llama-cpp-python[server]")
    p.add_argument("--server-port", type=int, default=0)
    p.add_argument("--server-plain-cpu", action="store_true",
                   help="load the model without llama.cpp's extra buffer types (llama_plain_cpu/sitecustomize.py): "
                        "for a VM whose CPU reports AMX, where the server crashes on its first batch")
    p.add_argument("--n-ctx", type=int, default=8192)
    p.add_argument("--traces", type=int, default=3, help="tau-airline traces judged per mode (the N smallest)")
    p.add_argument("--modes", default="on,off",
                   help="CLEAR_JUDGE_STRUCTURED_OUTPUT values, in order (json_object_schema for llama-cpp-python)")
    p.add_argument("--timeout", type=float, default=180.0, help="CLEAR_JUDGE_TIMEOUT_SECONDS (180)")
    p.add_argument("--max-retries", type=int, default=1, help="CLEAR_JUDGE_MAX_RETRIES (1)")
    p.add_argument("--max-tokens", type=int, default=0,
                   help="CLEAR_JUDGE_MAX_TOKENS, the ceiling (default: Clear's, 4096)")
    p.add_argument("--judges", default=",".join(JUDGES),
                   help="judges of the run (default llm.step,llm.trace); e.g. rules,llm.step,llm.trace so that the "
                        "run has verdicts (and insights to name) even when every model call fails")
    p.add_argument("--naming-samples", type=int, default=0,
                   help="also name this many hand-written clusters (SYNTHETIC_CLUSTERS) through Clear's namer, for "
                        "when the run's feedback gives no cluster to name")
    p.add_argument("--probe-seconds", type=float, default=3.0, help="ingestion probe interval (0: no probe)")
    p.add_argument("--probe-port", type=int, default=0,
                   help="the port of the benchmark's gunicorn, which the probe posts to (0: one the OS picks)")
    p.add_argument("--skip-insights", action="store_true")
    p.add_argument("--attribution", type=int, default=0, metavar="N",
                   help="after judging, score the LLM attribution methods all_at_once and step_by_step on the N "
                        "smallest Who&When Algorithm-Generated traces beside the baselines and `learned` (0: off)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("--child", metavar="MODE", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# --- the parent: server, one child per mode, the table ------------------------------------------------------------


def _server_start(args: argparse.Namespace, log_path: Path) -> tuple[subprocess.Popen, str]:
    port = args.server_port or _free_port()
    cmd = [args.server_python, "-m", "llama_cpp.server", "--model", args.start_server, "--chat_format", "chatml",
           "--n_ctx", str(args.n_ctx), "--host", "127.0.0.1", "--port", str(port), "--model_alias",
           args.model.split("/", 1)[-1]]
    _log("server: " + " ".join(cmd))
    env = dict(os.environ)
    if args.server_plain_cpu:
        site = str(Path(__file__).resolve().parent / "llama_plain_cpu")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [site, env.get("PYTHONPATH")]))
    proc = subprocess.Popen(cmd, stdout=log_path.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
                            env=env)
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the model server exited ({proc.returncode}); see {log_path}")
        try:
            with urllib.request.urlopen(base + "/models", timeout=2) as response:
                if response.status == 200:
                    return proc, base
        except (urllib.error.URLError, OSError):
            time.sleep(1)
    raise SystemExit(f"the model server did not answer within 120 s; see {log_path}")


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def main(argv: list[str] | None = None) -> dict:
    args = _args(argv)
    if args.child:
        return child_main(args)
    bench_dir = REPO / "var" / "bench" / "model_mode"
    bench_dir.mkdir(parents=True, exist_ok=True)
    server = None
    results: dict = {"model": args.model, "traces": args.traces, "timeout_s": args.timeout,
                     "max_tokens_ceiling": args.max_tokens or "default", "modes": {},
                     "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load_before": os.getloadavg()}
    try:
        api_base = args.api_base
        if args.start_server:
            server, api_base = _server_start(args, bench_dir / "server.log")
        if not api_base:
            raise SystemExit("pass --api-base or --start-server")
        results["api_base"] = api_base
        for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
            label = mode if args.judges == ",".join(JUDGES) else f"{mode}-{args.judges.replace(',', '+')}"
            out = bench_dir / f"{label}.json"
            out.unlink(missing_ok=True)
            cmd = [PYTHON, "-m", "benchmarks.model_mode", "--child", mode, "--out", str(out), "--api-base", api_base,
                   "--model", args.model, "--api-key", args.api_key, "--traces", str(args.traces), "--timeout",
                   str(args.timeout), "--max-retries", str(args.max_retries), "--max-tokens", str(args.max_tokens),
                   "--probe-seconds", str(args.probe_seconds), "--probe-port", str(args.probe_port),
                   "--judges", args.judges,
                   "--naming-samples", str(args.naming_samples), "--attribution", str(args.attribution)]
            if args.skip_insights:
                cmd.append("--skip-insights")
            _log(f"mode {mode}: child process")
            code = subprocess.call(cmd, cwd=REPO)
            if not out.exists():
                results["modes"][mode] = {"error": f"the child exited {code} without results"}
                continue
            results["modes"][mode] = json.loads(out.read_text())
            results["modes"][mode]["child_exit"] = code
    finally:
        _stop(server)
    if server is not None:
        log = (bench_dir / "server.log").read_text(errors="replace")
        results["server_log_tail"] = log[-2000:]
    _table(results)
    for line in attribution_lines(results["modes"]):
        print(line)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2, ensure_ascii=False, default=str))
    return results


# --- the child: one mode, in process -----------------------------------------------------------------------------


def _trace_files(n: int) -> tuple[list[Path], list[Path]]:
    folder = _shared_dir() / "datasets" / "tau-airline"
    files = sorted(folder.glob("airline-*.json"), key=lambda p: (p.stat().st_size, p.name))
    if not files:
        raise SystemExit(f"no tau-airline traces at {folder}: lay shared/ next to the checkout or set "
                         "CLEAR_SHARED_DIR")
    return files[:n], files[n:n + 40]


def child_main(args: argparse.Namespace) -> dict:
    # A SIGTERM ends the child through its `finally` blocks, so that its gunicorn is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    mode = args.child
    label = Path(args.out).stem
    var = REPO / "var" / "bench" / "model_mode" / label
    shutil.rmtree(var, ignore_errors=True)
    (var / "traces").mkdir(parents=True)
    env = {
        "CLEAR_VAR_DIR": str(var), "CLEAR_JUDGE_MODEL": args.model, "CLEAR_JUDGE_API_BASE": args.api_base,
        "CLEAR_JUDGE_API_KEY": args.api_key, "CLEAR_JUDGE_STRUCTURED_OUTPUT": mode,
        "CLEAR_JUDGE_TIMEOUT_SECONDS": str(args.timeout), "CLEAR_JUDGE_MAX_RETRIES": str(args.max_retries),
        "CLEAR_JUDGE_CONCURRENCY": "1", "DEBUG": "0", "SECRET_KEY": "bench-model-mode-not-secret",
        "CLEAR_CONTINUOUS_DIAGNOSIS": "false", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    if args.max_tokens:
        env["CLEAR_JUDGE_MAX_TOKENS"] = str(args.max_tokens)
    for name in ("DATABASE_URL", "REDIS_URL"):
        os.environ.pop(name, None)
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "clear.settings.base")
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from django.core.management import call_command

    lock_log = LockLog()
    judged_files, probe_files = _trace_files(args.traces)
    for path in judged_files:
        shutil.copy(path, var / "traces" / path.name)
    call_command("migrate", "--noinput", verbosity=0)
    # The throttles' table lives in a database of its own (README "Quick start"): without it every request that
    # gunicorn answers, the probe's posts included, is a 500 ("no such table: clear_guard_entry").
    call_command("guards_migrate", verbosity=0)

    from clear.projects.models import Project
    from diagnosis.selectors import diagnosis_run_summary, insight_list
    from diagnosis.services import diagnosis_run_execute, diagnosis_run_start
    from diagnosis.services.insights import insights_build
    from traces.services.imports import traces_import

    import io
    out = io.StringIO()
    call_command("create_project", "bench", "--json", stdout=out)
    out = io.StringIO()
    call_command("create_project", "probe", "--json", stdout=out)
    probe_key = json.loads(out.getvalue().strip().splitlines()[-1])["secret_key"]
    project = Project.objects.get(name="bench")
    traces_import(project=project, path=var / "traces")

    recorder = Recorder()
    recorder.install()
    gunicorn = probe = None
    exceptions: list[str] = []
    result: dict = {"mode": mode, "judges": args.judges, "trace_files": [p.name for p in judged_files]}
    try:
        if args.probe_seconds > 0:
            port = args.probe_port or _free_port()
            # The pages use the manifest storage: without collectstatic, GET / answers 500 ("Missing staticfiles
            # manifest entry"), which the probe's readiness check and the log then count.
            call_command("collectstatic", "--noinput", verbosity=0)
            gunicorn = subprocess.Popen(
                [PYTHON, "-m", "gunicorn", "clear.wsgi:application", "--workers", "1", "--threads", "2", "--bind",
                 f"127.0.0.1:{port}", "--timeout", "120"],
                cwd=REPO, env=os.environ.copy(), stdout=(var / "gunicorn.log").open("w"), stderr=subprocess.STDOUT,
                start_new_session=True)
            _wait_http(f"http://127.0.0.1:{port}/", gunicorn)
            probe = Probe(url=f"http://127.0.0.1:{port}/v1/traces", key=probe_key,
                          bodies=[p.read_bytes() for p in probe_files], interval=args.probe_seconds)
            probe.start()
        _log(f"mode {mode}: judging {len(judged_files)} traces ({', '.join(p.name for p in judged_files)})")
        judges = [j.strip() for j in args.judges.split(",") if j.strip()]
        run = diagnosis_run_start(project=project, judges=judges, model=args.model, config={"concurrency": 1},
                                  enqueue=False)
        started = time.perf_counter()
        try:
            run = diagnosis_run_execute(run=run, progress=lambda r: _log(
                f"  {r.done_count + r.skipped_count}/{r.total_count} traces, errors {r.error_count}, "
                f"{time.perf_counter() - started:.0f} s"))
        except Exception as error:  # noqa: BLE001 - reported, not hidden
            exceptions.append(f"diagnosis: {type(error).__name__}: {error}"[:500])
            run.refresh_from_db()
        judge_seconds = time.perf_counter() - started
        judge_requests = len(recorder.requests)
        insights: dict = {}
        if not args.skip_insights:
            _log(f"mode {mode}: building insights (names through the model)")
            started = time.perf_counter()
            try:
                summary = insights_build(run=run)
                insights["summary"] = {k: v for k, v in (summary or {}).items() if isinstance(v, (int, float, str))}
                insights["naming"] = (summary or {}).get("naming")
            except Exception as error:  # noqa: BLE001
                exceptions.append(f"insights: {type(error).__name__}: {error}"[:500])
            insights["seconds_wall"] = round(time.perf_counter() - started, 1)
            insights["names"] = [{"title": i.title, "source": _name_source(i), "level": i.level,
                                  "node": i.node, "traces": i.trace_count}
                                 for i in insight_list(project=project, run=run, include_other=False)]
        if args.naming_samples:
            insights["synthetic_names"] = _name_synthetic(model=args.model, count=args.naming_samples)
        run.refresh_from_db()
        run_summary = diagnosis_run_summary(project=project, run=run)
        try:
            result["texts"] = text_report(run=run, project=project)
        except Exception as error:  # noqa: BLE001 - reported, not hidden
            result["texts"] = {"error": f"{type(error).__name__}: {error}"[:500]}
    finally:
        if probe is not None:
            probe.stopped.set()
            probe.join(timeout=70)
        _stop(gunicorn)

    result.update(_figures(recorder, judge_requests=judge_requests, traces=run_summary.traces_judged,
                           steps=_steps_judged(run), seconds=judge_seconds))
    result["run"] = {"id": str(run.pk), "status": run.status, "traces_total": run_summary.traces_total,
                     "traces_judged": run_summary.traces_judged, "errors": run_summary.errors,
                     "errors_label": run_summary.errors_label, "errors_by_cause": run_summary.errors_by_cause,
                     "feedback_by_status": run_summary.feedback_by_status, "failure_message": run.failure_message,
                     "insights_status": run.insights_status,
                     "judges_without_verdict": [j["label"] for j in run_summary.judges_without_verdict]}
    result["insights"] = insights
    result["exceptions"] = exceptions
    gunicorn_log = (var / "gunicorn.log").read_text(errors="replace") if (var / "gunicorn.log").exists() else ""
    posts = probe.posts if probe is not None else []
    result["probe"] = {"posts": len(posts), "ok": sum(1 for p in posts if p["status"] == 200),
                       "max_seconds": max((p["seconds"] for p in posts), default=0),
                       "failures": [p for p in posts if p["status"] != 200][:5]}
    locked = {"log_records": lock_log.count, "log_examples": lock_log.examples,
              "exceptions": sum(LOCKED in e for e in exceptions),
              "probe": sum(LOCKED in p["error"] for p in posts), "gunicorn_log": gunicorn_log.count(LOCKED),
              "run_errors": sum(LOCKED in (g.get("example") or "") for g in run_summary.errors_by_cause)}
    locked["total"] = sum(v for k, v in locked.items() if isinstance(v, int))
    result["locked"] = locked
    if args.attribution > 0:
        # After the judges' figures are taken: the recorder would count these conversations as judge calls.
        _log(f"mode {mode}: attribution on the {args.attribution} smallest Who&When traces")
        try:
            result["attribution"] = attribution_bench(count=args.attribution, shared_dir=_shared_dir(),
                                                      model=args.model, api_base=args.api_base, recorder=recorder)
        except Exception as error:  # noqa: BLE001 - reported, not hidden
            result["attribution"] = {"error": f"{type(error).__name__}: {error}"[:500]}
    Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False, default=str))
    return result


# Hand-written clusters of judge statements (not from any dataset's labels) for --naming-samples.
SYNTHETIC_CLUSTERS = [
    ("agent", ["The agent cancelled the reservation without asking the user to confirm",
               "Reservation cancelled before the user said yes", "No explicit confirmation before cancel_reservation"]),
    ("update_reservation_flights", ["update_reservation_flights called with a cabin the user did not ask for",
                                    "Flights changed to economy although the user wanted business"]),
    ("", ["The agent promised a refund that the policy does not allow",
          "Told the user a compensation certificate would be sent without checking eligibility"]),
    ("search_direct_flight", ["search_direct_flight called three times with identical arguments",
                              "Repeated the same flight search without changing the date"]),
]


def _name_synthetic(*, model: str, count: int) -> list[dict]:
    """Clear's insight namer (diagnosis/insights/naming.py) on hand-written clusters: its real call path."""
    from types import SimpleNamespace

    from diagnosis.clustering import ClusterName
    from diagnosis.clustering.naming import shorten, title_generalize
    from diagnosis.insights.naming import NamingUsage, llm_namer_build

    usage = NamingUsage()
    namer = llm_namer_build(model=model, usage=usage)
    names = []
    for i, (node, texts) in enumerate(SYNTHETIC_CLUSTERS[:count]):
        cluster = SimpleNamespace(id=f"synthetic-{i}", level="node" if node else "system", node=node,
                                  size=len(texts) * 3, trace_ids=[f"t{j}" for j in range(len(texts) * 2)],
                                  nodes={node or "agent": len(texts) * 3})
        request = SimpleNamespace(cluster=cluster, medoid_text=texts[0], example_texts=texts,
                                  terms=[w for w in texts[0].lower().split() if len(w) > 5][:5])
        # The offline name, as name_clusters passes it: what a refused model name is replaced by.
        request.offline = ClusterName(title=shorten(title_generalize(texts[0])), description="", terms=request.terms)
        name = namer(request) if namer is not None else None
        names.append({"node": node, "medoid": texts[0], "title": name.title if name else None,
                      "source": (f"computed: {name.note[:120]}" if name.note else name.source) if name
                      else "offline (the call failed)",
                      "recommendation": name.recommendation[:200] if name else None})
    names.append({"usage": {"calls": usage.calls, "failed": usage.failed, "errors": usage.errors,
                            "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}})
    return names


def _name_source(insight) -> str:
    return getattr(insight, "naming_source", "") or "?"


def _steps_judged(run) -> int:
    from diagnosis.models import Feedback

    """Step verdicts the run stored (status ok: the step was judged)."""
    return Feedback.objects.filter(run=run, judge="llm.step", status="ok").count()


def _wait_http(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("gunicorn exited; see its log")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    raise SystemExit("gunicorn did not answer within 60 s")


def _figures(recorder: Recorder, *, judge_requests: int, traces: int, steps: int, seconds: float) -> dict:
    judge_conv = [c for c in recorder.conversations if c["kind"] != "insight.naming"]
    naming_conv = [c for c in recorder.conversations if c["kind"] == "insight.naming"]
    requests = recorder.requests[:judge_requests]
    judge_req = [r for r in requests if r["kind"] != "insight.naming"]

    def share(items, pred):
        return (sum(1 for i in items if pred(i)) / len(items)) if items else None

    def first_ok(c):
        return bool(c["rounds"]) and c["rounds"][0]["ok"]

    def length(c):
        return c["cause"] == "invalid_output:length" or any(r["finish_reason"] == "length" for r in c["requests"][-1:])

    by_kind: dict = defaultdict(lambda: {"conversations": 0, "first_valid": 0, "accepted": 0, "requests": 0,
                                         "input_tokens": 0, "output_tokens": 0, "seconds": 0.0, "length": 0})
    for c in recorder.conversations:
        k = by_kind[c["kind"] or "?"]
        k["conversations"] += 1
        k["first_valid"] += first_ok(c)
        k["accepted"] += c["outcome"] == "accepted"
        k["length"] += length(c)
        k["requests"] += len(c["requests"])
        k["input_tokens"] += sum(r["input_tokens"] for r in c["requests"])
        k["output_tokens"] += sum(r["output_tokens"] for r in c["requests"])
        k["seconds"] = round(k["seconds"] + c.get("seconds", 0), 1)
    tokens_in = sum(r["input_tokens"] for r in judge_req)
    tokens_out = sum(r["output_tokens"] for r in judge_req)
    problems = Counter(c["rounds"][0]["problems"][:120] for c in judge_conv if c["rounds"] and not c["rounds"][0]["ok"])
    return {
        "judge": {
            "conversations": len(judge_conv),
            "first_valid_share": share(judge_conv, first_ok),
            "valid_after_repair_share": share(judge_conv, lambda c: c["outcome"] == "accepted"),
            "length_share": share(judge_conv, length),
            "failed_by_cause": dict(Counter(c["cause"] or c["outcome"] for c in judge_conv
                                            if c["outcome"] != "accepted")),
            "first_reply_problems": dict(problems.most_common(8)),
            "requests": len(judge_req),
            "requests_length_share": share(judge_req, lambda r: r["finish_reason"] == "length"),
            "requests_failed": sum(1 for r in judge_req if r["error"]),
            "request_errors": dict(Counter(r["error"][:160] for r in judge_req if r["error"]).most_common(5)),
            "response_format": dict(Counter(str(r["response_format"]) for r in judge_req)),
            "max_tokens": dict(Counter(str(r["max_tokens"]) for r in judge_req)),
            "seconds_per_request": round(sum(r["seconds"] for r in judge_req) / len(judge_req), 2) if judge_req
            else None,
            "output_tokens_max": max((r["output_tokens"] for r in judge_req), default=0),
        },
        "naming": {"conversations": len(naming_conv),
                   "accepted": sum(1 for c in naming_conv if c["outcome"] == "accepted"),
                   "first_valid": sum(1 for c in naming_conv if first_ok(c)),
                   "failed_by_cause": dict(Counter(c["cause"] or c["outcome"] for c in naming_conv
                                                   if c["outcome"] != "accepted")),
                   "requests": sum(len(c["requests"]) for c in naming_conv)},
        "by_kind": dict(by_kind),
        "judged_traces": traces, "judged_steps": steps, "judge_seconds": round(seconds, 1),
        # per judged trace (the run's "traces judged") and per judged step (a stored llm.step verdict); None: none
        "per_trace": None if not traces else {
            "requests": len(judge_req) / traces, "input_tokens": tokens_in / traces,
            "output_tokens": tokens_out / traces, "seconds": seconds / traces},
        "per_step": None if not steps else {
            "requests": len(judge_req) / steps, "input_tokens": tokens_in / steps, "output_tokens": tokens_out / steps},
        "conversations_log": [{k: v for k, v in c.items() if k != "requests"} | {
            "requests": [{k: r[k] for k in ("finish_reason", "input_tokens", "output_tokens", "seconds", "error")}
                         for r in c["requests"]]} for c in recorder.conversations],
    }


if __name__ == "__main__":
    main()
