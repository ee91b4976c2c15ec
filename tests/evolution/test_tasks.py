"""evolution.run_stage: the one stage task, and the old per-stage task names still routed to it."""

import time
from unittest import mock

import pytest
from django.db import OperationalError

from clear.celery import app
from evolution.services.stages import STAGE_STATES
from evolution.tasks import LEGACY_STAGE_TASK_NAMES, legacy_stage, run_stage


@pytest.mark.django_db
def test_run_stage_dispatches_through_the_stage_table():
    with mock.patch("evolution.services.stages.stage_execute", return_value="done") as execute:
        assert run_stage.apply(args=(7, "plan"), kwargs={"iteration": 2, "round": 1}).get() == "done"
    execute.assert_called_once_with(job_id=7, stage="plan", iteration=2, round=1)
    assert run_stage.apply(args=(7, "deploy")).get() == "unknown stage 'deploy'"


@pytest.mark.django_db
def test_run_stage_retries_when_the_database_blinks():
    with mock.patch("evolution.services.stages.stage_execute", side_effect=[OperationalError("gone away"), "done"]), \
            mock.patch.object(run_stage, "retry", side_effect=RuntimeError("retried")) as retry:
        with pytest.raises(RuntimeError, match="retried"):
            run_stage.apply(args=(7, "trials"), throw=True)
    assert isinstance(retry.call_args.kwargs["exc"], OperationalError)


def test_the_old_stage_task_names_are_aliases_sent_on_as_run_stage():
    assert {name.removeprefix("evolution.") for name in LEGACY_STAGE_TASK_NAMES} == set(STAGE_STATES)
    assert all(app.tasks[name] is app.tasks["evolution.legacy_stage"] for name in LEGACY_STAGE_TASK_NAMES)
    legacy_stage.push_request(task="evolution.plan_review")
    try:
        with mock.patch.object(run_stage, "apply_async") as send:
            legacy_stage.run(5, iteration=1, round=2)
    finally:
        legacy_stage.pop_request()
    send.assert_called_once_with(kwargs={"job_id": 5, "stage": "plan_review", "iteration": 1, "round": 2})


@pytest.mark.worker
def test_a_message_under_an_old_stage_name_runs_in_a_real_worker(celery_worker):
    app.send_task("evolution.prepare", kwargs={"job_id": 987654321, "iteration": 0, "round": 0})
    deadline = time.monotonic() + 60
    while "'gone'" not in celery_worker.log():
        assert time.monotonic() < deadline, celery_worker.log()[-3000:]
        time.sleep(0.2)
    assert "sent on as run_stage: job 987654321 stage prepare" in celery_worker.log()
