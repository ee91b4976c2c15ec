import pytest
from rest_framework.test import APIClient

from clear.projects.services import api_key_create
from diagnosis.models import Insight, InsightLink
from diagnosis.tickets.models import Ticket
from tests.diagnosis.insights.conftest import desk_rubrics, diagnose  # noqa: F401 - the insights tests' fixture
from tests.diagnosis.support import support_desk_ingest
from tests.tickets.fake_github import FakeGitHub


@pytest.fixture
def desk_run(project, desk_rubrics):  # noqa: F811
    """The example agent with every planted fault, diagnosed once, insights built (tickets follow)."""
    support_desk_ingest(project=project, bugs="all", release="r1")
    return diagnose(project, "r1")


def _gets_ticket(insight) -> bool:
    return insight.failure_association != "not_associated"


def ticketable(project) -> list:
    """The insights that get a ticket (TICKETS.md, one problem one ticket): not "other", rejected, merged or not
    associated with failure, and no node insight that is part of a system insight with a ticket."""
    insights = [i for i in Insight.objects.filter(project=project, is_other=False, merged_into=None)
                .exclude(review=Insight.Review.REJECTED).order_by("pk") if _gets_ticket(i)]
    systems = {i.pk for i in insights if i.level == "system"}
    covered = set(InsightLink.objects.filter(system_id__in=systems).values_list("node_id", flat=True))
    return [i for i in insights if i.pk not in covered]


def tracked(insight):
    """The insight whose ticket tracks `insight`'s problem: the system insight it is part of, if any."""
    link = InsightLink.objects.filter(node=insight).select_related("system").order_by("-share").first()
    return link.system if link is not None and _gets_ticket(link.system) else insight


def ticket_of(insight) -> Ticket:
    return Ticket.objects.get(project=insight.project, insight=insight)


@pytest.fixture
def github(settings):
    # The fake listens on http://127.0.0.1: an address the tracker reaches only where the operator allows it.
    settings.CLEAR_TRACKER_ALLOW_PRIVATE = settings.CLEAR_TRACKER_ALLOW_HTTP = True
    server = FakeGitHub().start()
    yield server
    server.stop()


@pytest.fixture
def api(project, owner):
    key = api_key_create(project=project, name="tickets tests", created_by=owner)
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {key.secret}")
