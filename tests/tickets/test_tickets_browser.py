"""The exported bug list leads back into Clear: export it from the Tickets page, read the downloaded file, follow one
ticket's link in the browser and land on its insight (CLEAR_PUBLIC_URL is where people reach this Clear)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from diagnosis.models import Insight
from diagnosis.tickets.models import Ticket
from tests.frontend.support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("output", ["md", "csv", "json"])
def test_a_ticket_link_in_the_exported_file_opens_its_insight(live_server, page, project, owner, desk_run,
                                                              settings, tmp_path, output):
    settings.CLEAR_PUBLIC_URL = live_server.url
    login(page, live_server.url)
    page.goto(f"{live_server.url}/p/{project.slug}/tickets/")
    page.wait_for_selector("[data-testid=ticket-table]")
    with page.expect_download() as download_info:
        page.click(f"[data-testid=export-{output}]")
    saved = tmp_path / f"bugs.{output}"
    download_info.value.save_as(saved)
    text = Path(saved).read_text(encoding="utf-8")

    ticket = Ticket.objects.filter(project=project, status="open").order_by("-frequency", "pk").first()
    if output == "md":
        urls = re.findall(rf"\]\(({re.escape(live_server.url)}/p/[^)\s]+/insights/\d+/)\)", text)
    elif output == "csv":
        urls = [row["url"] for row in csv.DictReader(text.splitlines())]
    else:
        urls = [item["url"] for item in json.loads(text)["tickets"]]
    assert urls and all(u.startswith(f"{live_server.url}/p/{project.slug}/insights/") for u in urls)
    link = urls[0]  # the export lists the most frequent first
    assert link == f"{live_server.url}/p/{project.slug}/insights/{ticket.insight_id}/"

    page.goto(link)  # as a reader of the file would: a new navigation to the absolute URL
    page.wait_for_selector("[data-testid=insight-title]")
    insight = Insight.objects.get(pk=ticket.insight_id)
    # The title as the page shows it: its `code` spans rendered as code, so without the backticks.
    assert page.url == link and page.inner_text("[data-testid=insight-title]") == insight.title.replace("`", "")
