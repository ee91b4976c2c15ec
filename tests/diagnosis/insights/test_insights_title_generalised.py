"""Offline titles name the pattern (instance values generalised); an existing offline title made before that is
generalised in place at the next build, an LLM's title is left alone."""

import pytest

from diagnosis.models import Insight
from tests.diagnosis.insights.conftest import TOUCHED_BY, diagnose, insight_for_tasks
from tests.diagnosis.support import support_desk_ingest

pytestmark = pytest.mark.django_db


def test_titles_are_generalised_and_old_offline_titles_follow(project, desk_rubrics):
    support_desk_ingest(project=project, bugs="all", release="r1")
    run = diagnose(project, "r1")
    mediator = insight_for_tasks(project, "mediator", TOUCHED_BY["mediator_race"], run)
    billing = insight_for_tasks(project, "billing_worker", TOUCHED_BY["retry_loop"], run)
    # A rubric's finding: what went wrong, where, then the rubric; no instance value (the field, not the id).
    assert mediator.title.startswith("`mediator` drops the `")
    assert mediator.title.endswith(" (violates \u201cThe mediator keeps every fact a tool returned\u201d)")
    assert billing.title == "invoice_lookup called N times with identical arguments"
    titles = " ".join(Insight.objects.filter(project=project).values_list("title", flat=True))
    assert "O-50" not in titles and "INV-90" not in titles and " 5 times" not in titles

    # As a build before generalisation left them: an offline title with ids, an LLM title with a number.
    old = "O-5012 from track_shipment is missing from chat gpt-4o-mini (mediator)"
    Insight.objects.filter(pk=mediator.pk).update(title=old)
    Insight.objects.filter(pk=billing.pk).update(title="Retries 5 times", naming_source="llm")
    diagnose(project, "r1")
    mediator.refresh_from_db()
    billing.refresh_from_db()
    assert mediator.title == old.replace("O-5012", "<id>")  # same insight, same wording, no instance value
    assert billing.title == "Retries 5 times"
