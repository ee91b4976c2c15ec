#!/usr/bin/env bash
# Installs Clear into .venv: a CPU-only torch first (an unpinned torch pulls several GB of CUDA), then the project.
#   scripts/install.sh          the app
#   scripts/install.sh --dev    the app and what the tests need (pytest, Playwright, Debian's chromium, ...)
set -euo pipefail
source "$(dirname "$0")/_common.sh"

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv 2>/dev/null || { apt_install python3-venv; rm -rf .venv; python3 -m venv .venv; }
fi
PIP=".venv/bin/pip"
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "==> installing CPU torch"
  $PIP install -q torch==2.13.0 2>/dev/null \
    || $PIP install -q torch --index-url https://download.pytorch.org/whl/cpu
fi
# editable_mode=compat: a path entry in a .pth file. The default (an import hook installed by a .pth file) costs every
# Python start about 20 ms more (issue 44: ~40 ms vs ~20 ms for `python -c pass` here), and the suite starts a few
# thousand (sandboxed trials and graders, Celery workers, manage.py commands).
EDITABLE=(--config-settings editable_mode=compat)
if [ "${1:-}" = "--dev" ]; then
  echo "==> installing Clear with test dependencies"
  $PIP install -q "${EDITABLE[@]}" -e ".[dev]"
  apt_install chromium docker-compose git
  npm install --prefix var --no-save axe-core@4 >/dev/null || echo "(npm unavailable: the browser tests install axe-core into var/ themselves)"
else
  echo "==> installing Clear"
  $PIP install -q "${EDITABLE[@]}" -e .
fi
# Evolve runs candidate code in bubblewrap (the default minimum sandbox, CLEAR_EVOLUTION_MIN_SANDBOX=bwrap); a worker
# running as root hands each run to an unprivileged user of its own (CLEAR_EVOLUTION_SANDBOX_USER).
apt_install bubblewrap git
if [ "$(id -u)" = 0 ] && ! id -u "${CLEAR_EVOLUTION_SANDBOX_USER:-clear-sandbox}" >/dev/null 2>&1; then
  echo "==> creating the sandbox user ${CLEAR_EVOLUTION_SANDBOX_USER:-clear-sandbox}"
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
    "${CLEAR_EVOLUTION_SANDBOX_USER:-clear-sandbox}"
fi
