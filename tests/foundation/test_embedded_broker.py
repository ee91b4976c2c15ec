"""The embedded default's broker (no REDIS_URL: kombu's filesystem transport under var/) hands the worker its tasks
without a second's wait each. kombu sleeps `polling_interval` whenever the worker cannot take a message, 1 s by
default: a worker then took about one task a second, and the demo's gate (two runs of 22 traces) waited 41 s where
7.7 s do (measured beside this change; tests do not time things)."""

import json
import os
import subprocess
import sys

from tests.conftest import REPO_ROOT


def _embedded_run(tmp_path, script: str, **env: str) -> str:
    """The last line `script` prints after django.setup(), under the embedded default's settings (no REDIS_URL)."""
    clean = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "DATABASE_URL", "CELERY_POLLING_INTERVAL"}}
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); " + script], cwd=REPO_ROOT, capture_output=True,
        text=True, timeout=60,
        env={**clean, "DJANGO_SETTINGS_MODULE": "clear.settings.base", "SECRET_KEY": "x", "CLEAR_VAR_DIR": str(tmp_path),
             **env})
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


def _transport_options(tmp_path, **env: str) -> dict:
    script = ("import json; from django.conf import settings; "
              "print(json.dumps([settings.CELERY_BROKER_URL, settings.CELERY_BROKER_TRANSPORT_OPTIONS]))")
    url, options = json.loads(_embedded_run(tmp_path, script, **env))
    assert url == "filesystem://"
    return options


def test_the_filesystem_broker_is_polled_more_often_than_kombus_default(tmp_path):
    assert _transport_options(tmp_path)["polling_interval"] == 0.1


def test_the_polling_interval_is_a_setting(tmp_path):
    assert _transport_options(tmp_path, CELERY_POLLING_INTERVAL="0.5")["polling_interval"] == 0.5


def _embedded_connection(tmp_path, code: str) -> str:
    """Run `code` with `conn`, the embedded default's broker connection as the worker and the web process make it."""
    return _embedded_run(tmp_path, "from clear.celery import app; conn = app.connection_for_write(); " + code)


def test_a_message_being_written_is_not_taken_half_written(tmp_path):
    """kombu named a message file before writing it: a worker polling in between read it empty, its consumer raised
    JSONDecodeError and the worker exited (a fresh-clone CI run's demo, worker.log: "Unrecoverable error"). Here the
    producer is stopped right after it opened the file: the worker's channel must see no message yet, and the whole
    message once the producer is done."""
    code = (
        "import builtins, json, threading; from queue import Empty; "
        "channel = conn.default_channel; opened, go = threading.Event(), threading.Event(); real_open = builtins.open\n"
        "def slow_open(path, mode='r', *a, **k):\n"
        "    f = real_open(path, mode, *a, **k)\n"
        "    if 'w' in mode and str(path).endswith(('.msg', '.msg.part')):\n"
        "        opened.set(); go.wait(10)\n"
        "    return f\n"
        "builtins.open = slow_open\n"
        "producer = threading.Thread(target=channel._put, args=('celery', {'body': 'whole'}))\n"
        "producer.start(); assert opened.wait(10)\n"
        "builtins.open = real_open\n"
        "try:\n"
        "    seen = channel._get('celery')\n"
        "except Empty:\n"
        "    seen = None\n"
        "go.set(); producer.join(10)\n"
        "after = channel._get('celery')\n"
        "print(json.dumps([seen, after]))"
    )
    seen, after = json.loads(_embedded_connection(tmp_path, code))
    assert seen is None
    assert after == {"body": "whole"}


def test_a_worker_asked_to_stop_stops_waiting_for_messages(tmp_path):
    """Celery's loop for a polling transport waits in drain_events 2 s at a time and only then sees a shutdown: Ctrl-C
    on the demo took about 7 s to stop an idle worker, past scripts/_children.sh's grace. The wait ends once a warm
    shutdown (should_stop = exit code 0) is asked for, and lasts its whole timeout otherwise."""
    code = (
        "import json, socket, threading, time; from celery.worker import state; waited = []\n"
        "for stop_after in (None, 0.3):\n"
        "    if stop_after is not None:\n"
        "        threading.Timer(stop_after, lambda: setattr(state, 'should_stop', 0)).start()\n"
        "    started = time.monotonic()\n"
        "    try:\n"
        "        conn.drain_events(timeout=0.6 if stop_after is None else 20)\n"
        "    except socket.timeout:\n"
        "        waited.append(time.monotonic() - started)\n"
        "print(json.dumps(waited))"
    )
    unstopped, stopped = json.loads(_embedded_connection(tmp_path, code))
    assert unstopped >= 0.6  # no shutdown asked: the caller's timeout holds
    assert stopped < 10  # not the 20 s it was given
