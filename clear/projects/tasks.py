from celery import shared_task


@shared_task(name="projects.worker_probe", bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def worker_probe(self, token: str, hold_seconds: float = 0.0) -> None:
    from clear.projects.services import worker_probe_run

    worker_probe_run(token=token, hostname=self.request.hostname or "", hold_seconds=hold_seconds)
