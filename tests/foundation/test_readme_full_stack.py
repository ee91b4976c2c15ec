"""The README's full-stack commands, run as written on a new Postgres database and an empty STATIC_ROOT: the web
process they start serves the login page and its stylesheet (issue 26: without `collectstatic` the login page
answered 500, "Missing staticfiles manifest entry")."""

import os
import re
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

from tests.conftest import free_port

ROOT = Path(settings.BASE_DIR)
SERVER = os.environ.get("CLEAR_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432")


def _full_stack_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## The full stack", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def _admin(sql: str) -> None:
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as connection:
        connection.execute(sql)


@pytest.fixture
def database_url():
    name = f"clear_full_stack_{os.getpid()}"
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _admin(f'CREATE DATABASE "{name}"')
    yield f"{SERVER}/{name}"
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def test_the_full_stack_commands_as_written_serve_the_login_page(database_url, tmp_path):
    commands = _full_stack_commands()
    assert any(c.startswith("gunicorn ") for c in commands), commands
    env = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE", "DEBUG", "SECRET_KEY_FILE"}}
    env.update(CLEAR_VAR_DIR=str(tmp_path / "var"), STATIC_ROOT=str(tmp_path / "static"))
    port = free_port()
    server = None
    try:
        for command in commands:
            words = shlex.split(command)
            if words[0] == "export":
                for assignment in words[1:]:
                    name, value = assignment.split("=", 1)
                    # The README's placeholders: this test's own database, Redis database and secret.
                    env[name] = {"DATABASE_URL": database_url, "SECRET_KEY": "full-stack-test-" + "k" * 40,
                                 "REDIS_URL": os.environ.get("CLEAR_TEST_REDIS_URL", value)}.get(name, value)
            elif words[:2] == ["python", "manage.py"]:
                done = subprocess.run([sys.executable, *words[1:]], cwd=ROOT, env=env, capture_output=True,
                                      text=True, timeout=300)
                assert done.returncode == 0, (command, done.stderr[-2000:])
            elif words[0] == "gunicorn":
                gunicorn = Path(sys.executable).with_name("gunicorn")
                server = subprocess.Popen([str(gunicorn), *words[1:], "--workers", "1", "--bind", f"127.0.0.1:{port}"],
                                          cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            # celery worker and beat: not needed to serve a page
        assert server is not None
        deadline = time.monotonic() + 60
        while True:
            try:
                status, body = _get(f"http://127.0.0.1:{port}/login/")
                break
            except OSError:
                assert time.monotonic() < deadline, "gunicorn did not answer"
                time.sleep(0.5)
        assert status == 200, body[:500]
        stylesheets = re.findall(r'<link[^>]+href="(/static/[^"]+\.css)"', body)
        assert stylesheets, body[:1000]
        for href in stylesheets:
            assert _get(f"http://127.0.0.1:{port}{href}")[0] == 200, href
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
