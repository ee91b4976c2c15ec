"""Issue 43.2: the implementer's summary of its patch, which the job page shows, is grounded in what it was written
from (the request, the files, the diff). The litellm backend asks once more with the reason; a summary still naming
what none of that holds is replaced by the diff's computed summary, and the page and artifact say so; a grounded
summary is kept unchanged (fake OpenAI-compatible server, scripted backend)."""

import json

import pytest

from evolution.summary_grounding import diff_summary, implementer_output_grounded
from tests.evolution.test_backend_litellm import CALC, _request, repo  # noqa: F401 - the fixture repository
# The litellm backend's fixtures: the backend on the fake server, and its key variable allowed (autouse there).
from tests.evolution.test_backend_litellm import backend, key_variables_allowed  # noqa: F401

FIX = {"path": "pkg/calc.py", "search": "def add(a, b):\n    return a - b",
       "replace": "def add(a, b):\n    return a + b"}
DIFF = ("diff --git a/pkg/calc.py b/pkg/calc.py\n--- a/pkg/calc.py\n+++ b/pkg/calc.py\n@@ -1,2 +1,2 @@\n"
        " def add(a, b):\n-    return a - b\n+    return a + b\n")
INVENTED = "Rewrote `multiply_numbers` in the Lambda service so that totals are right."


def _reply(summary: str) -> str:
    return json.dumps({"status": "DONE", "summary": summary, "deviations": [], "blocker": "", "edits": [FIX]})


def test_a_grounded_summary_is_kept_and_an_invented_one_replaced_by_the_diff_summary():
    grounded = {"status": "DONE", "summary": "add() in pkg/calc.py now returns a + b instead of a - b."}
    assert implementer_output_grounded(output=grounded, evidence_texts=["make add() add"], diff=DIFF) == {
        **grounded, "text_source": "model"}

    shown = implementer_output_grounded(output={"status": "DONE", "summary": INVENTED},
                                        evidence_texts=["make add() add"], diff=DIFF)
    assert shown["summary"] == "Changed 1 file (+1 \u22121): pkg/calc.py (+1 \u22121)." == diff_summary(diff=DIFF)
    assert shown["text_source"] == "computed"
    assert "\u201cmultiply_numbers\u201d" in shown["text_source_reason"]
    assert "\u201cLambda\u201d" in shown["text_source_reason"]


def test_the_litellm_implementer_is_asked_again_about_an_ungrounded_summary(backend, fake_llm, repo,  # noqa: F811
                                                                             tmp_path):
    fake_llm.script(_reply(INVENTED), _reply("add() in pkg/calc.py now adds."))
    result = backend.run_role(_request(repo, tmp_path))

    assert fake_llm.call_count == 2
    repair = fake_llm.requests[1]["messages"][-1]["content"]
    assert "not grounded" in repair and "multiply_numbers" in repair
    assert result.exit_code == 0 and result.output["summary"] == "add() in pkg/calc.py now adds."
    assert (repo / "pkg" / "calc.py").read_text() == CALC.replace("return a - b", "return a + b", 1)


def test_a_summary_ungrounded_twice_keeps_the_edits(backend, fake_llm, repo, tmp_path):  # noqa: F811
    fake_llm.script(default=_reply(INVENTED))
    result = backend.run_role(_request(repo, tmp_path))

    assert fake_llm.call_count == 2
    assert result.exit_code == 0 and result.error == ""  # the edits stand: the stage replaces the summary
    assert (repo / "pkg" / "calc.py").read_text() == CALC.replace("return a - b", "return a + b", 1)
    log = [json.loads(line) for line in result.transcript_path.read_text().splitlines()]
    assert "summary_not_grounded" in [entry["event"] for entry in log]


@pytest.mark.django_db
@pytest.mark.parametrize("summary, source", [
    ("route() in router/agent.py now sends refund requests to the refunds queue.", "model"),
    ("Rewrote `dispatch_ticket` in the mediator service.", "computed"),
])
def test_the_job_shows_the_computed_summary_with_the_reason(project, owner, router_target, refund_insight, tmp_path,
                                                            django_capture_on_commit_callbacks, summary, source):
    from evolution.models import Artifact
    from evolution.services import evolution_job_start
    from evolution.services.workspace import artifact_json
    from tests.evolution.fixture_repo import FIXED_BRANCH, replace_edit
    from tests.evolution.support import DONE, happy_entries, script_write
    from tests.frontend.conftest import client_for

    entries = happy_entries(replace_edit(FIXED_BRANCH))
    for entry in entries:
        if entry["role"] == "implementer":
            entry["output"] = {**DONE, "summary": summary}
    script = script_write(tmp_path / "script.json", entries)
    with django_capture_on_commit_callbacks(execute=True):
        job = evolution_job_start(project=project, target=router_target, insight=refund_insight,
                                  backend_name="scripted", backend_config={"script_path": str(script)},
                                  depth="shallow", created_by=owner)
    job.refresh_from_db()
    assert job.state == "AWAITING_CONSENT", job.error

    shown = artifact_json(artifact=Artifact.objects.get(job=job, kind="implementer"))
    html = client_for(owner).get(f"/p/{project.slug}/evolution/jobs/{job.pk}/").content.decode()
    assert shown["text_source"] == source
    if source == "model":
        assert shown["summary"] == summary and 'data-testid="implementer-text-source"' not in html
    else:
        assert shown["summary"].startswith("Changed 1 file (+") and "router/agent.py" in shown["summary"]
        assert "\u201cdispatch_ticket\u201d" in shown["text_source_reason"]
        assert "mediator" in shown["text_source_reason"]
        assert 'data-testid="implementer-text-source"' in html and "dispatch_ticket" in html
        assert summary not in html
