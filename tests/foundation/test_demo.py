import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings

from tests.conftest import free_port
from tests.support.browser import screenshot

ROOT = Path(settings.BASE_DIR)
pytestmark = pytest.mark.browser


@dataclass
class Demo:
    url: str
    login: str
    password: str
    var_dir: Path
    env: dict
    output: str


def _embedded_env(var_dir: Path) -> dict:
    drop = {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "SECRET_KEY_FILE", "DJANGO_SETTINGS_MODULE", "DEBUG"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["CLEAR_VAR_DIR"] = str(var_dir)
    return env


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    var_dir = tmp_path_factory.mktemp("demo-var")
    port = free_port()
    env = _embedded_env(var_dir)
    process = subprocess.Popen(
        ["bash", "scripts/demo.sh", "--no-install", "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    lines: list[str] = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line and process.poll() is not None:
            break
        lines.append(line)
        if "Press Ctrl-C" in line:
            break
    output = "".join(lines)
    if "Press Ctrl-C" not in output:
        _kill_sessions(_demo_sessions(process.pid))
        pytest.fail(f"the demo did not come up:\n{output}")
    login = re.search(r"login: (\S+)", output).group(1)
    password = re.search(r"password: (\S+)", output).group(1)
    env["SECRET_KEY_FILE"] = str(var_dir / "secret_key")
    yield Demo(f"http://127.0.0.1:{port}", login, password, var_dir, env, output)
    # Read before the script exits: its worker and web server are reparented then.
    sessions = _demo_sessions(process.pid)
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
        hung = False
    except subprocess.TimeoutExpired:
        hung = True
    finally:
        # Whatever is left gets SIGKILL, so no process keeps the port or the var dir of the next run.
        _kill_sessions(sessions)
        process.stdout.close()
    # The script stops its children within about 9 s (SIGTERM, SIGQUIT after 5 s, SIGKILL 3 s later).
    assert not hung, "scripts/demo.sh did not stop within 30 s of SIGTERM"


def _kill_sessions(sessions: set[int]) -> None:
    for session in sessions:
        try:
            os.killpg(session, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _demo_sessions(pid: int) -> set[int]:
    """The script's session and those of its children: scripts/demo.sh starts the worker and the web server in
    sessions of their own, which a signal to the script's process group does not reach."""
    sessions = {pid}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "(comm)": state ppid pgrp session ...
        except OSError:
            continue
        if int(fields[1]) == pid:
            sessions.add(int(fields[3]))
    return sessions


def test_demo_prints_login_and_keys(demo):
    assert "secret_key: sk-clear-" in demo.output
    assert "public_key: pk-clear-" in demo.output
    assert (demo.var_dir / "clear.sqlite3").exists(), "the embedded default keeps its database under var/"


def test_browser_logs_in_and_sees_the_demo_project(demo, page):
    page.goto(demo.url + "/")
    assert "/login/" in page.url
    screenshot(page, "login")
    page.fill("#id_username", demo.login)
    page.fill("#id_password", "wrong password")
    page.click("button[type=submit]")
    assert "do not match" in page.inner_text("main")
    page.fill("#id_username", demo.login)
    page.fill("#id_password", demo.password)
    page.click("button[type=submit]")
    page.wait_for_selector("[data-testid=overview-stats]")
    assert "Support desk demo" in page.inner_text("main")
    # The example agent's traces went in through the OTLP endpoint: 22 tasks in each of two releases.
    assert "44" in page.inner_text("[data-testid=overview-stats]")
    assert page.locator("[data-testid=recent-traces] tbody tr").count() == 15
    assert "Support desk demo" in page.inner_text("#project-switcher")
    # Served by the app itself: the stylesheet loads with no CDN.
    assert page.evaluate("getComputedStyle(document.querySelector('.sidebar')).display") == "flex"
    screenshot(page, "overview")
    page.click("text=Settings")
    page.wait_for_selector("text=API keys")
    screenshot(page, "api-keys")


def test_embedded_worker_runs_tasks_from_the_filesystem_queue(demo):
    result = subprocess.run(
        [sys.executable, "manage.py", "worker_probe", "--timeout", "60"],
        cwd=ROOT, env=demo.env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "answered" in result.stdout
    assert any((demo.var_dir / "celery").rglob("*")) or (demo.var_dir / "celery").exists()


def test_demo_registers_the_example_agent_as_an_evolution_target(demo):
    repo = demo.var_dir / "evolution" / "support_desk"
    assert (repo / ".git").is_dir() and (repo / "evolution.json").is_file()
    slug = json.loads((demo.var_dir / "demo-credentials.json").read_text())["slug"]
    listed = subprocess.run(
        [sys.executable, "manage.py", "evolution_target", "list", "--project", slug],
        cwd=ROOT, env=demo.env, capture_output=True, text=True, timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert [line.split("\t")[1:] for line in listed.stdout.splitlines()] == [["support_desk", str(repo)]]
