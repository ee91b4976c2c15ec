"""The body of an insight in the REST API: its figures, its failure association (as the insight page words it) and
its ticket. Lists serialize a page with `insight_rows`, which reads the association facts and tickets of the whole
page in a few queries."""

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from clear.projects.models import Project
from diagnosis.models import Insight
from diagnosis.selectors.association import OutcomeShares, insight_outcome_shares_map
from diagnosis.tickets.models import Ticket
from diagnosis.tickets.selectors import ticket_by_insight_map

ASSOCIATIONS = ["associated", "not_associated", "unknown"]


class OutcomeSharesSerializer(serializers.Serializer):
    run_id = serializers.UUIDField(allow_null=True, help_text="the run the figures come from (the insight's last)")
    failing_traces = serializers.IntegerField(help_text="the run's judged traces whose recorded outcome is failure")
    failing_with_pattern = serializers.IntegerField(help_text="of those, the ones with the pattern: the insight's "
                                                              "traces that failed")
    failing_share = serializers.FloatField(allow_null=True, help_text="failing_with_pattern / failing_traces")
    succeeding_traces = serializers.IntegerField(help_text="the run's judged traces whose recorded outcome is "
                                                           "success")
    succeeding_with_pattern = serializers.IntegerField(help_text="of those, the ones with the pattern: the "
                                                                 "insight's traces that succeeded")
    succeeding_share = serializers.FloatField(allow_null=True, help_text="succeeding_with_pattern / "
                                                                         "succeeding_traces")


class InsightTicketSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=Ticket.Status.values)
    external_number = serializers.IntegerField(allow_null=True, help_text="the issue's number on the tracker")
    external_url = serializers.CharField(help_text="the issue on the tracker; empty until pushed")
    url = serializers.SerializerMethodField(help_text="the ticket in this API")

    def get_url(self, ticket: Ticket) -> str:
        return reverse("tickets:ticket-detail", kwargs={"ticket_id": ticket.pk})


class InsightOutputSerializer(serializers.ModelSerializer):
    first_run_id = serializers.UUIDField(allow_null=True)
    last_run_id = serializers.UUIDField(allow_null=True)
    merged_into_id = serializers.IntegerField(allow_null=True)
    affected_nodes = serializers.DictField(child=serializers.IntegerField(), help_text="{node: statements}")
    trend = serializers.ListField(child=serializers.DictField(), help_text="[{release, count, judged, frequency, "
                                                                             "run}]")
    failure_association = serializers.ChoiceField(
        choices=ASSOCIATIONS, read_only=True,
        help_text="associated: traces with the pattern fail more often than traces without it (the lift interval "
                  "lies above 1); not_associated: the interval includes 1 or lies below it, or the pattern is "
                  "by-design behaviour (by_design); unknown: fewer than 10 judged traces succeeded (none has a "
                  "recorded outcome, or the runs all failed), so there is no lift")
    outcome_shares = serializers.SerializerMethodField(
        help_text="the pattern's share of the failing and of the succeeding traces, which the lift compares")
    ticket = serializers.SerializerMethodField(help_text="the ticket made from the insight, null when none")

    class Meta:
        model = Insight
        fields = [
            "id", "level", "node", "is_other", "title", "description", "root_cause", "recommendation", "severity",
            "count", "trace_count", "frequency", "frequency_low", "frequency_high", "lift", "lift_low", "lift_high",
            "failure_association", "by_design", "outcome_shares", "affected_nodes", "first_seen", "last_seen",
            "first_run_id", "last_run_id", "status", "review", "merged_into_id", "ticket", "trend", "created_at",
            "updated_at",
        ]

    @extend_schema_field(OutcomeSharesSerializer)
    def get_outcome_shares(self, insight: Insight) -> dict:
        shares: dict[int, OutcomeShares] | None = self.context.get("shares")
        if shares is None:
            shares = insight_outcome_shares_map(project=insight.project, insights=[insight])
        found = shares[insight.pk]
        # As OutcomeSharesSerializer renders it, without a serializer per insight (a page of 50 spent more time
        # building nested serializers than computing the figures).
        return {"run_id": str(found.run_id) if found.run_id else None, "failing_traces": found.failing_traces,
                "failing_with_pattern": found.failing_with_pattern, "failing_share": found.failing_share,
                "succeeding_traces": found.succeeding_traces,
                "succeeding_with_pattern": found.succeeding_with_pattern, "succeeding_share": found.succeeding_share}

    @extend_schema_field(InsightTicketSerializer(allow_null=True))
    def get_ticket(self, insight: Insight) -> dict | None:
        tickets: dict[int, Ticket] | None = self.context.get("tickets")
        if tickets is None:
            tickets = ticket_by_insight_map(project=insight.project, insight_ids=[insight.pk])
        ticket = tickets.get(insight.pk)
        if ticket is None:
            return None
        return {"id": ticket.pk, "status": ticket.status, "external_number": ticket.external_number,
                "external_url": ticket.external_url,
                "url": reverse("tickets:ticket-detail", kwargs={"ticket_id": ticket.pk})}


def insight_rows(*, project: Project, insights: list[Insight]) -> list[dict]:
    """A page of insights as the API shows them."""
    context = {"shares": insight_outcome_shares_map(project=project, insights=insights),
               "tickets": ticket_by_insight_map(project=project, insight_ids=[insight.pk for insight in insights])}
    return InsightOutputSerializer(insights, many=True, context=context).data
