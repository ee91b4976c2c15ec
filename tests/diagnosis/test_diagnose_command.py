from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from diagnosis.models import DiagnosisRun
from diagnosis.services import rubric_create
from tests.diagnosis.support import support_desk_ingest

pytestmark = pytest.mark.django_db


def _diagnose(*args):
    out, err = StringIO(), StringIO()
    call_command("diagnose", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_diagnose_inline_prints_progress_and_a_summary(project, settings):
    settings.CLEAR_JUDGE_MODEL = ""
    support_desk_ingest(project=project, bugs="all", release="r1")
    rubric_create(project=project, name="no order lookups for refunds", kind="tool_never",
                  config={"tool": "order_lookup", "when": {"goal_regex": "refund"}})
    out, err = _diagnose("--project", project.name, "--release", "r1", "--inline")
    run = DiagnosisRun.objects.get(project=project)
    assert run.status == "succeeded" and run.done_count == 22
    assert "[##############################] 22/22 traces" in err
    assert f"Run {run.pk}: succeeded" in out
    assert "traces judged: 22 of 22" in out
    assert "feedback by status: ok" in out
    assert "rule.repeated_tool_call" in out and f"rubric.{run.feedback.filter(judge_kind='rubric').first().rubric_id}" in out
    assert "tokens: 0 in, 0 out; cost $0.0000" in out


def test_diagnose_filters_and_sampling(project, settings):
    settings.CLEAR_JUDGE_MODEL = ""
    support_desk_ingest(project=project, bugs="none", release="r2")
    out, _ = _diagnose("--project", project.slug, "--release", "r2", "--judges", "rule.loop", "--sample-rate", "0.5",
                       "--inline")
    run = DiagnosisRun.objects.get(project=project)
    assert 0 < run.total_count < 22 and run.judges == ["rule.loop"]
    _diagnose("--project", project.slug, "--release", "r2", "--judges", "rule.loop", "--sample-rate", "0.5", "--inline")
    again = DiagnosisRun.objects.filter(project=project).order_by("-created_at").first()
    assert set(again.items.values_list("trace_id", flat=True)) == set(run.items.values_list("trace_id", flat=True))
    _diagnose("--project", project.slug, "--since", "2025-01-06T09:30:00Z", "--until", "2025-01-07", "--inline",
              "--judges", "rules")
    windowed = DiagnosisRun.objects.filter(project=project).order_by("-created_at").first()
    assert 0 < windowed.total_count < 22


@pytest.mark.parametrize("args, message", [
    (["--project", "nope"], "No project named 'nope'"),
    (["--judges", "rule.nope"], "Unknown judge 'rule.nope'"),
    (["--judges", "llm.trace"], "The LLM judges need a model"),
    (["--sample-rate", "0"], "sample_rate must be in (0, 1]"),
    (["--since", "yesterday-ish"], "Cannot read the time"),
    (["--rubrics", "a,b"], '--rubrics takes "all"'),
    (["--rubrics", "999999"], "No rubric with id [999999]"),
    (["--trace-ids", "deadbeef"], "1 trace id(s) not found"),
])
def test_diagnose_refuses_bad_arguments_with_a_reason(project, settings, args, message):
    settings.CLEAR_JUDGE_MODEL = ""
    if args[0] != "--project":
        args = ["--project", project.name, *args]
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        _diagnose(*args, "--inline")
