"""The job state machine and its guards: one transition helper, audit events, one active job per target."""

import pytest
from django.db import IntegrityError, transaction

from evolution.config import job_policy_build, target_config_validate
from evolution.errors import EvolutionConfigInvalid
from evolution.models import AuditEvent, EvolutionJob, JobState
from evolution.services import JobStateError, TargetBusyError, evolution_target_add, job_transition
from evolution.services.targets import evolution_target_update
from tests.evolution.fixture_repo import CONFIG

pytestmark = pytest.mark.django_db


def _job(project, target, insight, state=JobState.QUEUED):
    return EvolutionJob.objects.create(project=project, target=target, insight=insight, backend_name="scripted",
                                       state=state, config_snapshot={"policy": {}, "target": CONFIG})


def test_config_errors_name_each_bad_field():
    bad = {**CONFIG, "trial_command": "python run.py --seed {seed}", "sandbox_levels": ["chroot"],
           "diff_budget": {"max_files": 0}, "editable_paths": ["/etc/**"], "surprise": 1}
    with pytest.raises(EvolutionConfigInvalid) as caught:
        target_config_validate(bad)
    fields = caught.value.extra["fields"]
    assert set(fields) == {"sandbox_levels", "diff_budget.max_files", "editable_paths", "surprise", "trial_command"}
    assert "trial_command: must contain {out}, {task_id}" in caught.value.message
    assert "chroot" in fields["sandbox_levels"] and "relative glob" in fields["editable_paths"]
    with pytest.raises(EvolutionConfigInvalid, match="grader_command: unknown placeholder"):
        target_config_validate({**CONFIG, "grader_command": "python g.py --out {out} {secret}"})
    with pytest.raises(EvolutionConfigInvalid, match="trial_command: Field required"):
        target_config_validate({k: v for k, v in CONFIG.items() if k != "trial_command"})


def test_policy_takes_depth_tier_then_target_trials_then_overrides():
    config = target_config_validate(CONFIG)
    shallow = job_policy_build(depth="shallow", target_config=config)
    assert (shallow["max_iterations"], shallow["plan_rounds"], shallow["code_rounds"]) == (2, 1, 1)
    assert shallow["trials"] == 2  # the target's "trials"
    deep = job_policy_build(depth="deep", target_config=config, overrides={"trials": 4})
    assert deep["max_iterations"] == 5 and deep["trials"] == 4
    with pytest.raises(EvolutionConfigInvalid, match="depth"):
        job_policy_build(depth="bottomless", target_config=config)
    with pytest.raises(EvolutionConfigInvalid, match="max_iterations"):
        job_policy_build(depth="shallow", target_config=config, overrides={"max_iterations": 0})


def test_target_add_reads_the_repository_config_and_refuses_duplicates(project, router_remote, router_target):
    assert router_target.config["editable_paths"] == ["router/**"]
    with pytest.raises(Exception, match="already exists"):
        evolution_target_add(operator=True, project=project, name="router", source=str(router_remote))
    with pytest.raises(EvolutionConfigInvalid, match="does not exist"):
        evolution_target_add(operator=True, project=project, name="x", source="/nonexistent/repo")
    with pytest.raises(EvolutionConfigInvalid, match="trials"):
        evolution_target_update(target=router_target, config={**CONFIG, "trials": 0})


def test_transition_checks_the_state_bumps_the_version_and_audits(project, router_target, refund_insight):
    job = _job(project, router_target, refund_insight)
    moved = job_transition(job_id=job.pk, from_states=[JobState.QUEUED], to_state=JobState.PREPARING, actor="t",
                           event="claimed", base_commit="a" * 40)
    assert (moved.state, moved.state_version, moved.base_commit) == ("PREPARING", 1, "a" * 40)
    with pytest.raises(JobStateError) as caught:
        job_transition(job_id=job.pk, from_states=[JobState.QUEUED], to_state=JobState.PREPARING, actor="t",
                       event="claimed")
    assert caught.value.code == "job_wrong_state" and caught.value.extra["state"] == "PREPARING"
    with pytest.raises(JobStateError, match="not a transition"):
        job_transition(job_id=job.pk, from_states=[JobState.PREPARING], to_state=JobState.PR_OPENED, actor="t",
                       event="skip")
    job_transition(job_id=job.pk, from_states=[JobState.PREPARING], to_state=JobState.FAILED, actor="t",
                   event="failed", terminal_reason="boom")
    events = list(AuditEvent.objects.filter(job=job).values_list("event", "from_state", "to_state"))
    assert events == [("claimed", "QUEUED", "PREPARING"), ("failed", "PREPARING", "FAILED")]
    job.refresh_from_db()
    assert job.finished_at is not None and job.state_version == 2
    with pytest.raises(JobStateError):  # terminal states have no way out
        job_transition(job_id=job.pk, from_states=[JobState.FAILED], to_state=JobState.CANCELLED, actor="t",
                       event="x")


def test_at_most_one_active_job_per_target(project, router_target, refund_insight):
    _job(project, router_target, refund_insight, state=JobState.TRIALS)
    with pytest.raises(IntegrityError), transaction.atomic():
        _job(project, router_target, refund_insight)
    _job(project, router_target, refund_insight, state=JobState.FAILED)  # terminal jobs do not count


def test_start_refuses_a_second_active_job(project, router_target, refund_insight, tmp_path):
    from evolution.services import evolution_job_start

    script = {"script": {"entries": []}}
    first = evolution_job_start(project=project, target=router_target, insight=refund_insight,
                                backend_name="scripted", backend_config=script, enqueue=False)
    with pytest.raises(TargetBusyError, match=f"already has an active job \\({first.pk}\\)"):
        evolution_job_start(project=project, target=router_target, insight=refund_insight, backend_name="scripted",
                            backend_config=script, enqueue=False)
