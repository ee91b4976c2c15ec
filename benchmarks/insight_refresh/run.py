"""Continuous insight refresh: an incremental refresh after 100 new traces against a full rebuild (issue 27).

    .venv/bin/python -m benchmarks.insight_refresh                    # 50,000 judged traces, 100 new
    .venv/bin/python -m benchmarks.insight_refresh --traces 2000      # smoke run (~1-2 min)
    .venv/bin/python benchmarks/insight_refresh/run.py --help

One process, one run, on a throw-away Postgres database (`--db`, dropped and recreated, dropped at the end unless
`--keep-db`), Celery eager (clear.settings.test), no worker, no model (CLEAR_JUDGE_MODEL="": offline names):

0. Seed (timed apart): one project, today's continuous run (running) with `--traces` judged traces, bulk-created:
   Trace rows (received now, inside the lookback), one Span per failing feedback (its node is the statement's node),
   RunTrace rows done, Feedback rows (LLM judge, status ok, verdict fail, critique = one statement of
   benchmarks/clustering/templates.generate: labelled categories with home nodes) - 1 to 3 per failing trace; the
   passing traces (`--passing`) get one whole-trace "pass" feedback. CLEAR_INSIGHT_WINDOW_TRACES covers every trace,
   CLEAR_CONTINUOUS_LOOKBACK_HOURS a week, CLEAR_INSIGHT_RECLUSTER_SECONDS is huge (the incremental refresh never
   turns into a full one on its own).
1. The embedder is loaded and warmed (model load reported apart), the EmbeddingCache table is empty.
(a) The first refresh of the run (services.insights_refresh.insights_refresh: full, the window clustered and
    written) with a COLD embedding cache -> T_full_cold.
(b) `--new` (100) new traces with feedback from the same generator (another seed, same categories) -> the next
    refresh, incremental -> T_inc; where each new statement landed: its InsightStatement row (node_insight,
    system_insight), no row / None at a level = pending.
(c) A full rebuild of the same data through the same entry point (the refresh state is made due for a
    re-clustering: full_at long ago, provisional >= 1) with the WARM cache -> T_full_warm, and where each new statement
    lands now (merged_into followed on both sides).
Headline ratio: T_inc / T_full_warm (same cache state: the texts of the window are cached; the warm full rebuild
is the cheaper one, so this is the conservative ratio). T_inc / T_full_cold is printed too.
Agreement: per new statement and per level it takes part in (its node, if any, and system-wide), the incremental
insight equals the rebuild's insight; a level left pending agrees only when the rebuild puts the statement in an
insight the rebuild created, in an "Other" bucket or in no insight at that level. A statement agrees when all its
levels agree.
(d) Diagnosis only: a full run's build of the same data (services.insights._build without RefreshRules: what
    `build_insights --force` or the day's close does, identity matching alone, no sticky membership), and the
    agreement of (b) with it.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import random
import resource
import secrets
import sys
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone as dt_timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.throwaway import bench_in_throwaway, django_start  # noqa: E402

BATCH = 2000


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--traces", type=int, default=50_000, help="judged traces seeded (default 50000)")
    p.add_argument("--new", type=int, default=100, help="new traces before the incremental refresh (default 100)")
    p.add_argument("--passing", type=float, default=0.2, help="share of traces with no failing feedback (0.2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pg", default=os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432"),
                   help="Postgres server URL without database (default postgres://postgres@127.0.0.1:5432)")
    p.add_argument("--db", default="clear_bench_refresh", help="benchmark database, dropped and recreated")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/9", help="test Redis URL (nothing is queued)")
    p.add_argument("--keep-db", action="store_true", help="do not drop the database at the end")
    p.add_argument("--json", dest="json_out", help="also write the results as JSON to this file")
    return p.parse_args(argv)


def _log(msg: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _setup(args: argparse.Namespace) -> None:
    django_start(pg=args.pg, db=args.db, redis=args.redis,
                 CLEAR_INSIGHT_WINDOW_TRACES=str(args.traces + args.new), CLEAR_CONTINUOUS_LOOKBACK_HOURS="168",
                 CLEAR_INSIGHT_RECLUSTER_SECONDS=str(10**8))


# ---------------------------------------------------------------------------------------------------------------
# seeding


class Seeder:
    """Bulk-creates judged traces of one continuous run from a stream of generated statements."""

    def __init__(self, *, project, run, passing: float, seed: int) -> None:
        self.project, self.run, self.passing = project, run, passing
        self.rng = random.Random(seed)
        self.count = 0

    def add(self, n_traces: int, *, seed: int) -> dict:
        from benchmarks.clustering.templates import generate
        from diagnosis.models import DiagnosisRun, Feedback, RunTrace
        from django.db.models import F
        from traces.models import Span, Trace

        per_trace = [0 if self.rng.random() < self.passing else self.rng.choice([1, 1, 2, 2, 3])
                     for _ in range(n_traces)]
        stream = iter(generate(sum(per_trace), seed=seed))
        now = datetime.now(dt_timezone.utc)
        labels: dict[int, int] = {}  # feedback pk -> category label, for nothing but the report
        totals = defaultdict(int)
        for start in range(0, n_traces, BATCH):
            chunk = per_trace[start:start + BATCH]
            traces = [Trace(project=self.project, trace_id=secrets.token_hex(16), name="agent",
                            root_span_id=secrets.token_hex(8), start_time=now - timedelta(minutes=5),
                            end_time=now - timedelta(minutes=4), status="ok", span_count=1 + k, release="v1",
                            outcome="failure" if k else "success", judged_at=now) for k in chunk]
            Trace.objects.bulk_create(traces, batch_size=BATCH)
            spans, feedback, statements_of = [], [], []
            for trace, k in zip(traces, chunk):
                spans.append(Span(project=self.project, trace=trace, trace_day=trace.first_received_day,
                                  span_id=trace.root_span_id, name="agent",
                                  kind="AGENT", node="", start_time=trace.start_time, end_time=trace.end_time))
                if not k:
                    feedback.append(Feedback(run=self.run, project=self.project, trace=trace, judge="quality",
                                             judge_kind="llm", status="ok", verdict="pass", score=1.0,
                                             critique="The agent handled the request correctly."))
                    statements_of.append(None)
                for j in range(k):
                    g = next(stream)
                    span_id = secrets.token_hex(8)
                    spans.append(Span(project=self.project, trace=trace, trace_day=trace.first_received_day,
                                      span_id=span_id, parent_span_id=trace.root_span_id, name=f"{g.node} step",
                                      kind="LLM", node=g.node, start_time=trace.start_time + timedelta(seconds=j + 1),
                                      end_time=trace.start_time + timedelta(seconds=j + 2)))
                    feedback.append(Feedback(run=self.run, project=self.project, trace=trace, judge="quality",
                                             judge_kind="llm", target_span_id=span_id, status="ok", verdict="fail",
                                             score=0.0, critique=g.text))
                    statements_of.append(g.label)
            Span.objects.bulk_create(spans, batch_size=BATCH)
            RunTrace.objects.bulk_create([RunTrace(run=self.run, trace=t, status=RunTrace.Status.DONE, attempts=1,
                                                   started_at=now, finished_at=now) for t in traces],
                                         batch_size=BATCH)
            Feedback.objects.bulk_create(feedback, batch_size=BATCH)
            for fb, label in zip(feedback, statements_of):
                if label is not None:
                    labels[fb.pk] = label
            totals["traces"] += len(traces)
            totals["spans"] += len(spans)
            totals["feedback"] += len(feedback)
            totals["failing_feedback"] += sum(1 for x in statements_of if x is not None)
        DiagnosisRun.objects.filter(pk=self.run.pk).update(total_count=F("total_count") + n_traces,
                                                           done_count=F("done_count") + n_traces)
        self.count += n_traces
        return {**totals, "labels": labels}


# ---------------------------------------------------------------------------------------------------------------
# timing of the refresh's steps (wrappers only: the product code runs unchanged)


class Steps:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, module, name: str, label: str | None = None) -> None:
        original = getattr(module, name)
        label = label or name

        @functools.wraps(original)
        def timed(*a, **kw):
            t = time.perf_counter()
            try:
                return original(*a, **kw)
            finally:
                self.seconds[label] += time.perf_counter() - t
                self.calls[label] += 1

        setattr(module, name, timed)

    def take(self) -> dict:
        out = {k: {"s": round(v, 3), "calls": self.calls[k]} for k, v in sorted(self.seconds.items(),
                                                                                  key=lambda kv: -kv[1])}
        self.seconds.clear()
        self.calls.clear()
        return out


def _instrument(steps: Steps) -> None:
    import diagnosis.services.insights_refresh as refresh  # first: the package's import order
    import diagnosis.insights.recompute as recompute
    import diagnosis.services.insights as insights
    import diagnosis.tickets.services as tickets

    # (b) must be the incremental refresh at every size: below ~15,000 traces the 100 new ones are a tenth of the
    # window, which the product re-clusters at once (insights_refresh._recluster_due).
    refresh.RECLUSTER_SHARE = float("inf")

    for name in ("statements_collect", "statement_vectors", "statements_assign", "_known", "occurrence_recompute",
                 "occurrence_extend", "headline_refresh", "trend_refresh", "_window", "_signature",
                 "placed_neighbours", "judged_totals", "_prior"):
        steps.wrap(refresh, name, f"refresh.{name}")
    for name in ("statements_collect", "statement_vectors", "judged_traces"):
        steps.wrap(insights, name, f"build.{name}")
    steps.wrap(recompute, "judged_traces", "recompute.judged_traces")
    for name in ("_cluster", "insights_write", "groups_name", "groups_assign", "groups_sticky", "_forget_run"):
        steps.wrap(insights, name, f"build.{name}")
    steps.wrap(tickets, "ticket_sync_after_insights", "ticket_sync_after_insights")


# ---------------------------------------------------------------------------------------------------------------
# refreshes and agreement


def _refresh(run_id) -> tuple[float, dict]:
    from diagnosis.models import DiagnosisRun
    from diagnosis.services.insights_refresh import insights_refresh

    DiagnosisRun.objects.filter(pk=run_id).update(insights_status="queued", insights_started_at=None)
    t = time.perf_counter()
    summary = insights_refresh(run_id=run_id)
    seconds = time.perf_counter() - t
    if summary is None:
        raise SystemExit("the refresh was not claimed")
    return seconds, summary


def _placements(run, feedback_ids) -> dict[tuple[int, int], tuple[int | None, int | None]]:
    from diagnosis.models import InsightStatement

    rows = InsightStatement.objects.filter(run=run)
    if feedback_ids is not None:
        rows = rows.filter(feedback_id__in=list(feedback_ids))
    rows = rows.values_list(
        "feedback_id", "position", "node_insight_id", "system_insight_id")
    return {(f, p): (n, s) for f, p, n, s in rows}


def _resolver():
    from diagnosis.models import Insight

    merged = dict(Insight.objects.exclude(merged_into=None).values_list("pk", "merged_into_id"))

    def resolve(pk):
        seen = set()
        while pk in merged and pk not in seen:
            seen.add(pk)
            pk = merged[pk]
        return pk

    return resolve


def _agreement(drafts, inc: dict, full: dict, *, created: set[int], other: set[int], labels: dict) -> dict:
    """See the module docstring; `cases` counts (level, incremental -> rebuild) kinds, e.g. "joined->same"."""
    resolve = _resolver()
    levels = {"node": [0, 0], "system": [0, 0]}  # [agree, total]
    cases: dict[str, int] = defaultdict(int)
    agree = joined = joined_agree = pending = pending_agree = 0
    disagreements = []

    def kind(f) -> str:
        return "none" if f is None else "other" if f in other else "new" if f in created else "existing"

    for d in drafts:
        key = (d.feedback_id, d.position)
        i_node, i_sys = inc.get(key, (None, None))
        f_node, f_sys = full.get(key, (None, None))
        pairs = ([("node", i_node, f_node)] if d.node else []) + [("system", i_sys, f_sys)]
        ok_all = True
        for level, i, f in pairs:
            i, f = resolve(i) if i else None, resolve(f) if f else None
            ok = (i == f) if i is not None else (f is None or f in created or f in other)
            levels[level][0] += ok
            levels[level][1] += 1
            ok_all &= ok
            case = ("joined->" + ("same" if ok else kind(f) if kind(f) != "existing" else "another")) \
                if i is not None else "pending->" + kind(f)
            cases[f"{level}: {case}"] += 1
            if not ok and len(disagreements) < 12:
                disagreements.append({"text": d.text[:90], "node": d.node, "level": level, "label":
                                      labels.get(d.feedback_id), "incremental": i, "rebuild": f, "case": case})
        agree += ok_all
        if i_node is not None or i_sys is not None:
            joined += 1
            joined_agree += ok_all
        else:
            pending += 1
            pending_agree += ok_all
    n = len(drafts)
    return {"statements": n, "agree": agree, "agreement": round(agree / n, 4) if n else None,
            "joined": joined, "joined_agree": joined_agree, "pending": pending, "pending_agree": pending_agree,
            "by_level": {k: {"agree": a, "total": t, "agreement": round(a / t, 4) if t else None}
                         for k, (a, t) in levels.items()},
            "cases": dict(sorted(cases.items())), "disagreements": disagreements}


def _what_if(drafts, vectors, neighbours, full, *, created, other, labels) -> dict:
    """Diagnosis only (the product is not changed): the agreement the incremental join would reach with other
    CLEAR_INSIGHT_JOIN_SIMILARITY values, against the same rebuild, from the neighbours the incremental refresh saw."""
    from diagnosis.insights.incremental import statements_assign

    out = {}
    for threshold in (0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.5):
        assigned = statements_assign(drafts=drafts, vectors=vectors, neighbours=neighbours, threshold=threshold)
        inc = {(d.feedback_id, d.position): (a.node_insight, a.system_insight) for d, a in zip(drafts, assigned)}
        a = _agreement(drafts, inc, full, created=created, other=other, labels=labels)
        out[str(threshold)] = {"agreement": a["agreement"], "joined": a["joined"], "pending": a["pending"],
                               "cases": a["cases"]}
    return out


def _insight_counts(project_id) -> dict:
    from diagnosis.models import Insight

    rows = Insight.objects.filter(project_id=project_id)
    return {"insights": rows.filter(is_other=False, merged_into=None).count(),
            "node": rows.filter(is_other=False, merged_into=None, level="node").count(),
            "system": rows.filter(is_other=False, merged_into=None, level="system").count(),
            "other_buckets": rows.filter(is_other=True).count()}


def bench(args: argparse.Namespace) -> dict:
    from clear.projects.services import project_create, user_get_or_create
    from diagnosis.insights.embedding import embedder_get
    from diagnosis.insights.statements import statements_collect
    from diagnosis.models import DiagnosisRun, EmbeddingCache, Feedback, Insight

    owner, _ = user_get_or_create(email="bench-refresh@example.com", password="correct horse battery staple")
    project = project_create(name="insight refresh bench", owner=owner)
    today = datetime.now(dt_timezone.utc)
    run = DiagnosisRun.objects.create(project=project, continuous=True, continuous_key=today.date().isoformat(),
                                      name=f"Continuous {today.date().isoformat()}",
                                      status=DiagnosisRun.Status.RUNNING, started_at=today, judges=["quality"])
    seeder = Seeder(project=project, run=run, passing=args.passing, seed=args.seed)
    _log(f"seeding {args.traces} judged traces")
    t = time.perf_counter()
    seeded = seeder.add(args.traces, seed=args.seed)
    seed_s = time.perf_counter() - t
    labels = dict(seeded.pop("labels"))
    _log(f"seeded in {seed_s:.1f} s: {seeded}")

    t = time.perf_counter()
    embedder = embedder_get()
    embedder.embed(["warm up the model"])
    load_s = time.perf_counter() - t
    EmbeddingCache.objects.all().delete()  # cold: the warm-up text gone too
    rss_model = _rss_mb()
    steps = Steps()
    _instrument(steps)

    _log("(a) first refresh: full, cold embedding cache")
    computed = embedder.computed
    t_full_cold, summary_a = _refresh(run.pk)
    steps_a = steps.take()
    computed_a = embedder.computed - computed
    state_a = summary_a["refresh"]
    counts_a = _insight_counts(project.pk)
    _log(f"    {t_full_cold:.2f} s, kind={state_a.get('kind')}, {summary_a.get('statements')} statements, {counts_a}")

    old = _placements(run, None)  # every statement of (a): how stable is a full rebuild itself?
    _log(f"(b) {args.new} new traces, incremental refresh")
    before_max = Feedback.objects.filter(run=run).order_by("-pk").values_list("pk", flat=True).first()
    added = seeder.add(args.new, seed=args.seed + 1)
    labels.update(added.pop("labels"))
    new_drafts = statements_collect(run=run, feedback_after=before_max)
    new_ids = {d.feedback_id for d in new_drafts}
    from diagnosis.insights.identity import insights_resolved
    from diagnosis.insights.incremental import placed_neighbours
    from diagnosis.services.insights import _known

    neighbours_seen = placed_neighbours(  # what the incremental refresh sees, for the what-if only
        run=run, live=insights_resolved(_known(project_id=project.pk, model_id=embedder.model_id)),
        cache=embedder.cache)
    computed = embedder.computed
    t_inc, summary_b = _refresh(run.pk)
    steps_b = steps.take()
    computed_b = embedder.computed - computed
    state_b = summary_b["refresh"]
    inc = _placements(run, new_ids)
    _log(f"    {t_inc:.3f} s, kind={state_b.get('kind')}, new={state_b.get('new_statements')} "
         f"joined={state_b.get('joined')} pending={state_b.get('pending')}")

    from diagnosis.insights.embedding import statement_vectors

    _log("(c) full rebuild of the same data, warm embedding cache")
    top_before = Insight.objects.filter(project=project).order_by("-pk").values_list("pk", flat=True).first() or 0
    state = dict(state_b)
    state.update(full_at="1970-01-01T00:00:00+00:00", provisional=max(1, int(state.get("provisional") or 0)))
    DiagnosisRun.objects.filter(pk=run.pk).update(insights_summary={**summary_b, "refresh": state})
    computed = embedder.computed
    t_full_warm, summary_c = _refresh(run.pk)
    steps_c = steps.take()
    computed_c = embedder.computed - computed
    state_c = summary_c["refresh"]
    full = _placements(run, new_ids)
    created = set(Insight.objects.filter(project=project, pk__gt=top_before, is_other=False)
                  .values_list("pk", flat=True))
    other = set(Insight.objects.filter(project=project, is_other=True).values_list("pk", flat=True))
    counts_c = _insight_counts(project.pk)
    _log(f"    {t_full_warm:.2f} s, kind={state_c.get('kind')}, {summary_c.get('statements')} statements, "
         f"{len(created)} insights created by the rebuild, {counts_c}")
    agreement = _agreement(new_drafts, inc, full, created=created, other=other, labels=labels)
    new_vectors, _, _ = statement_vectors([d.text for d in new_drafts], embedder)
    what_if = _what_if(new_drafts, new_vectors, neighbours_seen, full, created=created, other=other, labels=labels)
    again = _placements(run, None)
    _log("(d) a full run's build of the same data (no sticky membership: identity matching alone)")
    from diagnosis.services.insights import _build

    top_before_d = Insight.objects.filter(project=project).order_by("-pk").values_list("pk", flat=True).first() or 0
    t = time.perf_counter()
    summary_d = _build(DiagnosisRun.objects.get(pk=run.pk), rebuild=True)
    t_full_run = time.perf_counter() - t
    steps.take()
    created_d = set(Insight.objects.filter(project=project, pk__gt=top_before_d, is_other=False)
                    .values_list("pk", flat=True))
    other_d = set(Insight.objects.filter(project=project, is_other=True).values_list("pk", flat=True))
    agreement_d = _agreement(new_drafts, inc, _placements(run, new_ids), created=created | created_d, other=other_d,
                             labels=labels)
    _log(f"    {t_full_run:.2f} s, {summary_d.get('new')} created, agreement {agreement_d['agreement']}")
    resolve = _resolver()
    same = sum(1 for k, (n, s_) in old.items()
               if (resolve(n) if n else None, resolve(s_) if s_ else None)
               == tuple(resolve(x) if x else None for x in again.get(k, (None, None))))
    stability = {"statements": len(old), "same_insights": same, "share": round(same / len(old), 4) if old else None}
    return {
        "traces": args.traces, "new_traces": args.new, "seed": args.seed,
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "date_utc": datetime.now(dt_timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "load_avg_at_end": os.getloadavg(),
        "seed_s": round(seed_s, 1), "seeded": seeded, "new_seeded": added,
        "model_load_s": round(load_s, 2),
        "t_full_cold_s": round(t_full_cold, 3), "t_inc_s": round(t_inc, 3), "t_full_warm_s": round(t_full_warm, 3),
        "ratio_inc_over_full_warm": round(t_inc / t_full_warm, 5),
        "ratio_inc_over_full_cold": round(t_inc / t_full_cold, 5),
        "window": state_c.get("window"),
        "full_cold": {"kind": state_a.get("kind"), "statements": summary_a.get("statements"),
                      "clusters": summary_a.get("clusters"), "new_insights": summary_a.get("new"),
                      "other_statements": summary_a.get("other_statements"), "texts_embedded": computed_a,
                      "insights": counts_a, "steps": steps_a},
        "incremental": {"kind": state_b.get("kind"), "new_statements": state_b.get("new_statements"),
                        "joined": state_b.get("joined"), "pending": state_b.get("pending"),
                        "texts_embedded": computed_b, "steps": steps_b},
        "full_warm": {"kind": state_c.get("kind"), "statements": summary_c.get("statements"),
                      "clusters": summary_c.get("clusters"), "new_insights": summary_c.get("new"),
                      "matched": summary_c.get("matched"), "other_statements": summary_c.get("other_statements"),
                      "texts_embedded": computed_c, "insights": counts_c, "steps": steps_c},
        "agreement": agreement, "what_if_threshold": what_if,
        "full_run_build": {"seconds": round(t_full_run, 3), "new_insights": summary_d.get("new"),
                           "matched": summary_d.get("matched"), "agreement": agreement_d["agreement"],
                           "agree": agreement_d["agree"], "cases": agreement_d["cases"]},
        "rebuild_stability_old_statements": stability,
        "peak_rss_mb": round(_rss_mb(), 1), "rss_after_model_mb": round(rss_model, 1),
    }


def _print(r: dict) -> None:
    a = r["agreement"]
    print(f"insight refresh benchmark: {r['traces']} judged traces + {r['new_traces']} new ({r['date_utc']} UTC, "
          f"{r['machine']})")
    print(f"  seeding {r['seed_s']} s ({r['seeded']['feedback']} feedback, {r['seeded']['spans']} spans); "
          f"model load {r['model_load_s']} s")
    fc, inc, fw = r["full_cold"], r["incremental"], r["full_warm"]
    print(f"  (a) full refresh, cold cache: {r['t_full_cold_s']:.2f} s  ({fc['statements']} statements, "
          f"{fc['texts_embedded']} texts embedded, {fc['clusters']} clusters, {fc['new_insights']} insights created)")
    print(f"  (b) incremental refresh:      {r['t_inc_s']:.3f} s  ({inc['new_statements']} new statements: "
          f"{inc['joined']} joined, {inc['pending']} pending; {inc['texts_embedded']} texts embedded)")
    print(f"  (c) full rebuild, warm cache: {r['t_full_warm_s']:.2f} s  ({fw['statements']} statements, "
          f"{fw['clusters']} clusters, {fw['new_insights']} created, {fw['matched']} matched; window {r['window']})")
    print(f"  ratio T_inc / T_full_warm = {r['ratio_inc_over_full_warm']:.4f} (headline); "
          f"T_inc / T_full_cold = {r['ratio_inc_over_full_cold']:.4f}")
    print(f"  agreement {a['agreement']:.4f} ({a['agree']}/{a['statements']}); joined {a['joined_agree']}/"
          f"{a['joined']}, pending {a['pending_agree']}/{a['pending']}; by level: "
          + ", ".join(f"{k} {v['agree']}/{v['total']}" for k, v in a["by_level"].items()))
    print("  cases (level: incremental -> rebuild): " + ", ".join(f"{k} {v}" for k, v in a["cases"].items()))
    print("  what-if CLEAR_INSIGHT_JOIN_SIMILARITY (diagnosis only): " + ", ".join(
        f"{t}: {v['agreement']:.3f} ({v['pending']} pending)" for t, v in r["what_if_threshold"].items()))
    d = r["full_run_build"]
    print(f"  (d) a full run's build instead (identity matching only, no sticky membership): {d['seconds']:.2f} s, "
          f"{d['new_insights']} created; agreement with (b) {d['agreement']:.4f} ({d['agree']}/{a['statements']})")
    st = r["rebuild_stability_old_statements"]
    print(f"  rebuild stability: {st['same_insights']}/{st['statements']} ({st['share']}) of the statements of (a) "
          "are in the same insights (both levels) after (c)")
    print(f"  insights after (a): {fc['insights']}; after (c): {fw['insights']}")
    print(f"  peak RSS {r['peak_rss_mb']:.0f} MB (after model load {r['rss_after_model_mb']:.0f} MB)")
    for name, part in (("incremental", inc), ("full warm", fw), ("full cold", fc)):
        top = list(part["steps"].items())[:6]
        print(f"  steps, {name}: " + "; ".join(f"{k} {v['s']} s x{v['calls']}" for k, v in top))
    for d in a["disagreements"]:
        print(f"    disagree: {d}")


def main(argv: list[str] | None = None) -> dict:
    args = _args(argv)
    _log(f"database {args.db}: recreate and migrate")
    result = bench_in_throwaway(pg=args.pg, db=args.db, keep=args.keep_db, setup=lambda: _setup(args),
                                bench=lambda: bench(args))
    _print(result)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1, default=str))
    return result


if __name__ == "__main__":
    main()
