"""A real Celery worker process on the test Redis database and the test database (Postgres or SQLite)."""

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
from django.conf import settings
from django.db import connection

from clear.celery import app as celery_app

QUEUE = "celery"  # the default queue: every task goes there (no routes are set)
CONTROL_TIMEOUT_S = 2.0  # a worker answers in milliseconds; one that does not is replaced (safe either way)


def subprocess_env_for_test_db(**extra: str) -> dict[str, str]:
    """The environment of a subprocess that must use this test run's database (and settings module)."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        database_url = f"sqlite:///{db['NAME']}"
    else:
        database_url = f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="clear.settings.base",
        DATABASE_URL=database_url,
        SECRET_KEY=settings.SECRET_KEY,
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


class ProcessGroup:
    """A subprocess started in its own session, so that it and its children can be killed together."""

    process: subprocess.Popen | None = None

    def kill(self) -> None:
        """SIGKILL the whole process group, as an OOM killer or a lost machine would."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


class CeleryWorkerProcess(ProcessGroup):
    def __init__(self, *, log_dir: Path, broker_url: str, visibility_timeout: int, env: dict[str, str] | None = None):
        self.log_dir = log_dir
        self.broker_url = broker_url
        self.visibility_timeout = visibility_timeout
        self.extra_env = dict(env or {})
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self.log_offset = 0  # where the current test's part of the log begins (a kept worker's log has others')

    def _env(self) -> dict[str, str]:
        return subprocess_env_for_test_db(REDIS_URL=self.broker_url, CELERY_VISIBILITY_TIMEOUT=str(self.visibility_timeout),
                                          **self.extra_env)

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"worker-{os.getpid()}-{self.starts}.log"

    def start(self, timeout: float = 60) -> None:
        self.starts += 1
        self.log_offset = 0
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # A worker an earlier, killed pytest run left consuming this Redis database would take this run's tasks.
        stale_worker_stop(broker_url=self.broker_url, registry=self.log_dir)
        log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "clear", "worker", "--loglevel", "INFO", "--concurrency", "2",
             "--without-mingle", "--without-gossip", "-n", f"test{self.starts}@%h"],
            cwd=settings.BASE_DIR, env=self._env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        worker_record(broker_url=self.broker_url, registry=self.log_dir, pid=self.process.pid)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"Celery worker exited at start:\n{self.log_path.read_text()[-4000:]}")
            if "ready." in self.log_path.read_text():
                return
            time.sleep(0.2)
        raise RuntimeError(f"Celery worker not ready after {timeout}s:\n{self.log_path.read_text()[-4000:]}")

    def log(self) -> str:
        """What the worker printed since this test took it (or since its last start): a test that waits for a line
        must not find an earlier test's."""
        if not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as log:
            log.seek(self.log_offset)
            return log.read().decode(errors="replace")

    @property
    def hostname(self) -> str:
        return f"test{self.starts}@{socket.gethostname()}"  # the name `-n test{n}@%h` gives it

    def pause(self) -> bool:
        """Stop taking tasks, and say whether the worker is idle (nothing running, reserved or waiting for its ETA):
        then it can be kept for the next test instead of a new one (about 1.8 s each, and the suite's worker tests
        started about fifty). False, to be killed, when it is not, or does not answer."""
        if self.process is None or self.process.poll() is not None:
            return False
        control = celery_app.control
        name = self.hostname
        if not control.cancel_consumer(QUEUE, destination=[name], reply=True, timeout=CONTROL_TIMEOUT_S):
            return False
        inspect = control.inspect(destination=[name], timeout=CONTROL_TIMEOUT_S, limit=1)
        for ask in (inspect.active, inspect.reserved, inspect.scheduled):
            replies = ask()
            if not replies or replies.get(name):
                return False
        return True

    def resume(self) -> bool:
        """Take tasks again after pause(), with an empty queue (what other tests' processes sent meanwhile is
        theirs); False when the worker is gone or does not answer (a broker flushed since: purge_broker)."""
        if self.process is None or self.process.poll() is not None:
            return False
        self.log_offset = self.log_path.stat().st_size
        queue_purge()
        return bool(celery_app.control.add_consumer(QUEUE, destination=[self.hostname], reply=True,
                                                    timeout=CONTROL_TIMEOUT_S))


@contextmanager
def own_worker(test_settings, **env: str) -> Iterator[CeleryWorkerProcess]:
    """A real worker of a test's own, for a test that needs an environment the session's worker (conftest's
    `celery_worker`, whose environment is fixed when it first starts) lacks: `env` is read by the worker at its
    start. The broker is emptied before and after, so only this worker consumes it meanwhile."""
    purge_broker(test_settings.CELERY_BROKER_URL)
    worker = CeleryWorkerProcess(log_dir=test_settings.BASE_DIR / "var" / "test-logs",
                                 broker_url=test_settings.CELERY_BROKER_URL,
                                 visibility_timeout=test_settings.CELERY_TEST_VISIBILITY_TIMEOUT, env=env)
    worker.start()
    use_broker(True)
    try:
        yield worker
    finally:
        use_broker(False)
        worker.kill()
        purge_broker(test_settings.CELERY_BROKER_URL)


def process_identity(pid: int) -> tuple[str, str] | None:
    """(start time in clock ticks since boot, command line) of a live process, or None: a pid alone may have been
    reused by an unrelated process since it was recorded."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19], cmdline  # field 22, starttime


def _record_path(registry: Path, broker_url: str) -> Path:
    import hashlib

    return registry / f"worker-on-{hashlib.sha256(broker_url.encode()).hexdigest()[:16]}.json"


def worker_record(*, broker_url: str, registry: Path, pid: int) -> None:
    """Note which process consumes this broker database (pid, start time, command line)."""
    import json

    identity = process_identity(pid)
    if identity is not None:
        _record_path(registry, broker_url).write_text(json.dumps({"pid": pid, "start": identity[0],
                                                                   "cmdline": identity[1]}))


def stale_worker_stop(*, broker_url: str, registry: Path) -> bool:
    """Kill the worker an earlier run recorded for this broker database when that very process (same pid, start
    time and command line) is still alive; True when one was."""
    import json

    path = _record_path(registry, broker_url)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    path.unlink(missing_ok=True)
    if process_identity(int(record["pid"])) != (record["start"], record["cmdline"]):
        return False
    try:
        os.killpg(int(record["pid"]), signal.SIGKILL)  # it runs in a session of its own, with its pool children
    except ProcessLookupError:
        return False
    return True


def purge_broker(broker_url: str) -> None:
    """Everything of the broker's database: its queues, and the bindings of a worker kept paused there (which then
    no longer answers, and is replaced: CeleryWorkerProcess.resume)."""
    redis.Redis.from_url(broker_url).flushdb()


def queue_purge() -> None:
    """The task queue's messages only: a paused worker's bindings stay, so it can be resumed."""
    celery_app.control.purge()


def use_broker(enabled: bool) -> None:
    celery_app.conf.task_always_eager = not enabled


def point_at_broker(url: str) -> None:
    """Send tasks to another broker from now on; the connection and producer pools are bound to the old one."""
    celery_app.conf.broker_url = url
    celery_app._pool = None
    if "amqp" in celery_app.__dict__:
        celery_app.amqp._producer_pool = None
