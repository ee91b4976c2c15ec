"""Seed the UI benchmark's database in bulk: `INSERT … SELECT … FROM generate_series` run inside Postgres, no row
goes through the ORM (1M spans in well under a minute).

What is made (for `traces` traces of `spans // traces` spans each):
- traces over 30 days and 5 releases, 30% failing, 10% with no outcome; spans of 9 nodes: a root agent, a planner,
  then (agent, LLM call, tool call) triples of the worker nodes, 3% of the tool calls failing; chat-message input and
  JSON output on every span.
- `runs` diagnosis runs; the newest two judged `judged` traces each (RunTrace, two verdicts per trace, 30% failing)
  and built insights: `insights` insights (half at node level, half system level) with occurrences, a statement
  and a verified citation per failing verdict, node/system links and one ticket each (a Markdown body).
Everything but the user, project and key (made by the services) is plain SQL. Columns not named here get the
model field's default, so a column added later needs no change here unless it has no default.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

from django.db import connection
from django.db.models import JSONField

NODES = ["support_desk", "planner", "orders_worker", "billing_worker", "shipping_worker", "account_worker",
         "kb_worker", "mediator", "writer"]
WORKERS = NODES[2:]  # 7 nodes that come in (agent, llm, tool) triples
T0 = "2026-10-01 00:00:00+00"
# A trace's number (its id is the number in hex, zero-padded), from the trace row `t`.
TRACE_NUM = "('x' || right(t.trace_id, 16))::bit(64)::bigint"


def _defaults(model, given: set[str]) -> tuple[list[str], list[str], list]:
    """Columns, SQL expressions and parameters for the NOT NULL columns of `model` not in `given`."""
    columns, exprs, params = [], [], []
    for field in model._meta.concrete_fields:
        if field.column in given or field.null or field.primary_key and field.get_internal_type().endswith(
                "AutoField"):
            continue
        if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
            columns.append(field.column)
            exprs.append("now()")
            continue
        default = field.get_default()
        if default is None:
            raise SystemExit(f"seed: {model._meta.db_table}.{field.column} has no default; give it a value in "
                             "benchmarks/ui/seed.py")
        columns.append(field.column)
        if isinstance(field, JSONField):
            exprs.append("%s::jsonb")
            params.append(json.dumps(default))
        else:
            exprs.append("%s")
            params.append(field.get_db_prep_value(default, connection))
    return columns, exprs, params


def insert_select(model, values: dict[str, str], source: str, params: list | tuple = ()) -> int:
    """INSERT INTO model's table (values' columns + defaults) SELECT values' expressions FROM source."""
    extra_cols, extra_exprs, extra_params = _defaults(model, set(values))
    columns = list(values) + extra_cols
    exprs = list(values.values()) + extra_exprs
    sql = f"INSERT INTO {model._meta.db_table} ({', '.join(columns)}) SELECT {', '.join(exprs)} {source}"
    sql = re.sub(r"%(?!s)", "%%", sql)  # the modulo operator, not a placeholder
    # Placeholders in order: the given expressions', the defaults', the source's.
    given = sum(expr.count("%s") for expr in values.values())
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params[:given], *extra_params, *params[given:]])
        return cursor.rowcount


def _timed(log: Callable[[str], None], what: str, fn: Callable[[], int]) -> int:
    start = time.perf_counter()
    n = fn()
    log(f"seeded {n:,} {what} in {time.perf_counter() - start:.1f} s")
    return n


