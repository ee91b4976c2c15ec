import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(settings.BASE_DIR)


def test_check_deploy_passes_with_production_settings():
    # The test process allows async-unsafe ORM calls for Playwright; a deployment must not.
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env.update(
        DJANGO_SETTINGS_MODULE="clear.settings.base",
        DEBUG="0",
        SECRET_KEY="Zx9!qW3#eR5$tY7^uI8*oP0(aS2)dF4-gH6_jKlmnbVcXz1@Lp",
        ALLOWED_HOSTS="clear.example.com",
        DATABASE_URL=os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/clear"),
        SECURE_SSL_REDIRECT="1",
        SESSION_COOKIE_SECURE="1",
        CSRF_COOKIE_SECURE="1",
        SECURE_HSTS_SECONDS="31536000",
        SECURE_HSTS_INCLUDE_SUBDOMAINS="1",
        SECURE_HSTS_PRELOAD="1",
    )
    assert len(env["SECRET_KEY"]) == 50
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_it_refuses_to_start_without_secret_key_outside_debug():
    env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "SECRET_KEY_FILE"}}
    env.update(DJANGO_SETTINGS_MODULE="clear.settings.base", DEBUG="0")
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert "SECRET_KEY is required" in result.stderr


def test_secrets_can_come_from_files(tmp_path):
    secret_file = tmp_path / "secret"
    secret_file.write_text("from-a-file-" + "s" * 40 + "\n")
    env = {k: v for k, v in os.environ.items() if k != "SECRET_KEY"}
    env.update(DJANGO_SETTINGS_MODULE="clear.settings.base", DEBUG="0", SECRET_KEY_FILE=str(secret_file))
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from django.conf import settings; "
         "print(settings.SECRET_KEY)"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )
    assert result.stdout.strip() == "from-a-file-" + "s" * 40, result.stderr


def test_docker_compose_file_is_valid():
    compose = shutil.which("docker-compose")
    if compose is None:
        pytest.fail("docker-compose is missing: scripts/install.sh --dev installs Debian's docker-compose")
    result = subprocess.run([compose, "-f", "docker-compose.yml", "config", "-q"], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    services = subprocess.run([compose, "-f", "docker-compose.yml", "config", "--services"], cwd=ROOT,
                              capture_output=True, text=True).stdout.split()
    assert set(services) >= {"postgres", "redis", "web", "worker", "beat"}
