#!/usr/bin/env bash
# The whole test suite on real Postgres, Redis, a Celery worker and headless Chromium.
#   scripts/test.sh [--no-install] [pytest args...]
set -euo pipefail
source "$(dirname "$0")/_common.sh"

if [ "${1:-}" = "--no-install" ]; then shift; else bash scripts/install.sh --dev; fi
source "$(dirname "$0")/_common.sh"  # .venv exists now
bash scripts/services.sh

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/clear}"
export CLEAR_TEST_REDIS_URL="${CLEAR_TEST_REDIS_URL:-redis://127.0.0.1:6379/14}"
mkdir -p var/screenshots
exec "$PY" -m pytest "$@"
