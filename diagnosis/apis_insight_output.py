"""The body of an insight in the REST API: its figures, its failure association (as the insight page words it) and
its ticket; one insight also its attribution (where its failing traces went wrong). Lists serialize a page with
`insight_rows`, which reads the association facts and tickets of the whole page in a few queries."""

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from clear.projects.models import Project
from diagnosis.attribution.apis import AttributionCandidateSerializer
from diagnosis.attribution.selectors import attribution_brief_for_insight
from diagnosis.models import Insight
from diagnosis.selectors.association import OutcomeShares, insight_outcome_shares_map
from diagnosis.selectors.insights import insight_release_figures
from diagnosis.selectors.problems import insight_nodes_map
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


class RecoveredSerializer(serializers.Serializer):
    count = serializers.IntegerField(help_text="the insight's traces (in the run its figures come from) whose "
                                               "occurrences were all errors the run recovered from: it later reached "
                                               "what the failed call sought (diagnosis/judges/recovery.py)")
    of = serializers.IntegerField(help_text="the insight's traces in that run: \"recovered in count of of runs\"")
    failing = serializers.IntegerField(help_text="of the recovered traces, the ones whose outcome is failure")
    succeeding = serializers.IntegerField(help_text="of the recovered traces, the ones whose outcome is success")
    lift_on = serializers.ChoiceField(
        choices=["all", "unrecovered", "recovered"],
        help_text="the traces the lift compares: unrecovered (the traces where the error was not recovered), "
                  "recovered (only those are associated with failure, or there are no others) or all (none "
                  "recovered)")


class InsightTicketSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=Ticket.Status.values)
    external_number = serializers.IntegerField(allow_null=True, help_text="the issue's number on the tracker")
    external_url = serializers.CharField(help_text="the issue on the tracker; empty until pushed")
    url = serializers.SerializerMethodField(help_text="the ticket in this API")

    def get_url(self, ticket: Ticket) -> str:
        return reverse("tickets:ticket-detail", kwargs={"ticket_id": ticket.pk})


class InsightNestedNodeSerializer(serializers.ModelSerializer):
    failure_association = serializers.ChoiceField(choices=ASSOCIATIONS, read_only=True)
    url = serializers.SerializerMethodField(help_text="the node insight in this API")

    class Meta:
        model = Insight
        fields = ["id", "level", "node", "title", "severity", "status", "count", "trace_count", "frequency",
                  "failure_association", "url"]

    def get_url(self, insight: Insight) -> str:
        return reverse("diagnosis:insight-detail", kwargs={"insight_id": insight.pk})


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
    failure_inconclusive = serializers.BooleanField(
        read_only=True,
        help_text="not_associated only for want of traces: the lift is above 1 but its interval still includes 1. "
                  "Such an insight gets a candidate ticket (its body says it is not yet shown to go with failure)")
    outcome_shares = serializers.SerializerMethodField(
        help_text="the pattern's share of the failing and of the succeeding traces, which the lift compares")
    recovered = serializers.SerializerMethodField(
        help_text="in how many of its traces the run recovered from the error: \"recovered in N of M runs\"")
    ticket = serializers.SerializerMethodField(help_text="the ticket made from the insight, null when none")
    regressed = serializers.SerializerMethodField(
        help_text="absent from (or fixed in) the previous release and back in regressed_in_release")
    regressed_in_release = serializers.CharField(allow_blank=True, help_text="\"\" when not regressed")
    in_release = serializers.SerializerMethodField(
        help_text="only with ?release=: the insight in that release, {release, count, judged, frequency, run} from "
                  "its trend (the latest run with insights that judged it); null otherwise")
    text_source = serializers.SerializerMethodField(
        help_text="model: the title, description, root cause and recommendation were written by the model and "
                  "passed the checks (no echo of the prompt, grounded in the statements); computed: Clear's offline "
                  "text, because there was no model or its text failed the checks (text_source_reason says why)")
    text_source_reason = serializers.SerializerMethodField(
        help_text="why the model's text was replaced by the computed one; empty otherwise")
    nodes = InsightNestedNodeSerializer(
        source="nested_nodes", many=True, required=False,
        help_text="only in the default (one row per problem) list: the node insights this system insight holds, "
                  "each also at its own URL; empty for a node insight; absent with ?level= and on one insight")

    class Meta:
        model = Insight
        fields = [
            "id", "level", "node", "is_other", "title", "description", "root_cause", "recommendation", "severity",
            "count", "trace_count", "frequency", "frequency_low", "frequency_high", "lift", "lift_low", "lift_high",
            "failure_association", "failure_inconclusive", "by_design", "outcome_shares", "recovered", "affected_nodes", "first_seen",
            "last_seen", "first_run_id", "last_run_id", "status", "review", "merged_into_id", "ticket", "trend",
            "created_at", "updated_at", "nodes", "regressed", "regressed_in_release", "in_release", "text_source",
            "text_source_reason",
        ]

    def get_text_source(self, insight: Insight) -> str:
        return "model" if insight.naming_source == "llm" else "computed"

    def get_text_source_reason(self, insight: Insight) -> str:
        return "" if insight.naming_source == "llm" else insight.naming_note

    def get_regressed(self, insight: Insight) -> bool:
        return bool(insight.regressed_in_release)

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_in_release(self, insight: Insight) -> dict | None:
        release = self.context.get("release")
        return insight_release_figures(insight=insight, release=release) if release else None

    def _shares(self, insight: Insight) -> OutcomeShares:
        shares: dict[int, OutcomeShares] = self.context.get("shares") or {}
        if insight.pk not in shares:
            # Computed once per insight: `recovered` and `outcome_shares` read the same figures.
            own = self.__dict__.setdefault("_own_shares", {})
            if insight.pk not in own:
                own.update(insight_outcome_shares_map(project=insight.project, insights=[insight]))
            return own[insight.pk]
        return shares[insight.pk]

    @extend_schema_field(RecoveredSerializer)
    def get_recovered(self, insight: Insight) -> dict:
        found = self._shares(insight)
        return {"count": found.recovered_traces, "of": found.pattern_traces, "failing": found.recovered_failing,
                "succeeding": found.recovered_succeeding, "lift_on": found.lift_on}

    @extend_schema_field(OutcomeSharesSerializer)
    def get_outcome_shares(self, insight: Insight) -> dict:
        found = self._shares(insight)
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


