"""Browser helpers for the page tests: log in through the form, run axe-core, collect script errors."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.browser import CspWatch, screenshot

PASSWORD = "correct horse battery staple"


def login(page, base_url: str, email: str = "alice@example.com") -> None:
    page.goto(base_url + "/login/")
    page.fill("#id_username", email)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_load_state()


@functools.cache
def _axe_source(axe_path: Path) -> str:
    return axe_path.read_text(encoding="utf-8")


def axe_violations(page, axe_path: Path) -> list[dict]:
    """Serious and critical axe-core violations on the current page (axe injected from the local file). Evaluated
    through the DevTools protocol: the page's Content-Security-Policy refuses a script tag added to it."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(_axe_source(axe_path))
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    return [v for v in result["violations"] if v.get("impact") in ("serious", "critical")]


def describe(violations: list[dict]) -> str:
    lines = []
    for v in violations:
        lines.append(f"{v['impact']} {v['id']}: {v['help']}")
        for node in v["nodes"][:5]:
            lines.append(f"    {node['target']} {node.get('failureSummary', '')[:300]}")
    return "\n".join(lines)


class Checker:
    """Every page: a title, the landmarks, no serious or critical axe violation, a screenshot, the
    Content-Security-Policy header and no violation of it. Violations are collected and reported together at the end,
    so one run shows every page's problems."""

    def __init__(self, page, axe_path):
        self.page, self.axe_path, self.problems = page, axe_path, []
        self.csp = CspWatch.of(page)

    def __call__(self, name: str) -> None:
        page = self.page
        assert page.title().endswith("· Clear"), page.title()
        for landmark in ("header", "nav", "main"):
            assert page.locator(landmark).count() >= 1, f"{name}: no <{landmark}>"
        violations = axe_violations(page, self.axe_path)
        screenshot(page, name)
        if violations:
            self.problems.append(f"{name}:\n{describe(violations)}")
        header = self.csp.header_problem(page)
        if header:
            self.problems.append(f"{name}: {header}")
        refused = self.csp.take()
        if refused:
            self.problems.append(f"{name}: Content-Security-Policy violations:\n    " + "\n    ".join(refused))

    def assert_clean(self) -> None:
        assert not self.problems, "\n".join(self.problems)


def job_wait(page, worker, *, job_of: Callable, reached: Callable, timeout: float, what: str):
    """Until `reached(job)` while the page follows the job (it reloads on each state change); returns the job.
    Fails at once, saying why, when the job ends first or its Celery worker dies."""
    from evolution.models import TERMINAL_STATES

    deadline = time.monotonic() + timeout
    while True:
        job = job_of()
        if reached(job):
            return job
        stages = list(job.stage_runs.values_list("stage", "status")) if job else []
        where = (f"job {job and job.pk} {job and job.state} ({job and job.terminal_reason}: "
                 f"{job and job.error[-2000:]}), stages {stages}\nworker log:\n{worker.log()[-6000:]}")
        assert not (job and job.state in TERMINAL_STATES), f"the job ended before {what}: {where}"
        assert worker.process.poll() is None, f"the worker died: {where}"
        assert time.monotonic() < deadline, f"not {what} after {timeout}s: {where}"
        page.wait_for_timeout(1000)
