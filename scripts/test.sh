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

# The whole suite (no arguments, as .ci/run calls it) runs on pytest-xdist workers, one per core of a 2-core CI
# machine: CLEAR_TEST_WORKERS=N sets how many (0: serially), also for a run with arguments. Each worker has its own
# test database and Redis database (clear/settings/test.py); tests/conftest.py says how tests are spread.
args=("$@")
workers="${CLEAR_TEST_WORKERS:-}"
if [ -z "$workers" ] && [ $# -eq 0 ]; then workers=2; fi
if [ -n "$workers" ] && [ "$workers" != 0 ]; then
  if "$PY" -c "import xdist" 2>/dev/null; then
    args=(-n "$workers" ${args[@]+"${args[@]}"})
  else
    echo "(pytest-xdist is not installed: running the tests serially)"
  fi
fi
exec "$PY" -m pytest ${args[@]+"${args[@]}"}
