"""One row per problem: a system insight holds the node insights it links (InsightLink), so lists show it once with
its node insights nested, and a node insight belonging to no listed system insight is its own row. Also which
insights are outlier findings alone (rule.latency_outlier / rule.token_outlier): a symptom, listed only when
associated with failure; and which system "other" buckets repeat one node's."""

from __future__ import annotations

from django.db.models import Exists, OuterRef, Q, QuerySet

from clear.projects.models import Project
from diagnosis.models import Insight, InsightLink, InsightStatement

OUTLIER_JUDGES = ("rule.latency_outlier", "rule.token_outlier")


def outlier_alone_unassociated() -> Q:
    """Insights whose statements all come from the outlier rules and whose lift interval does not lie above 1: a
    span far above its node's median that does not go with failing runs is no problem to list."""
    statements = InsightStatement.objects.all()
    outliers = (Exists(statements.filter(node_insight=OuterRef("pk"), judge__in=OUTLIER_JUDGES))
                | Exists(statements.filter(system_insight=OuterRef("pk"), judge__in=OUTLIER_JUDGES)))
    others = (Exists(statements.filter(node_insight=OuterRef("pk")).exclude(judge__in=OUTLIER_JUDGES))
              | Exists(statements.filter(system_insight=OuterRef("pk")).exclude(judge__in=OUTLIER_JUDGES)))
    associated = Q(by_design=False, lift_low__isnull=False, lift_low__gt=1)
    return outliers & ~others & ~associated


def other_emptied() -> Q:
    """"Other" buckets that hold no statement any more: an early re-clustering over a few traces left statements
    there that a later one placed in insights; a refresh drops no insight, so the bucket stays, empty."""
    statements = InsightStatement.objects.filter(excluded=False)
    return (Q(is_other=True) & ~Exists(statements.filter(node_insight=OuterRef("pk")))
            & ~Exists(statements.filter(system_insight=OuterRef("pk"))))


def other_repeating_a_node() -> Q:
    """System-level "other" buckets whose statements all sit in one node's "other" bucket: on an agent with one node
    (tau-airline's `airline_agent`), what no cluster explains is the same statements at both levels, and the node's
    bucket already lists them (the system bucket is for leftovers of several nodes, or of trace-level judges)."""
    statements = InsightStatement.objects.filter(excluded=False)
    elsewhere = statements.filter(system_insight=OuterRef(OuterRef("pk"))).filter(
        Q(node_insight__isnull=True) | ~Q(node_insight=OuterRef("pk")))
    buckets = Insight.objects.filter(project=OuterRef("project"), level=Insight.Level.NODE, is_other=True,
                                     merged_into__isnull=True).exclude(review=Insight.Review.REJECTED)
    holding = buckets.filter(Exists(statements.filter(system_insight=OuterRef(OuterRef("pk")),
                                                      node_insight=OuterRef("pk")))).filter(~Exists(elsewhere))
    return Q(is_other=True, level=Insight.Level.SYSTEM) & Exists(holding)


def nested_in(systems: QuerySet) -> Q:
    """Node insights linked to one of `systems` (a queryset of system insights): listed under it, not on their own."""
    links = InsightLink.objects.filter(node=OuterRef("pk"), system__in=systems.order_by().values("pk"))
    return Q(level=Insight.Level.NODE) & Exists(links)


def insight_nodes_map(*, project: Project, system_pks: list[int]) -> dict[int, list[Insight]]:
    """{system insight pk: the node insights it holds, most shared statements first}; a node insight shared by two
    system insights is under each. Rejected and merged-away node insights are left out. One query."""
    links = (InsightLink.objects.filter(system__project=project, system_id__in=system_pks,
                                        node__merged_into__isnull=True)
             .exclude(node__review=Insight.Review.REJECTED).select_related("node")
             .order_by("system_id", "-shared", "node__node", "node_id"))
    nodes: dict[int, list[Insight]] = {pk: [] for pk in system_pks}
    for link in links:
        nodes[link.system_id].append(link.node)
    return nodes
