"""The outbox as the one durable channel for facts (clear/outbox; issue 18): subscriptions by task name, facts that
wait for a stopped worker, webhooks told once per fact."""

import time
from datetime import timedelta

import pytest
from django.conf import settings

from clear.celery import app as celery_app
from clear.outbox.models import OutboxItem
from clear.outbox.services import outbox_dispatch, outbox_publish, outbox_subscribers
from clear.webhooks.events import webhook_facts_emit
from clear.webhooks.models import WebhookDelivery
from clear.webhooks.services import webhook_create
from diagnosis.models import DiagnosisRun, RunTrace
from tests.api.conftest import make_trace
from tests.api.test_webhooks import Receiver
from traces.services.lifecycle import traces_delete


def _wait_for(predicate, timeout: float, what: str, worker=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}" + (f"\n{worker.log()[-3000:]}" if worker else ""))


def test_every_subscription_names_a_registered_task():
    for topic in settings.CLEAR_OUTBOX_SUBSCRIPTIONS:
        assert outbox_subscribers(topic=topic), topic
    assert {"trace.finalize", "trace.deleted", "insights.built", "diagnosis_run.finished",
            "evolution_job.state_changed"} <= set(settings.CLEAR_OUTBOX_SUBSCRIPTIONS)


@pytest.mark.django_db
def test_a_subscription_to_an_unknown_task_leaves_the_fact_pending(settings, django_capture_on_commit_callbacks):
    settings.CLEAR_OUTBOX_SUBSCRIPTIONS = {"thing.happened": ["nobody.listens_here"]}
    with django_capture_on_commit_callbacks(execute=True):
        outbox_publish(topic="thing.happened", data={"n": 1})
    item = OutboxItem.objects.get(topic="thing.happened")
    assert item.dispatched_at is None and "nobody.listens_here" in item.last_error


@pytest.mark.django_db
def test_a_topic_nobody_subscribes_to_is_marked_sent(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        outbox_publish(topic="thing.nobody.wants", data={"n": 1}, delay=timedelta(0))
    assert OutboxItem.objects.get(topic="thing.nobody.wants").dispatched_at is not None


@pytest.mark.django_db
def test_a_fact_handed_over_twice_is_one_webhook_delivery(project, settings):
    settings.CLEAR_WEBHOOK_ALLOW_PRIVATE = True  # 127.0.0.1 is a loopback address
    webhook = webhook_create(project=project, url="http://127.0.0.1:9/x", events=["diagnosis_run.finished"])
    fact = {"topic": "diagnosis_run.finished", "key": "k1",
            "data": {"project": str(project.pk), "body": {"run": {"id": "r1", "status": "succeeded"}}}}
    webhook_facts_emit(facts=[fact])
    webhook_facts_emit(facts=[fact])  # at-least-once: the same message again
    [delivery] = WebhookDelivery.objects.filter(webhook=webhook)
    assert delivery.payload["data"]["run"]["id"] == "r1"
    webhook_facts_emit(facts=[{**fact, "key": "k2"}])  # another fact is another delivery
    assert WebhookDelivery.objects.filter(webhook=webhook).count() == 2


@pytest.mark.worker
def test_reactions_wait_for_a_stopped_worker_and_happen_when_it_starts(celery_worker, project, settings,
                                                                       monkeypatch):
    """A trace deletion publishes trace.deleted; diagnosis's reaction (the run that waited for the trace finishes)
    publishes diagnosis_run.finished, whose reaction is the webhook, and the finished run's insights build publishes
    insights.built (evolution's fix check). None of it runs while the worker is stopped; all of it once it starts."""
    done, waiting = make_trace(project), make_trace(project)
    run = DiagnosisRun.objects.create(project=project, status=DiagnosisRun.Status.RUNNING, total_count=2, done_count=1,
                                      started_at=done.start_time)
    RunTrace.objects.create(run=run, trace=done, status=RunTrace.Status.DONE)
    RunTrace.objects.create(run=run, trace=waiting, status=RunTrace.Status.PENDING)
    # The Receiver is on 127.0.0.1, a loopback address: allowed here and in the worker, which the restart below
    # starts with this environment.
    settings.CLEAR_WEBHOOK_ALLOW_PRIVATE = True
    monkeypatch.setenv("CLEAR_WEBHOOK_ALLOW_PRIVATE", "1")
    with Receiver() as receiver:
        webhook_create(project=project, url=receiver.url, events=["diagnosis_run.finished"])
        celery_worker.stop()

        assert traces_delete(project=project, trace_pks=[waiting.pk]) == 1
        run.refresh_from_db()
        # The synchronous hook ran in the deleting transaction: the run no longer counts the trace ...
        assert (run.total_count, run.done_count) == (1, 1)
        # ... and the fact went to the broker, where it waits: no reaction yet.
        fact = OutboxItem.objects.get(topic="trace.deleted")
        assert fact.payload["diagnosis"] == {"active_runs": [str(run.pk)]}
        assert fact.dispatched_at is not None
        time.sleep(2)
        run.refresh_from_db()
        assert run.status == DiagnosisRun.Status.RUNNING
        assert not OutboxItem.objects.filter(topic="diagnosis_run.finished").exists()
        assert not WebhookDelivery.objects.exists() and receiver.requests == []

        celery_worker.start()
        _wait_for(lambda: DiagnosisRun.objects.filter(pk=run.pk, status=DiagnosisRun.Status.SUCCEEDED).exists(), 60,
                  "the run to finish", celery_worker)
        _wait_for(lambda: receiver.requests, 60, "the diagnosis_run.finished webhook", celery_worker)
        _wait_for(lambda: OutboxItem.objects.filter(topic="insights.built", dispatched_at__isnull=False).exists(),
                  120, "the run's insights to be built", celery_worker)
    [delivery] = WebhookDelivery.objects.all()
    assert delivery.event == "diagnosis_run.finished" and delivery.payload["data"]["run"]["status"] == "succeeded"
    assert not OutboxItem.objects.filter(dispatched_at__isnull=True).exists()
    assert celery_app.conf.task_always_eager is False


@pytest.mark.django_db(transaction=True)
def test_the_sweeper_sends_what_a_lost_dispatch_left_pending(project, settings, monkeypatch):
    """A fact whose after-commit dispatch never happened (process died, broker down) is sent by the sweep."""
    from clear.outbox import services

    monkeypatch.setattr(services, "_dispatch_after_commit", lambda **kwargs: None)
    settings.CLEAR_WEBHOOK_ALLOW_PRIVATE = True  # 127.0.0.1 is a loopback address
    webhook_create(project=project, url="http://127.0.0.1:9/x", events=["diagnosis_run.finished"])
    outbox_publish(topic="diagnosis_run.finished", data={"project": str(project.pk), "body": {"run": {"id": "r"}}})
    assert OutboxItem.objects.get(topic="diagnosis_run.finished").dispatched_at is None
    assert not WebhookDelivery.objects.exists()
    settings.CLEAR_WEBHOOK_MAX_ATTEMPTS = 1
    assert outbox_dispatch() == 1  # what beat's outbox.sweep runs (eager here: the subscriber runs now)
    assert WebhookDelivery.objects.get().event == "diagnosis_run.finished"
