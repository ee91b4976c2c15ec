"""The embedded default's broker (no REDIS_URL: kombu's filesystem transport under var/) hands the worker its tasks
without a second's wait each. kombu sleeps `polling_interval` whenever the worker cannot take a message, 1 s by
default: a worker then took about one task a second, and the demo's gate (two runs of 22 traces) waited 41 s where
7.7 s do (measured beside this change; tests do not time things)."""

import json
import os
import subprocess
import sys

from tests.conftest import REPO_ROOT


def _transport_options(tmp_path, **env: str) -> dict:
    script = ("import json; from django.conf import settings; "
              "print(json.dumps([settings.CELERY_BROKER_URL, settings.CELERY_BROKER_TRANSPORT_OPTIONS]))")
    clean = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "DATABASE_URL", "CELERY_POLLING_INTERVAL"}}
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); " + script], cwd=REPO_ROOT, capture_output=True,
        text=True, timeout=60,
        env={**clean, "DJANGO_SETTINGS_MODULE": "clear.settings.base", "SECRET_KEY": "x", "CLEAR_VAR_DIR": str(tmp_path),
             **env})
    assert result.returncode == 0, result.stderr
    url, options = json.loads(result.stdout.strip().splitlines()[-1])
    assert url == "filesystem://"
    return options


def test_the_filesystem_broker_is_polled_more_often_than_kombus_default(tmp_path):
    assert _transport_options(tmp_path)["polling_interval"] == 0.1


def test_the_polling_interval_is_a_setting(tmp_path):
    assert _transport_options(tmp_path, CELERY_POLLING_INTERVAL="0.5")["polling_interval"] == 0.5