class InsightAttributionStepSerializer(serializers.Serializer):
    trace_id = serializers.CharField()
    step_index = serializers.IntegerField(allow_null=True)
    span_id = serializers.CharField()
    confidence = serializers.FloatField(allow_null=True)
    evidence = serializers.ListField(child=serializers.CharField(), help_text="what the answer weighed")


class InsightAttributionBriefSerializer(serializers.Serializer):
    confident = serializers.BooleanField(help_text="whether one agent is blamed: most confident answers name it")
    blamed = serializers.CharField(allow_null=True, help_text="that agent; null when not confident")
    step = InsightAttributionStepSerializer(
        allow_null=True, help_text="when confident: the blamed agent's step in its most confident answer; null "
                                   "otherwise")
    candidates = AttributionCandidateSerializer(
        many=True, help_text="when not confident: the top candidates with the evidence for each; empty otherwise")
    failing = serializers.IntegerField(help_text="the insight's failing traces")
    attributed = serializers.IntegerField(help_text="of those, the ones with an attribution")
    confident_count = serializers.IntegerField()
    unconfident_count = serializers.IntegerField()


class InsightDetailOutputSerializer(InsightOutputSerializer):
    """One insight (GET /api/v1/insights/<id>/): the list's body plus its attribution, which a page of insights
    leaves to GET /api/v1/insights/<id>/attribution/."""

    attribution = serializers.SerializerMethodField(
        help_text="where the insight's failing traces went wrong (issue 42): one blamed agent and its step only when "
                  "confident, else no agent and the candidates with their evidence; the full answer per trace is at "
                  "GET /api/v1/insights/<id>/attribution/")

    class Meta(InsightOutputSerializer.Meta):
        fields = [*InsightOutputSerializer.Meta.fields, "attribution"]

    @extend_schema_field(InsightAttributionBriefSerializer)
    def get_attribution(self, insight: Insight) -> dict:
        return attribution_brief_for_insight(project=insight.project, insight=insight)


def insight_rows(*, project: Project, insights: list[Insight], nested: bool = False,
                 release: str | None = None) -> list[dict]:
    """A page of insights as the API shows them; nested: each with its `nodes` (the node insights a system insight
    holds); release: each with `in_release`, its figures in that release."""
    if nested:
        held = insight_nodes_map(project=project, system_pks=[i.pk for i in insights if i.level == "system"])
        for insight in insights:
            insight.nested_nodes = held.get(insight.pk, [])
    context = {"shares": insight_outcome_shares_map(project=project, insights=insights),
               "tickets": ticket_by_insight_map(project=project, insight_ids=[insight.pk for insight in insights]),
               "release": release}
    return InsightOutputSerializer(insights, many=True, context=context).data
