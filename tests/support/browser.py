"""Headless Debian Chromium driven by Playwright (no browser download: `executable_path`)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


def chromium_path() -> str:
    path = os.environ.get("CLEAR_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        raise RuntimeError(
            "Chromium is missing: run `scripts/install.sh --dev` (it installs Debian's chromium) "
            "or set CLEAR_CHROMIUM to a Chromium binary."
        )
    return path


SCREENSHOT_DIR = Path(__file__).resolve().parents[2] / "var" / "screenshots"


def screenshot(page, name: str) -> Path:
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOT_DIR / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


# ---- Content-Security-Policy: every page a test opens is watched for violations ----------------------------------

CSP_HEADER = "content-security-policy"

# Injected by Playwright itself (not subject to the page's CSP): reports every violation to the test, even from a
# page that navigates away at once. `__clearCspViolation` is a binding, so nothing is lost between page loads.
_CSP_LISTENER = """
document.addEventListener("securitypolicyviolation", (event) => {
  const where = (event.sourceFile || document.location.href) + ":" + event.lineNumber;
  window.__clearCspViolation(`${event.effectiveDirective} refused ${event.blockedURI || "inline"} at ${where}`
                             + (event.sample ? ` (${event.sample})` : ""));
}, true);
"""


class CspWatch:
    """Collects the CSP violations of every page of a browser context (the `securitypolicyviolation` events and the
    console's "Refused to …" messages) and each page's last document response, to check its header."""

    def __init__(self, context):
        self.violations: list[str] = []
        self.documents: dict[int, object] = {}  # id(page) -> its main frame's last document response
        context.expose_binding("__clearCspViolation", self._report)
        context.add_init_script(_CSP_LISTENER)
        context.on("console", self._console)
        context.on("response", self._response)
        context._clear_csp_watch = self

    @classmethod
    def of(cls, page) -> CspWatch:
        watch = getattr(page.context, "_clear_csp_watch", None)
        return watch if watch is not None else cls(page.context)

    def _report(self, source, text: str) -> None:
        self.violations.append(f"{text} on {source['frame'].url}")

    def _console(self, message) -> None:
        text = message.text
        if "Content Security Policy" in text or text.startswith("Refused to"):
            page = message.page
            self.violations.append(f"console: {text} on {page.url if page else '?'}")

    def _response(self, response) -> None:
        request = response.request
        if request.resource_type != "document":
            return
        try:
            frame = request.frame
        except Exception:  # noqa: BLE001 - a service worker's request has no frame
            return
        if frame.parent_frame is None:
            self.documents[id(frame.page)] = response

    def header_problem(self, page) -> str | None:
        """Why the page's current document lacks a strict policy, or None when it has one."""
        response = self.documents.get(id(page))
        if response is None:
            return f"no document response seen for {page.url}"
        policy = response.headers.get(CSP_HEADER)
        if not policy:
            return f"no Content-Security-Policy header on {response.url} ({response.status})"
        if "'unsafe-inline'" in policy or "'unsafe-eval'" in policy:
            return f"a weak Content-Security-Policy on {response.url}: {policy}"
        return None

    def take(self) -> list[str]:
        """The violations seen so far, forgotten once taken."""
        seen, self.violations = self.violations, []
        return seen


def wait_until(page, expression: str, *, timeout: float = 30_000, interval: float = 200):
    """`page.wait_for_function` without eval: Playwright's runs its expression through `eval()` in the page, which
    the Content-Security-Policy refuses (no 'unsafe-eval'); `page.evaluate` goes through DevTools and is not
    subject to it. Polls the expression until it is truthy (a page reloading meanwhile is waited out)."""
    from playwright.sync_api import Error as PlaywrightError

    deadline, last = time.monotonic() + timeout / 1000, None
    while True:
        try:
            value = page.evaluate(expression)
        except PlaywrightError as exc:  # the page navigated, or the element is not there yet
            value, last = None, exc
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout / 1000:.0f}s on {page.url}: {expression} ({last})")
        page.wait_for_timeout(interval)
