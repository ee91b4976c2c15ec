"""LLM-judge benchmark: judged spans per second and model calls per trace, next to CLEAR's call scheme.

    .venv/bin/python -m benchmarks.judges                       # 300 ms per call, 4 traces at once
    .venv/bin/python benchmarks/judges/run.py --latency 0.3 --concurrency 4 --long-turns 150

* Judge: `diagnosis.judges.llm.judge_trace_with_llm` in the default configuration (step + trace judges, one rubric,
  max_context_tokens 12000), against the fake OpenAI-compatible server of the tests, which sleeps `--latency`
  seconds in every request and answers with schema-valid verdicts computed from the request.
* Traces: the support-desk example's suite (`run_suite(bugs="all")`, in-memory spans through the real OTLP
  normaliser) and one long synthetic conversation (an agent looping LLM call → tool call, each LLM input holding
  the whole conversation so far, as instrumentations record it).
* Throughput: traces are judged concurrently by a thread pool of `--concurrency` (= CLEAR_JUDGE_CONCURRENCY);
  judged spans = LLM, TOOL and AGENT spans that got a step verdict.
* CLEAR's scheme (research/clear.md §2.7), per trace with R LLM steps: R step judgements + R critique summaries
  + up to R issue mappings (rows under the score threshold) + 3–4 trace calls (full trajectory, rubric generation,
  rubric evaluation, optional task success) = 2R+3 … 3R+4 calls; its step judge re-sends each LLM call's full
  input, estimated here as Σ (input + output characters) / 3.5 over the LLM steps (prompt templates excluded).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from clear.llm import litellm_load  # noqa: E402
from diagnosis.judges.llm import LlmJudgeConfig, judge_trace_with_llm  # noqa: E402
from diagnosis.judges.llm.render import estimate_tokens  # noqa: E402
from tests.diagnosis.llm.helpers import conversation_trace, judge_of, judge_reply, support_desk_traces  # noqa: E402
from tests.support.fake_llm import FakeLLMServer  # noqa: E402

RUBRICS = [{"id": "answer", "name": "Answers every request", "text": "The final answer addresses every request."}]


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--latency", type=float, default=0.3, help="seconds the fake LLM adds to every call (0.3)")
    p.add_argument("--concurrency", type=int, default=4, help="traces judged at once (CLEAR_JUDGE_CONCURRENCY, 4)")
    p.add_argument("--seed", type=int, default=7, help="support-desk seed (7)")
    p.add_argument("--long-turns", type=int, default=150, help="LLM→tool turns of the long synthetic trace (150)")
    p.add_argument("--model", default="openai/gpt-4o-mini")
    return p.parse_args(argv)


def _judge_all(server: FakeLLMServer, traces, config: LlmJudgeConfig, concurrency: int):
    server.script(default=server.bench_reply)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(lambda t: judge_trace_with_llm(trace=t, rubrics=RUBRICS, config=config), traces))
    elapsed = time.perf_counter() - started
    requests = list(server.requests)
    return results, elapsed, requests


def _row(name: str, traces, results, elapsed: float, requests, latency: float, concurrency: int) -> dict:
    steps = [r for per_trace in results for r in per_trace if r.judge == "llm.step"]
    bad = [r for per_trace in results for r in per_trace if r.status not in ("ok",)]
    llm_steps = [sum(1 for s in t.spans if s.kind == "LLM") for t in traces]
    calls = len(requests)
    step_calls = sum(1 for r in requests if judge_of(r) == "llm.step")
    clear_calls = sum(2 * r + 3 for r in llm_steps), sum(3 * r + 4 for r in llm_steps)
    prompt_tokens = sum(estimate_tokens("".join(m["content"] for m in r["messages"])) for r in requests)
    clear_step_tokens = sum(estimate_tokens(str(s.input)) + estimate_tokens(str(s.output))
                            for t in traces for s in t.spans if s.kind == "LLM")
    return {
        "name": name, "traces": len(traces), "judged": len(steps), "llm": sum(llm_steps), "calls": calls,
        "calls_per_trace": calls / len(traces), "calls_per_step": calls / max(1, len(steps)),
        "step_calls": step_calls / len(traces), "trace_calls": (calls - step_calls) / len(traces),
        "clear_low": clear_calls[0] / len(traces), "clear_high": clear_calls[1] / len(traces),
        # CLEAR at the same latency and concurrency, ideal parallelism, counting only the LLM spans it judges
        "clear_spans_per_s": (sum(llm_steps) * concurrency / (clear_calls[1] * latency),
                              sum(llm_steps) * concurrency / (clear_calls[0] * latency)),
        "tokens_per_trace": prompt_tokens / len(traces), "clear_step_tokens": clear_step_tokens / len(traces),
        "wall": elapsed, "spans_per_s": len(steps) / elapsed if elapsed else float("inf"), "not_ok": len(bad),
    }


def _print(rows: list[dict], latency: float, concurrency: int) -> None:
    print(f"\nFake LLM latency {latency * 1000:.0f} ms per call, {concurrency} traces judged concurrently, "
          "default configuration (step + trace judges, 1 rubric, 12k-token windows)\n")
    header = ("dataset", "traces", "judged spans", "LLM spans", "calls/trace (step+trace)", "calls/judged span",
              "CLEAR calls/trace", "our prompt tok/trace", "CLEAR step data tok/trace", "wall s", "judged spans/s",
              "CLEAR est. LLM spans/s")
    lines = [header]
    for r in rows:
        clear_rate = "–".join(f"{x:.1f}" for x in r["clear_spans_per_s"])
        lines.append((r["name"], str(r["traces"]), str(r["judged"]), str(r["llm"]),
                      f"{r['calls_per_trace']:.2f} ({r['step_calls']:.2f}+{r['trace_calls']:.2f})",
                      f"{r['calls_per_step']:.3f}", f"{r['clear_low']:.0f}–{r['clear_high']:.0f}",
                      f"{r['tokens_per_trace']:,.0f}", f"{r['clear_step_tokens']:,.0f}", f"{r['wall']:.2f}",
                      f"{r['spans_per_s']:.1f}", clear_rate))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for n, line in enumerate(lines):
        print(" | ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths))))
        if n == 0:
            print("-+-".join("-" * w for w in widths))
    for r in rows:
        if r["not_ok"]:
            print(f"!! {r['name']}: {r['not_ok']} results not ok")


def main(argv: list[str] | None = None) -> None:
    args = _args(argv)
    server = FakeLLMServer().start()

    def reply(request):
        time.sleep(args.latency)
        return judge_reply(request)

    server.bench_reply = reply
    config = LlmJudgeConfig(model=args.model, api_base=server.api_base, api_key="bench")
    litellm_load()  # import LiteLLM (≈3 s) before the clock starts
    try:
        desk = support_desk_traces(bugs="all", seed=args.seed)
        long_trace = [conversation_trace(args.long_turns)]
        rows = []
        for name, traces in ((f"support desk (22 tasks, seed {args.seed})", desk),
                             (f"long synthetic ({args.long_turns} turns)", long_trace)):
            results, elapsed, requests = _judge_all(server, traces, config, args.concurrency)
            rows.append(_row(name, traces, results, elapsed, requests, args.latency, args.concurrency))
        store: dict[str, dict] = {}
        cached = LlmJudgeConfig(model=args.model, api_base=server.api_base, api_key="bench",
                                cache_get=store.get, cache_put=store.__setitem__)
        _judge_all(server, desk, cached, args.concurrency)
        results, elapsed, requests = _judge_all(server, desk, cached, args.concurrency)
        rows.append(_row("support desk, identical re-run (cache)", desk, results, elapsed, requests,
                         args.latency, args.concurrency))
        _print(rows, args.latency, args.concurrency)
        desk_calls = rows[0]["calls_per_trace"]
        print(f"\nper support-desk trace: {statistics.mean(len(t.spans) for t in desk):.1f} spans; "
              f"{desk_calls:.2f} model calls here vs {rows[0]['clear_low']:.0f}–{rows[0]['clear_high']:.0f} "
              "in CLEAR's scheme (which judges only the LLM spans)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
