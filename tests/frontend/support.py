"""Browser helpers for the page tests: log in through the form, run axe-core, collect script errors."""

from __future__ import annotations

from pathlib import Path

PASSWORD = "correct horse battery staple"


def login(page, base_url: str, email: str = "alice@example.com") -> None:
    page.goto(base_url + "/login/")
    page.fill("#id_username", email)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_load_state()


def axe_violations(page, axe_path: Path) -> list[dict]:
    """Serious and critical axe-core violations on the current page (axe injected from the local file)."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(axe_path))
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    return [v for v in result["violations"] if v.get("impact") in ("serious", "critical")]


def describe(violations: list[dict]) -> str:
    lines = []
    for v in violations:
        lines.append(f"{v['impact']} {v['id']}: {v['help']}")
        for node in v["nodes"][:5]:
            lines.append(f"    {node['target']} {node.get('failureSummary', '')[:300]}")
    return "\n".join(lines)
