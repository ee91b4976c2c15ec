"""SECURITY.md cannot drift from the code: every variable of its production checklist is one the settings read, the
checklist names every HTTPS and sandbox setting, and `manage.py check --deploy` passes with exactly the checklist."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(settings.BASE_DIR)
DOC = ROOT / "SECURITY.md"
SETTINGS_SOURCE = ROOT / "clear" / "settings" / "base.py"
# What the checklist must always set, besides every SECURE_* and *_COOKIE_SECURE variable the settings read.
REQUIRED = {"DEBUG", "SECRET_KEY_FILE", "ALLOWED_HOSTS", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE",
            "CLEAR_EVOLUTION_MIN_SANDBOX", "CLEAR_EVOLUTION_SOURCE_ROOTS", "CLEAR_EVOLUTION_SANDBOX_USER",
            "CLEAR_EVOLUTION_BACKEND_ENV_ALLOW", "CLEAR_WEBHOOK_ALLOW_PRIVATE", "CLEAR_AUTH_FAILURE_RATE",
            "CLEAR_API_RATE", "CLEAR_PASSWORD_RESET_RATE"}


def _checklist() -> dict[str, str]:
    """The `env` block under "## Production checklist": NAME=value lines, in order."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Production checklist", 1)
    assert len(section) == 2, "SECURITY.md has no '## Production checklist' section"
    block = re.search(r"```env\n(.*?)```", section[1].split("\n## ", 1)[0], re.S)
    assert block, "the production checklist has no ```env block"
    variables = {}
    for line in block.group(1).splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Z][A-Z0-9_]*", name), f"not NAME=value: {line!r}"
        variables[name] = value
    return variables


def _settings_reads() -> dict[str, str]:
    """Each variable clear/settings/base.py reads through clear.env, and the reader: env_str, env_bool, …"""
    source = SETTINGS_SOURCE.read_text(encoding="utf-8")
    return {name: reader for reader, name in re.findall(r"\b(env_(?:str|bool|int|float|list))\(\s*\"([A-Z0-9_]+)\"",
                                                        source)}


def test_security_doc_exists_and_the_readme_links_it():
    assert DOC.is_file()
    text = DOC.read_text(encoding="utf-8")
    for heading in ("## Who holds what", "## The evolution sandbox", "## Production checklist",
                    "## Reporting a vulnerability"):
        assert heading in text, heading
    assert "](SECURITY.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_checklist_variable_is_read_by_the_settings():
    reads = _settings_reads()
    unknown = []
    for name in _checklist():
        if name in reads:
            continue
        # NAME_FILE works for any variable read with env_str (clear/env.py).
        if name.endswith("_FILE") and reads.get(name.removesuffix("_FILE")) == "env_str":
            continue
        unknown.append(name)
    assert not unknown, f"SECURITY.md's checklist sets variables clear/settings/base.py does not read: {unknown}"


def test_the_checklist_names_every_https_and_sandbox_setting():
    https = {name for name in _settings_reads() if name.startswith("SECURE_") or name.endswith("_COOKIE_SECURE")}
    assert len(https) >= 7  # the parse found them
    missing = (https | REQUIRED) - set(_checklist())
    assert not missing, f"SECURITY.md's checklist leaves out {sorted(missing)}"
    assert "`CLEAR_CSP`" in DOC.read_text(encoding="utf-8")  # kept at its default, so named but not set


def _checklist_env(tmp_path: Path, variables: dict[str, str]) -> dict[str, str]:
    """Exactly the checklist, with each *_FILE pointing at a fresh file holding a strong secret; besides it only
    what running Python needs, the settings module, and a var dir of its own (no repository var/ touched)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "DJANGO_SETTINGS_MODULE": "clear.settings.base", "CLEAR_VAR_DIR": str(tmp_path / "var")}
    for name, value in variables.items():
        if name.endswith("_FILE"):
            secret = tmp_path / name.lower()
            secret.write_text(secrets.token_urlsafe(50) + "\n")
            value = str(secret)
        env[name] = value
    return env


def _check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("applied", ["all", "no_https"])
def test_check_deploy_passes_with_exactly_the_checklist(tmp_path, applied):
    variables = _checklist()
    if applied == "no_https":  # the check is not passing by accident: without the HTTPS lines it fails
        variables = {k: v for k, v in variables.items() if not k.startswith("SECURE_") and "COOKIE" not in k}
    result = _check_deploy(_checklist_env(tmp_path, variables))
    if applied == "all":
        assert result.returncode == 0, result.stdout + result.stderr
    else:
        assert result.returncode != 0 and "security.W" in result.stdout + result.stderr, result.stdout + result.stderr
