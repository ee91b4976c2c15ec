#!/usr/bin/env bash
# The whole test suite on real Postgres, Redis, a Celery worker and headless Chromium, then the pages, API, CLI and
# ingestion tests again on SQLite (the embedded default).
#   scripts/test.sh [--no-install] [pytest args...]     with arguments: one pytest run on CLEAR_TEST_DATABASE
#   scripts/test.sh [--no-install] --repeat N [tests and pytest args...]
#       the tests given by id (path::name) run N times each (tests/support/repeat.py), beside the files, directories
#       and options given (run once), on 3 xdist workers unless CLEAR_TEST_WORKERS says otherwise; the summary lists
#       each failed run (test id, run number, duration) and each repeated test's passes
set -euo pipefail
source "$(dirname "$0")/_common.sh"

if [ "${1:-}" = "--no-install" ]; then shift; else bash scripts/install.sh --dev; fi
if [ "${1:-}" = "--repeat" ]; then
  repeat_count="${2:-}"
  case "$repeat_count" in ''|*[!0-9]*) echo "--repeat needs a number of runs, then the tests" >&2; exit 2 ;; esac
  shift 2
  repeat_args=(--repeat-count "$repeat_count")
  for arg in "$@"; do case "$arg" in -*) ;; *::*) repeat_args+=(--repeat-id "$arg") ;; esac; done
  [ "${#repeat_args[@]}" -gt 2 ] || { echo "--repeat $repeat_count: no test given by id (path::name)" >&2; exit 2; }
  set -- "${repeat_args[@]}" "$@"
  export CLEAR_TEST_WORKERS="${CLEAR_TEST_WORKERS:-3}"  # as the whole suite runs: the flakes showed under that load
fi
source "$(dirname "$0")/_common.sh"  # .venv exists now
bash scripts/services.sh

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/clear}"
# Three test workers and their servers share two cores: the idle threads of torch and the BLAS libraries spin while
# they wait, so each process keeps to one (issue 44: the insight modules 5-9% faster measured).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
export MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}" CLEAR_EMBEDDING_THREADS="${CLEAR_EMBEDDING_THREADS:-1}"
# Databases 13-15 for the three workers of the whole suite, 10-12 for the SQLite pass's (see below).
export CLEAR_TEST_REDIS_URL="${CLEAR_TEST_REDIS_URL:-redis://127.0.0.1:6379/13}"
mkdir -p var/screenshots

