import pytest

pytestmark = pytest.mark.django_db


def test_insights_filter_and_show_their_evidence(mine, theirs):
    client = mine.client()
    ids = lambda query: [row["id"] for row in client.get("/api/v1/insights/", query).json()["results"]]  # noqa: E731
    assert ids({}) == [mine.insight.id]
    assert ids({"level": "node", "node": "planner", "run": str(mine.run.id)}) == [mine.insight.id]
    assert ids({"level": "system"}) == []
    assert ids({"run": str(theirs.run.id)}) == []  # another project's run matches nothing
    detail = client.get(f"/api/v1/insights/{mine.insight.id}/").json()
    assert detail["title"] == f"skips the lookup {mine.marker}" and detail["last_run_id"] is None
    evidence = client.get(f"/api/v1/insights/{mine.insight.id}/evidence/").json()["results"]
    assert [(e["trace_id"], e["span_id"], e["quote"]) for e in evidence] == [(mine.trace.trace_id, "a" * 16, "answer")]
    assert client.get(f"/api/v1/insights/{10**30}/").status_code == 404  # past bigint: a miss
