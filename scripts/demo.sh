#!/usr/bin/env bash
# The main job on the embedded default: SQLite and a filesystem task queue under var/, no services needed.
# Installs Clear, migrates, creates the demo user and project, starts a Celery worker, serves the UI,
# and prints the login and the API keys.
#   scripts/demo.sh [--no-install] [--port 8000] [--host 127.0.0.1]
# CLEAR_VAR_DIR moves var/ (tests use a fresh one).
set -euo pipefail
source "$(dirname "$0")/_common.sh"
source "$(dirname "$0")/_children.sh"

PORT=8000
HOST=127.0.0.1
INSTALL=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-install) INSTALL=0 ;;
    --port) PORT="$2"; shift ;;
    --port=*) PORT="${1#*=}" ;;
    --host) HOST="$2"; shift ;;
    --host=*) HOST="${1#*=}" ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if [ "$INSTALL" = 1 ]; then bash scripts/install.sh; source "$(dirname "$0")/_common.sh"; fi

export CLEAR_VAR_DIR="${CLEAR_VAR_DIR:-$ROOT/var}"
mkdir -p "$CLEAR_VAR_DIR/logs"
if [ -z "${SECRET_KEY:-}" ] && [ -z "${SECRET_KEY_FILE:-}" ]; then
  if [ ! -s "$CLEAR_VAR_DIR/secret_key" ]; then
    (umask 077; "$PY" -c "import secrets; print(secrets.token_urlsafe(50))" > "$CLEAR_VAR_DIR/secret_key")
  fi
  export SECRET_KEY_FILE="$CLEAR_VAR_DIR/secret_key"
fi
export ALLOWED_HOSTS="${ALLOWED_HOSTS:-127.0.0.1,localhost,$HOST}"
CLIENT_HOST="$HOST"; [ "$HOST" = "0.0.0.0" ] && CLIENT_HOST=127.0.0.1
# Links in exports and ticket bodies are read outside Clear: they must name the port this demo serves on. Written
# under var/ too, so that `python manage.py export_tickets …` in this checkout makes the same links (clear/settings).
export CLEAR_PUBLIC_URL="${CLEAR_PUBLIC_URL:-http://$CLIENT_HOST:$PORT}"
printf '%s\n' "$CLEAR_PUBLIC_URL" > "$CLEAR_VAR_DIR/public_url"

echo "==> preparing the database in $CLEAR_VAR_DIR"
"$PY" manage.py migrate --noinput -v 0
# The throttles' counters and the dashboard cache: a SQLite file of their own, var/clear-guards.sqlite3 (clear/guards/).
"$PY" manage.py guards_migrate -v 0
"$PY" manage.py collectstatic --noinput -v 0

# An Evolve job's hot swap starts the example agent in a session of its own (a worker's restart must not take the
# live release down), so stopping the worker leaves it running: it is stopped from its pid file, once the worker that
# could start another one has stopped. It says which agent it stopped; its log lines go to the log of the target's
# registration, off the terminal.
agents_stop() {
  "$PY" manage.py evolution_target stop-agents 2>> "$CLEAR_VAR_DIR/logs/evolution-target.log" \
    || echo "Stopping the hot-swapped agent failed; see $CLEAR_VAR_DIR/logs/evolution-target.log" >&2
}
children_traps agents_stop

echo "==> starting the Celery worker (log: $CLEAR_VAR_DIR/logs/worker.log)"
own_session "$BIN/celery" -A clear worker --concurrency 2 --loglevel INFO > "$CLEAR_VAR_DIR/logs/worker.log" 2>&1 &
PIDS+=($!)

echo "==> serving http://$HOST:$PORT (log: $CLEAR_VAR_DIR/logs/web.log)"
# --capture-output: what the app prints goes to web.log too, such as the password-reset mails of the console backend.
own_session "$BIN/gunicorn" clear.wsgi:application --bind "$HOST:$PORT" --workers 2 --threads 4 --timeout 120 --graceful-timeout 5 \
  --access-logfile "$CLEAR_VAR_DIR/logs/web.log" --error-logfile "$CLEAR_VAR_DIR/logs/web.log" --capture-output &
WEB_PID=$!
PIDS+=($WEB_PID)
up=0
for _ in $(seq 1 120); do
  # Only our gunicorn's answer counts: with the port taken by another server, /healthz may well answer while ours
  # fails to bind and exits, and the demo would send its traces there and stop at once (issue 44).
  kill -0 "$WEB_PID" 2>/dev/null || break
  if grep -qF "Listening at: http://$HOST:$PORT " "$CLEAR_VAR_DIR/logs/web.log" 2>/dev/null &&
     "$PY" -c "import urllib.request; urllib.request.urlopen('http://$HOST:$PORT/healthz', timeout=1)" 2>/dev/null
  then
    up=1; break
  fi
  sleep 0.5
