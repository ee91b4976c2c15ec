"""Spans partitioned by day on Postgres (issue 30, items 1-3): where spans land, traces far from today, retention
by whole partitions, the batched conversion of a populated plain table, and retried batches after partitioning."""

from datetime import date, timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from tests.api.conftest import counted_insight
from tests.conftest import postgres_only
from tests.traces.otlp_helpers import agent_run_spans, to_protobuf
from traces.models import ExpiredTrace, Span, Trace, utc_today
from traces.selectors.traces import span_list_for_trace
from traces.services import partitions
from traces.services.lifecycle import traces_retention_enforce
from traces.services.trace_rows import traces_upsert

pytestmark = [postgres_only, pytest.mark.django_db]


def _post(key, spans) -> None:
    response = Client().post("/v1/traces", data=to_protobuf(spans), content_type="application/x-protobuf",
                             HTTP_AUTHORIZATION=f"Bearer {key.secret}")
    assert response.status_code == 200, response.content


def _where(trace: Trace) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT tableoid::regclass::text FROM traces_span WHERE trace_id = %s", [trace.pk])
        return {row[0] for row in cursor.fetchall()}


def _trace_received_on(project, trace_id: str, day: date) -> Trace:
    """A trace row first received on `day` (an install converted from the plain table, or a clock far off)."""
    trace = traces_upsert(project=project, trace_ids=[trace_id])[0][trace_id]
    when = timezone.datetime(day.year, day.month, day.day, 12, tzinfo=timezone.get_current_timezone())
    Trace.objects.filter(pk=trace.pk).update(first_received_at=when, first_received_day=day, start_time=when)
    trace.refresh_from_db()
    return trace


def test_spans_land_in_their_traces_partition_and_a_retried_batch_stores_nothing_twice(issued_key, project):
    assert partitions.span_table_is_partitioned()
    spans = agent_run_spans()
    _post(issued_key, spans)
    _post(issued_key, spans)  # the SDK's retry of the same batch
    trace = Trace.objects.get(project=project)
    assert trace.first_received_day == utc_today()
    assert _where(trace) == {partitions.partition_name(utc_today())}
    assert Span.objects.filter(trace=trace).count() == 4
    assert set(Span.objects.filter(trace=trace).values_list("trace_day", flat=True)) == {trace.first_received_day}