def seed(*, project, traces: int, spans: int, insights: int, judged: int, runs: int,
         log: Callable[[str], None]) -> dict:
    from diagnosis.models import (DiagnosisRun, Feedback, FeedbackCorrection, Insight, InsightEvidence, InsightLink,
                                  InsightOccurrence, InsightStatement, RunTrace)
    from diagnosis.tickets.models import Ticket
    from traces.models import Span, Trace

    per_trace = max(3, spans // traces)
    judged = min(judged, traces)
    pid = str(project.pk)
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit = off")
    seconds = 30 * 86400 / traces

    started = f"'{T0}'::timestamptz + make_interval(secs => i * {seconds})"
    _timed(log, "traces", lambda: insert_select(Trace, {
        "project_id": "%s", "trace_id": "lpad(to_hex(i), 32, '0')",
        "name": "'support ticket ' || (i % 22)", "root_span_id": "lpad(to_hex(i * 64), 16, '0')",
        "start_time": started,
        "end_time": f"'{T0}'::timestamptz + make_interval(secs => i * {seconds} + {per_trace} * 0.5)",
        "status": "CASE WHEN i % 10 < 3 THEN 'error' ELSE 'ok' END", "span_count": str(per_trace),
        "error_count": "CASE WHEN i % 10 < 3 THEN 1 ELSE 0 END",
        "input_tokens": "1000 + i % 700", "output_tokens": "300 + i % 200", "cost": "0.002",
        "outcome": "CASE WHEN i % 10 < 3 THEN 'failure' WHEN i % 10 = 9 THEN NULL ELSE 'success' END",
        "outcome_source": "'root span'", "task_id": "'task-' || (i % 500)", "release": "'r' || (1 + i % 5)",
        # Received as they ran, over 30 days: 31 daily span partitions on Postgres, as production would have.
        "first_received_at": started, "first_received_day": f"(({started}) AT TIME ZONE 'UTC')::date",
        "last_received_at": "now()", "finalized_at": "now()",
    }, "FROM generate_series(1, %s) AS i", [pid, traces]))
    from traces.services.partitions import span_partitions_ensure

    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT first_received_day FROM traces_trace WHERE project_id = %s", [pid])
        span_partitions_ensure(days=[row[0] for row in cursor.fetchall()])

    # Span j of trace i: 0 root agent, 1 planner (child of the root), then triples (agent, llm, tool) of a worker
    # node chosen by (i + triple) % 7, the agent a child of the root, the llm and tool calls children of the agent.
    triple, offset = "((j - 2) / 3)", "((j - 2) % 3)"
    node = (f"CASE WHEN j = 0 THEN 'support_desk' WHEN j = 1 THEN 'planner' ELSE "
            f"(ARRAY{WORKERS!r})[1 + (t.i + {triple}) % {len(WORKERS)}] END").replace('"', "'")
    kind = f"CASE WHEN j < 2 THEN 'AGENT' WHEN {offset} = 0 THEN 'AGENT' WHEN {offset} = 1 THEN 'LLM' ELSE 'TOOL' END"
    parent = (f"CASE WHEN j = 0 THEN '' WHEN j = 1 OR {offset} = 0 THEN lpad(to_hex(t.i * 64), 16, '0') "
              f"ELSE lpad(to_hex(t.i * 64 + j - {offset}), 16, '0') END")
    failing_tool = f"({offset} = 2 AND (t.i + j) % 33 = 0)"
    _timed(log, "spans", lambda: insert_select(Span, {
        "project_id": "%s", "trace_id": "t.id", "span_id": "lpad(to_hex(t.i * 64 + j), 16, '0')",
        "parent_span_id": parent, "name": f"CASE WHEN {kind} = 'AGENT' THEN 'invoke_agent ' || {node} "
                                          f"WHEN {kind} = 'LLM' THEN 'chat gpt-4o-mini' ELSE 'execute_tool lookup' END",
        "kind": kind, "node": node, "agent_name": node,
        "tool_name": f"CASE WHEN {kind} = 'TOOL' THEN 'lookup' ELSE '' END",
        "model": f"CASE WHEN {kind} = 'LLM' THEN 'gpt-4o-mini' ELSE '' END",
        "input": ("jsonb_build_array(jsonb_build_object('role', 'user', 'content', 'Customer ' || t.i || ' asks "
                  "about order O-' || (t.i % 9000) || ': it has not arrived and the invoice looks wrong.'))"),
        "output": ("jsonb_build_object('order_id', 'O-' || (t.i % 9000), 'status', 'shipped', 'tracking_number', "
                   "'TRK' || (t.i * 7 % 100000), 'note', 'Parcel left the warehouse two days ago')"),
        "status": f"CASE WHEN {failing_tool} THEN 'error' ELSE 'ok' END",
        "status_message": f"CASE WHEN {failing_tool} THEN 'RateLimitedError: lookup service busy' ELSE '' END",
        "start_time": "t.start_time + make_interval(secs => j * 0.5)",
        "end_time": "t.start_time + make_interval(secs => j * 0.5 + 0.4)",
        "input_tokens": f"CASE WHEN {kind} = 'LLM' THEN 400 ELSE NULL END",
        "output_tokens": f"CASE WHEN {kind} = 'LLM' THEN 120 ELSE NULL END",
        "release": "t.release", "received_at": "now()", "trace_day": "t.first_received_day",
    }, (f"FROM (SELECT id, start_time, release, first_received_day, {TRACE_NUM} AS i FROM traces_trace AS t "
        "WHERE project_id = %s) "
        "AS t CROSS JOIN generate_series(0, %s) AS j"), [pid, pid, per_trace - 1]))

    # Runs: the oldest first; the newest two judged traces and built insights (the heat map uses the newest).
    run_ids = []
    for n in range(runs):
        insights_run = n >= runs - 2
        run = DiagnosisRun.objects.create(
            project=project, name=f"nightly {n + 1}", status="succeeded", judges=["rules", "rubrics"],
            total_count=judged if insights_run else 1000, done_count=judged if insights_run else 1000,
            cost=0.5 + n, input_tokens=100_000 * (n + 1), output_tokens=20_000 * (n + 1),
            insights_status="done" if insights_run else "")
        run_ids.append(run.pk)
    judged_runs = run_ids[-2:]
    for index, run_id in enumerate(judged_runs):
        # The newest run judged the newest `judged` traces, the one before it the ones before those.
        start = traces - judged * (len(judged_runs) - index) + 1
        source = f"FROM traces_trace AS t WHERE t.project_id = %s AND {TRACE_NUM} BETWEEN %s AND %s"
        _timed(log, "run traces", lambda: insert_select(RunTrace, {
            "run_id": "%s", "trace_id": "t.id", "status": "'done'"},
            source, [str(run_id), pid, max(1, start), start + judged - 1]))
        # Two verdicts per judged trace: a rule on the 3rd span (a worker agent), a rubric on the 4th (its LLM
        # call); 30% of the traces fail one of them.
        for judge, span_j, kind in (("rule.repeated_tool_call", 2, "rule"), ("rubric.1", 3, "rubric")):
            _timed(log, f"feedback ({judge})", lambda: insert_select(Feedback, {
                "run_id": "%s", "project_id": "%s", "trace_id": "t.id",
                "target_span_id": f"lpad(to_hex({TRACE_NUM} * 64 + {span_j}), 16, '0')",
                "judge": f"'{judge}'", "judge_kind": f"'{kind}'", "status": "'ok'",
                "verdict": f"CASE WHEN {TRACE_NUM} % 10 < 3 THEN 'fail' ELSE 'pass' END",
                "critique": "'The worker called lookup twice with the same arguments and dropped the tracking "
                            "number from its answer.'",
                "issues": ("jsonb_build_array(jsonb_build_object('title', 'lookup repeated', 'evidence', "
                           "jsonb_build_array(jsonb_build_object('span_id', "
                           f"lpad(to_hex({TRACE_NUM} * 64 + {span_j}), 16, '0'), 'quote', 'TRK'))))"),
                "created_at": "now()",
            }, ("FROM diagnosis_runtrace AS rt JOIN traces_trace AS t ON t.id = rt.trace_id WHERE rt.run_id = %s"),
                [str(run_id), pid, str(run_id)]))

    _timed(log, "insights", lambda: insert_select(Insight, {
        "project_id": "%s", "level": "CASE WHEN k % 2 = 0 THEN 'node' ELSE 'system' END",
        "node": f"CASE WHEN k % 2 = 0 THEN (ARRAY{WORKERS!r})[1 + (k / 2) % {len(WORKERS)}] ELSE '' END".replace(
            '"', "'"),
        "title": "'Pattern ' || k || ': lookup is repeated and the tracking number is lost'",
        "description": "'The worker repeats the lookup call with identical arguments, then the mediator drops a "
                       "fact the tool returned.'",
        "root_cause": "'No retry budget in the worker prompt.'", "recommendation": "'Cap retries at one.'",
        "severity": "(ARRAY['low', 'medium', 'high', 'critical'])[1 + k % 4]",
        "count": "20 + k * 3", "trace_count": "10 + k * 2", "frequency": "((k * 37) % 100) / 100.0",
        "affected_nodes": "jsonb_build_object('billing_worker', k, 'mediator', 3)",
        "lift": "1.5 + (k % 5) / 2.0", "lift_low": "1.1", "lift_high": "3.0",
        "first_seen": f"'{T0}'::timestamptz", "last_seen": "now()", "first_run_id": "%s", "last_run_id": "%s",
        "trend": ("jsonb_build_array(jsonb_build_object('release', 'r4', 'count', k, 'judged', 1000, 'frequency', "
                  "k / 1000.0), jsonb_build_object('release', 'r5', 'count', k + 3, 'judged', 1000, 'frequency', "
                  "(k + 3) / 1000.0))"),
        "status": "CASE WHEN k % 10 = 0 THEN 'fixed' ELSE 'open' END", "fingerprint": "md5(k::text)",
        "created_at": "now()", "updated_at": "now()",
    }, "FROM generate_series(1, %s) AS k", [pid, str(judged_runs[0]), str(judged_runs[-1]), insights]))

    with connection.cursor() as cursor:
        cursor.execute("SELECT array_agg(id ORDER BY id) FILTER (WHERE level = 'node'), "
                       "array_agg(id ORDER BY id) FILTER (WHERE level = 'system') FROM diagnosis_insight "
                       "WHERE project_id = %s", [pid])
        node_ids, system_ids = cursor.fetchone()
    for run_id in judged_runs:
        _timed(log, "occurrences", lambda: insert_select(InsightOccurrence, {
            "insight_id": "i.id", "run_id": "%s", "count": "i.count", "trace_count": "i.trace_count",
            "judged": str(judged), "frequency": "i.frequency", "lift": "i.lift",
            "releases": "jsonb_build_object('r4', i.trace_count / 2, 'r5', i.trace_count / 2)",
            "trace_ids": "(SELECT jsonb_agg(lpad(to_hex(g), 32, '0')) FROM generate_series(1, 30) AS g)",
            "created_at": "now()",
        }, "FROM diagnosis_insight AS i WHERE i.project_id = %s", [str(run_id), pid]))
        # A statement per failing verdict, at its span's node, in that node's insights and a system insight.
        _timed(log, "statements", lambda: insert_select(InsightStatement, {
            "project_id": "%s", "run_id": "f.run_id", "feedback_id": "f.id", "trace_id": "f.trace_id",
            "position": "0", "kind": "'issue'", "text": "'lookup repeated with the same arguments'",
            "node": "s.node", "span_id": "f.target_span_id", "judge": "f.judge", "severity": "'high'",
            "node_insight_id": f"(%s::bigint[])[1 + (hashtext(s.node) & 1023) % {len(node_ids)}]",
            "system_insight_id": f"(%s::bigint[])[1 + (f.trace_id % {len(system_ids)})]",
            "created_at": "now()",
        }, ("FROM diagnosis_feedback AS f JOIN traces_span AS s ON s.trace_id = f.trace_id AND "
            "s.span_id = f.target_span_id WHERE f.run_id = %s AND f.verdict = 'fail'"),
            [pid, node_ids, system_ids, str(run_id)]))
        for level in ("node_insight_id", "system_insight_id"):
            _timed(log, "evidence", lambda: insert_select(InsightEvidence, {
                "insight_id": f"st.{level}", "run_id": "st.run_id", "trace_id": "st.trace_id",
                "span_id": "st.span_id", "feedback_id": "st.feedback_id", "statement_id": "st.id",
                "statement_text": "st.text", "quote": "'TRK' || st.trace_id", "created_at": "now()",
            }, "FROM diagnosis_insightstatement AS st WHERE st.run_id = %s", [str(run_id)]))
    _timed(log, "insight links", lambda: insert_select(InsightLink, {
        "system_id": "s.id", "node_id": "(%s::bigint[])[1 + (s.id * 3 + g) % %s]", "shared": "5 + g",
        "share": "0.3", "run_id": "%s"}, "FROM diagnosis_insight AS s CROSS JOIN generate_series(0, 2) AS g "
                                         "WHERE s.project_id = %s AND s.level = 'system'",
        [node_ids, len(node_ids), str(judged_runs[-1]), pid]))
    body = ("## What happens\n\nThe worker repeats the lookup. " * 8 + "\n\n## Evidence\n\n" +
            "> TRK0042 — trace 0000000000000000000000000000002a, span 0000000000000a82\n\n" * 10)
    _timed(log, "tickets", lambda: insert_select(Ticket, {
        "project_id": "i.project_id", "insight_id": "i.id", "fingerprint": "i.fingerprint",
        "status": "CASE WHEN i.status = 'fixed' THEN 'fixed' ELSE 'open' END",
        "title": "'[' || coalesce(nullif(i.node, ''), 'system') || '] ' || i.title", "body": "%s",
        "level": "i.level", "node": "i.node", "severity": "i.severity", "description": "i.description",
        "root_cause": "i.root_cause", "recommendation": "i.recommendation", "frequency": "i.frequency",
        "trace_count": "i.trace_count", "lift": "i.lift", "first_seen": "i.first_seen", "last_seen": "i.last_seen",
        "evidence": ("(SELECT jsonb_agg(jsonb_build_object('trace_id', lpad(to_hex(g), 32, '0'), 'task_id', 't', "
                     "'release', 'r5', 'span_id', lpad(to_hex(g * 64 + 2), 16, '0'), 'quote', 'TRK', 'statement', "
                     "'lookup repeated')) FROM generate_series(1, 10) AS g)"),
        "traces": ("(SELECT jsonb_agg(jsonb_build_object('trace_id', lpad(to_hex(g), 32, '0'), 'task_id', 't', "
                   "'release', 'r5', 'outcome', 'failure')) FROM generate_series(1, 20) AS g)"),
        "trace_total": "i.trace_count", "created_at": "now()", "updated_at": "now()",
    }, "FROM diagnosis_insight AS i WHERE i.project_id = %s", [body, pid]))
    _timed(log, "corrections", lambda: insert_select(FeedbackCorrection, {
        "feedback_id": "f.id", "project_id": "%s", "note": "'retrying is fine here'", "created_at": "now()",
    }, ("FROM (SELECT id FROM diagnosis_feedback WHERE run_id = %s AND verdict = 'fail' ORDER BY id LIMIT 100) "
        "AS f"), [pid, str(judged_runs[-1])]))
    start = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit = on")
        cursor.execute("ANALYZE")
    log(f"ANALYZE in {time.perf_counter() - start:.1f} s")
    return {"runs": [str(r) for r in run_ids], "insights_run": str(judged_runs[-1])}
