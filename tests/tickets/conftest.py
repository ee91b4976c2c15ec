import pytest
from rest_framework.test import APIClient

from clear.projects.services import api_key_create
from diagnosis.models import Insight
from diagnosis.tickets.models import Ticket
from tests.diagnosis.insights.conftest import desk_rubrics, diagnose  # noqa: F401 - the insights tests' fixture
from tests.diagnosis.support import support_desk_ingest
from tests.tickets.fake_github import FakeGitHub


@pytest.fixture
def desk_run(project, desk_rubrics):  # noqa: F811
    """The example agent with every planted fault, diagnosed once, insights built (tickets follow)."""
    support_desk_ingest(project=project, bugs="all", release="r1")
    return diagnose(project, "r1")


def ticketable(project):
    return Insight.objects.filter(project=project, is_other=False, merged_into=None) \
        .exclude(review=Insight.Review.REJECTED).order_by("pk")


def ticket_of(insight) -> Ticket:
    return Ticket.objects.get(project=insight.project, insight=insight)


@pytest.fixture
def github():
    server = FakeGitHub().start()
    yield server
    server.stop()


@pytest.fixture
def api(project, owner):
    key = api_key_create(project=project, name="tickets tests", created_by=owner)
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {key.secret}")
