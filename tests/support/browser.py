"""Headless Debian Chromium driven by Playwright (no browser download: `executable_path`)."""

import os
import shutil
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