# The whole suite (no arguments, as .ci/run calls it) runs on three pytest-xdist workers on a 2-core CI machine: a
# good part of a test's time is spent waiting on a browser, a Celery worker or a sandboxed trial, and a third worker
# uses it (measured: 439 s instead of 493 s for the Postgres pass, 163 s instead of 185 s for SQLite).
# CLEAR_TEST_WORKERS=N sets how many (0: serially), also for a run with arguments. Each worker has its own test
# database and Redis database (clear/settings/test.py); tests/conftest.py says how tests are spread.
workers="${CLEAR_TEST_WORKERS:-}"
if [ -z "$workers" ] && [ $# -eq 0 ]; then workers=3; fi
xdist=()
if [ -n "$workers" ] && [ "$workers" != 0 ]; then
  if "$PY" -c "import xdist" 2>/dev/null; then
    xdist=(-n "$workers")
  else
    echo "(pytest-xdist is not installed: running the tests serially)"
  fi
fi

# With arguments: one run on the database CLEAR_TEST_DATABASE names (postgres, the default, or sqlite).
if [ $# -gt 0 ]; then
  if [ "${CLEAR_TEST_DATABASE:-postgres}" = sqlite ]; then
    export CLEAR_VAR_DIR="${CLEAR_VAR_DIR:-$(mktemp -d -t clear-test-sqlite.XXXXXX)}"
  fi
  exec "$PY" -m pytest ${xdist[@]+"${xdist[@]}"} "$@"
fi

# The whole suite on Postgres, then every test of the pages, the API, the CLI and ingestion again on the embedded
# default (SQLite) in a fresh temporary var dir, as the demo runs. (tests/foundation/test_demo.py starts
# scripts/demo.sh on both databases itself.)
# (Not again: what does not touch the database's dialect, e.g. the span mapping, the layering, the deploy check.)
# Also on SQLite: ingestion while a model call is outstanding, and a trend refresh racing a build (one write lock for
# the whole database there).
SQLITE_TESTS=(tests/frontend tests/api tests/tickets tests/foundation/test_pages_access.py
              tests/foundation/test_api_keys.py tests/traces/test_ingest_otlp.py tests/traces/test_ingest_langfuse.py
              tests/traces/test_ingest_bad_input.py tests/traces/test_ingest_outbox.py tests/traces/test_import_traces.py
              tests/diagnosis/test_apis.py tests/diagnosis/test_diagnose_command.py tests/evolution/test_api.py
              tests/evolution/test_commands.py tests/traces/test_ingest_messy_input.py
              tests/traces/test_ingest_messy_scores.py tests/traces/test_ingest_health.py
              tests/traces/test_ingest_rejected_badge.py tests/traces/test_ingest_fuzz.py
              tests/traces/test_changed_since_judged.py
              tests/diagnosis/test_model_wait_no_lock.py tests/foundation/test_test_databases.py
              tests/diagnosis/test_trend_snapshot.py)
# Browser tests drive flows whose database work the page and API tests of the same files run on SQLite too; what
# a browser does does not depend on the database. On SQLite the browser sees every page in the walk of
# tests/frontend/test_browser.py (marked every_database) and in the demo's (tests/foundation/test_demo.py starts it
# on both databases); the other browser tests run on Postgres only (issue 44: the suite's time).
# Nor the modules of pure functions in those directories (no database, no request): the Postgres pass runs them.
SQLITE_SKIP=(-m "not browser or every_database" --ignore=tests/frontend/test_render.py
             --ignore=tests/api/test_readme_ci.py)
status=0
# The layering contracts of pyproject.toml ([tool.importlinter]); a broken one fails the run.
echo "==> lint-imports"
"$BIN/lint-imports" --no-cache || status=$?
# The slowest tests of each pass at the end of its report: where the suite's time goes (issue 44).
durations=(--durations=25 --durations-min=5)
echo "==> the whole suite on Postgres"
CLEAR_TEST_DATABASE=postgres "$PY" -m pytest ${xdist[@]+"${xdist[@]}"} "${durations[@]}" || status=$?
sqlite_var="$(mktemp -d -t clear-test-sqlite.XXXXXX)"
# Redis databases of their own (the Postgres pass's, minus the number of workers): a process the first pass left
# behind (a worker of a killed xdist worker) must not take the second pass's tasks to a database that is gone.
redis_base="${CLEAR_TEST_REDIS_URL%/*}"
redis_db="${CLEAR_TEST_REDIS_URL##*/}"
redis_dbs="${workers:-1}"; [ "$redis_dbs" != 0 ] || redis_dbs=1
sqlite_redis_db=$(( redis_db - redis_dbs ))
if [ "$sqlite_redis_db" -lt 0 ]; then sqlite_redis_db=$(( redis_db + redis_dbs )); fi
echo "==> pages, API, CLI and ingestion on SQLite (var dir $sqlite_var, Redis database $sqlite_redis_db and up)"
# The ingestion fuzz (tests/traces/test_ingest_fuzz.py) draws 2,000 requests per endpoint on Postgres; on SQLite, where
# only the dialect differs, 500 (a quarter of the SQLite pass's time otherwise). CLEAR_FUZZ_EXAMPLES sets both.
CLEAR_FUZZ_EXAMPLES="${CLEAR_FUZZ_EXAMPLES:-500}" \
CLEAR_TEST_DATABASE=sqlite CLEAR_VAR_DIR="$sqlite_var" CLEAR_TEST_REDIS_URL="$redis_base/$sqlite_redis_db" \
  "$PY" -m pytest ${xdist[@]+"${xdist[@]}"} "${durations[@]}" "${SQLITE_TESTS[@]}" "${SQLITE_SKIP[@]}" || status=$?
rm -rf "$sqlite_var"
exit "$status"