done
if [ "$up" != 1 ]; then
  echo "The web server did not answer on http://$HOST:$PORT/healthz; its log says:" >&2
  tail -20 "$CLEAR_VAR_DIR/logs/web.log" >&2
  exit 1
fi

"$PY" manage.py demo_setup > "$CLEAR_VAR_DIR/demo-credentials.txt"

# The example agent's traces, sent once through the real OTLP endpoint: release v1 with all three planted bugs,
# release v2 with the misroute fixed.
if [ ! -f "$CLEAR_VAR_DIR/demo-ingested" ]; then
  SECRET=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['secret_key'])" "$CLEAR_VAR_DIR/demo-credentials.json")
  echo "==> sending the example agent's traces (log: $CLEAR_VAR_DIR/logs/example-agent.log)"
  {
    "$PY" -m examples.support_desk run --endpoint "http://$CLIENT_HOST:$PORT" --key "$SECRET" --release v1 --seed 0
    "$PY" -m examples.support_desk run --endpoint "http://$CLIENT_HOST:$PORT" --key "$SECRET" --release v2 --seed 1 \
      --bugs mediator_race,retry_loop
  } > "$CLEAR_VAR_DIR/logs/example-agent.log" 2>&1
  SLUG=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['slug'])" "$CLEAR_VAR_DIR/demo-credentials.json")
  echo "==> diagnosing them: rule judges, insights, tickets (log: $CLEAR_VAR_DIR/logs/diagnosis.log)"
  "$PY" manage.py diagnose --project "$SLUG" --inline > "$CLEAR_VAR_DIR/logs/diagnosis.log" 2>&1 \
    || echo "The diagnosis failed; see $CLEAR_VAR_DIR/logs/diagnosis.log" >&2
  touch "$CLEAR_VAR_DIR/demo-ingested"
fi
# The beat (continuous judging, insight refreshes, sweeps) starts once the demo's own run has judged the example
# traces: started earlier, the day's continuous run took some of them first and judged them itself, so what the
# Insights page first showed depended on the machine's speed.
echo "==> starting the Celery beat (log: $CLEAR_VAR_DIR/logs/beat.log)"
own_session "$BIN/celery" -A clear beat --loglevel INFO --schedule "$CLEAR_VAR_DIR/celerybeat-schedule" \
  > "$CLEAR_VAR_DIR/logs/beat.log" 2>&1 &
PIDS+=($!)
# The example agent as an evolution target: a git repository with mediator_race and retry_loop in its code (release
# v2), written and registered once.
desk_target_register() {
  [ -d "$DESK_REPO/.git" ] || "$PY" -m examples.support_desk make-target-repo "$DESK_REPO" || return 1
  case "$("$PY" manage.py evolution_target list --project "$SLUG")" in *support_desk*) return 0 ;; esac
  "$PY" manage.py evolution_target add --project "$SLUG" --name support_desk --source "$DESK_REPO"
}
if [ ! -f "$CLEAR_VAR_DIR/demo-evolution-target" ]; then
  SLUG=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['slug'])" "$CLEAR_VAR_DIR/demo-credentials.json")
  DESK_REPO="$CLEAR_VAR_DIR/evolution/support_desk"
  echo "==> registering the example agent as an evolution target ($DESK_REPO)"
  if desk_target_register > "$CLEAR_VAR_DIR/logs/evolution-target.log" 2>&1; then
    touch "$CLEAR_VAR_DIR/demo-evolution-target"
  else
    echo "Registering the evolution target failed; see $CLEAR_VAR_DIR/logs/evolution-target.log" >&2
  fi
fi
cat <<MSG

Clear is running at http://$HOST:$PORT/
$(cat "$CLEAR_VAR_DIR/demo-credentials.txt")

OTLP endpoint: http://$HOST:$PORT/v1/traces   (Authorization: Bearer <secret_key>)
Press Ctrl-C to stop.
MSG
# Stop everything when either process dies, and say which one and why.
wait -n "${PIDS[@]}" || true
for log in worker web; do
  echo "A process stopped; the end of $CLEAR_VAR_DIR/logs/$log.log:" >&2
  tail -5 "$CLEAR_VAR_DIR/logs/$log.log" >&2
done
exit 1
