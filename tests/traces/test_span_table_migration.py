"""Migration traces 0008 on an install that has spans (both databases): every span gets its trace's first-received
day, the unique key becomes (trace, span id, day, project) and the day NOT NULL; on Postgres the table is
partitioned. The migration is run for real, back to 0007 and forward again."""

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from traces.services.partitions import span_table_is_partitioned

BEFORE = ("traces", "0007_expired_trace")
AFTER = ("traces", "0008_span_partitions")


@pytest.mark.django_db(transaction=True)
def test_the_migration_fills_the_day_and_makes_the_new_unique_key(project):
    call_command("migrate", *BEFORE, verbosity=0)
    try:
        apps = MigrationExecutor(connection).loader.project_state(BEFORE).apps
        Trace, Span = apps.get_model("traces", "Trace"), apps.get_model("traces", "Span")
        trace = Trace.objects.create(project_id=project.pk, trace_id="a" * 32)
        from django.utils import timezone

        for n in range(3):
            Span.objects.create(project_id=project.pk, trace=trace, span_id=f"{n + 1:016x}", name=f"s{n}",
                                start_time=timezone.now())
        call_command("migrate", *AFTER, verbosity=0)

        with connection.cursor() as cursor:
            cursor.execute("SELECT first_received_day FROM traces_trace WHERE id = %s", [trace.pk])
            day = cursor.fetchone()[0]
            cursor.execute("SELECT count(*), count(trace_day), min(trace_day), max(trace_day) FROM traces_span "
                           "WHERE trace_id = %s", [trace.pk])
            total, with_day, low, high = cursor.fetchone()
        assert day is not None and (total, with_day) == (3, 3) and str(low) == str(high) == str(day)
        with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("INSERT INTO traces_span (project_id, trace_id, span_id, parent_span_id, name, kind, node, "
                           "node_inferred, node_fallback, agent_name, tool_name, model, status, status_message, "
                           "start_time, usage_is_aggregate, release, environment, session_id, user_id, tags, "
                           "metadata, attributes, resource, scope, events, exceptions, received_at, trace_day) "
                           "SELECT project_id, trace_id, span_id, parent_span_id, name, kind, node, node_inferred, "
                           "node_fallback, agent_name, tool_name, model, status, status_message, start_time, "
                           "usage_is_aggregate, release, environment, session_id, user_id, tags, metadata, "
                           "attributes, resource, scope, events, exceptions, received_at, trace_day FROM traces_span "
                           "WHERE trace_id = %s LIMIT 1", [trace.pk])  # the same (trace, span id, day, project)
        with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("UPDATE traces_span SET trace_day = NULL WHERE trace_id = %s", [trace.pk])
        assert span_table_is_partitioned() == (connection.vendor == "postgresql")
    finally:
        call_command("migrate", verbosity=0)