@pytest.mark.parametrize("day", [date(2001, 1, 1), date(2091, 6, 30)])
def test_a_trace_first_received_long_ago_or_far_ahead_is_stored_and_readable(issued_key, project, owner, day):
    spans = agent_run_spans()
    trace_id = format(spans[0].context.trace_id, "032x")
    trace = _trace_received_on(project, trace_id, day)
    _post(issued_key, spans)
    assert _where(trace) == {partitions.DEFAULT}  # no partition for that day: the default one holds them
    assert len(span_list_for_trace(project=project, trace=trace)) == 4

    client = Client()
    client.force_login(owner)
    page = client.get(f"/p/{project.slug}/traces/{trace.trace_id}/")
    assert page.status_code == 200 and b"refund_lookup" in page.content
    api = Client().get(f"/api/v1/traces/{trace.trace_id}/", HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")
    assert api.status_code == 200 and len(api.json()["spans"]) == 4

    # Beat creating that day's partition moves the rows out of the default one first; nothing is lost.
    assert partitions.span_partitions_ensure(days=[day]) == [day] or day in partitions.span_partition_days()
    assert _where(trace) == {partitions.partition_name(day)}
    assert len(span_list_for_trace(project=project, trace=trace)) == 4
    _post(issued_key, spans)  # retried after the move: still stored once
    assert Span.objects.filter(trace=trace).count() == 4


def test_beat_creates_the_coming_days_and_a_second_run_creates_nothing():
    today = utc_today()
    partitions.span_partitions_ensure(today=today, days_ahead=10)
    days = partitions.span_partition_days()
    assert {today + timedelta(days=n) for n in range(-1, 11)} <= set(days)
    assert partitions.span_partitions_ensure(today=today, days_ahead=10) == []


def test_retention_drops_exactly_the_partitions_past_the_limit_and_keeps_the_figures(project, settings):
    settings.CLEAR_RETENTION_DAYS = 30
    today = utc_today()
    ages = [45, 40, 31, 29, 5]
    traces = {}
    for age in ages:
        day = today - timedelta(days=age)
        partitions.span_partitions_ensure(days=[day])
        trace = _trace_received_on(project, f"{age:032x}", day)
        Span.objects.create(project=project, trace=trace, trace_day=day, span_id="a" * 16, name="root",
                            start_time=trace.start_time)
        traces[age] = trace
    run, insight = counted_insight(project, list(traces.values()))
    figures = (insight.count, insight.trace_count, insight.frequency)

    traces_retention_enforce()

    left = set(partitions.span_partition_days())
    for age in (45, 40, 31):
        assert today - timedelta(days=age) not in left  # dropped whole
    for age in (29, 5):
        assert today - timedelta(days=age) in left
    assert set(Trace.objects.filter(project=project).values_list("trace_id", flat=True)) == {
        f"{29:032x}", f"{5:032x}"}
    assert Span.objects.filter(project=project).count() == 2
    assert ExpiredTrace.objects.filter(project=project).count() == 3
    insight.refresh_from_db()
    assert (insight.count, insight.trace_count, insight.frequency) == figures


def test_a_project_with_a_longer_retention_keeps_its_partitions(project, outsider_project, settings):
    """Partitions go only past the longest retention of any project; a shorter one is deleted in batches."""
    settings.CLEAR_RETENTION_DAYS = 10
    outsider_project.retention_days = 60
    outsider_project.save()
    day = utc_today() - timedelta(days=20)
    partitions.span_partitions_ensure(days=[day])
    mine = _trace_received_on(project, "1" * 32, day)
    theirs = _trace_received_on(outsider_project, "2" * 32, day)
    for trace in (mine, theirs):
        Span.objects.create(project=trace.project, trace=trace, trace_day=day, span_id="a" * 16, name="root",
                            start_time=trace.start_time)
    traces_retention_enforce()
    assert day in partitions.span_partition_days()
    assert not Trace.objects.filter(pk=mine.pk).exists() and Trace.objects.filter(pk=theirs.pk).exists()
    assert Span.objects.filter(trace=theirs).count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_batched_conversion_of_a_populated_plain_table_keeps_every_row_and_resumes(project):
    today = utc_today()
    expected = []
    for n in range(12):
        day = today - timedelta(days=n % 4)
        trace = _trace_received_on(project, f"{n + 1:032x}", day)
        for s in range(5):
            span = Span.objects.create(project=project, trace=trace, trace_day=day, span_id=f"{s + 1:016x}",
                                       name=f"span {s}", start_time=trace.start_time, input={"n": n, "s": s})
            expected.append((span.pk, trace.pk, span.span_id, day, span.input))
    try:
        partitions.span_table_unpartition()
        assert not partitions.span_table_is_partitioned()
        with connection.cursor() as cursor:  # as 0007 left it: no partition day on the old rows
            cursor.execute("ALTER TABLE traces_span ALTER COLUMN trace_day DROP NOT NULL")
            cursor.execute("UPDATE traces_span SET trace_day = NULL")

        class Interrupted(Exception):
            pass

        batches = []

        def stop_after_two(copied, last_id):
            batches.append(copied)
            if len(batches) == 2:
                raise Interrupted

        with pytest.raises(Interrupted):
            partitions.span_table_partition(batch_size=7, on_batch=stop_after_two)
        assert not partitions.span_table_is_partitioned()  # the swap has not happened; the old table serves
        report = partitions.span_table_partition(batch_size=7)  # `migrate` run again resumes
        assert partitions.span_table_is_partitioned()
        assert report["rows"] == len(expected) - batches[-1] and report["batches"] >= 1
        stored = sorted(Span.objects.values_list("pk", "trace_id", "span_id", "trace_day", "input"))
        assert stored == sorted(expected)
        for day in {row[3] for row in expected}:
            assert day in partitions.span_partition_days()
        new = Span.objects.create(project=project, trace=Trace.objects.first(), trace_day=today, span_id="f" * 16,
                                  name="after", start_time=timezone.now())
        assert new.pk > max(row[0] for row in expected)  # the id sequence goes on
    finally:
        if not partitions.span_table_is_partitioned():
            partitions.span_table_partition()


def test_the_conversion_command_reports_partitions(project):
    out = __import__("io").StringIO()
    call_command("span_partitions", stdout=out)
    assert partitions.partition_name(utc_today()) in out.getvalue()


def test_disk_use_counts_the_span_partitions(issued_key, project):
    """A partitioned table's own size is 0: Settings' disk use must add its partitions."""
    from traces.selectors.retention import project_disk_use

    _post(issued_key, agent_run_spans())
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size(%s)", [partitions.partition_name(utc_today())])
        partition_bytes = cursor.fetchone()[0]
        cursor.execute("SELECT pg_total_relation_size('traces_trace')")
        trace_bytes = cursor.fetchone()[0]
    assert partition_bytes > 0
    assert project_disk_use(project=project)["total_bytes"] >= partition_bytes + trace_bytes
