# Sourced by scripts/demo.sh: its long-running children (the worker, the web server), each in a session of its own,
# and how they are stopped when the script exits. tests/foundation/test_demo_stop.py runs this part alone.

# The children run in sessions of their own, so Ctrl-C or a SIGTERM to the script's process group reaches only the
# script, which stops them (children_stop). A group SIGTERM reaching Celery's pool processes killed them, sometimes
# while one held the pool's queue lock, and the worker then hung at exit for good. --pdeathsig: they still stop if
# the script is killed outright. Without setsid/setpriv (not Linux) they share the script's group.
own_session() {  # only as `own_session cmd... &`: it execs, so $! is the command's pid
  if command -v setsid >/dev/null && command -v setpriv >/dev/null; then exec setsid setpriv --pdeathsig TERM "$@"
  else exec "$@"; fi
}
PIDS=()
# Once a child has ended, bash reaps it (disowned or not) and its pid is free: on a busy machine the kernel soon gives
# it to an unrelated process (pid_max is 32768 on many; a test run wraps it in minutes). Only a process whose parent
# is this script is signalled (issue 44), and a group only while its leader is ours or gone (a live group's id is
# never reused).
ours() {
  [ -r /proc/self/stat ] || return 0  # no /proc (not Linux): as before
  local line
  { read -r line < "/proc/$1/stat"; } 2>/dev/null || return 1
  line=${line##*) }  # after "(comm) ": state ppid ...
  set -- $line
  [ "${2:-}" = "$$" ]
}
gone() { [ -r /proc/self/stat ] && [ ! -e "/proc/$1" ]; }
running() {
  local pid
  for pid in "${PIDS[@]}"; do ours "$pid" && kill -0 "$pid" 2>/dev/null && return 0; done
  return 1
}
wait_stopped() {  # up to $1 seconds (a second Ctrl-C sets STOP_GRACE=0 and ends the wait)
  local i
  for ((i = 0; i < $1 * 5 && STOP_GRACE > 0; i++)); do running || return 0; sleep 0.2; done
  ! running
}
# SIGTERM first: gunicorn finishes in-flight requests (--graceful-timeout), Celery running tasks (warm shutdown, which
# has no time limit of its own). After STOP_GRACE seconds SIGQUIT: gunicorn's quick and Celery's cold shutdown (the
# running tasks go back to the queue: acks_late). Whatever is left 3 s later gets SIGKILL, with its session.
STOP_GRACE=5
children_stop() {
  trap 'STOP_GRACE=0' INT TERM
  local pid
  # Bash reports a background job that a signal other than SIGTERM ended ("line 18: <pid> Quit  own_session …"),
  # which reads as a crash: here they are ended on purpose, and `running` tells whether they stopped.
  for pid in "${PIDS[@]}"; do disown "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do ! ours "$pid" || kill -TERM "$pid" 2>/dev/null || true; done
  wait_stopped "$STOP_GRACE" && return 0
  for pid in "${PIDS[@]}"; do ! ours "$pid" || kill -QUIT "$pid" 2>/dev/null || true; done
  STOP_GRACE=1 wait_stopped 3 && return 0
  echo "The worker or the web server did not stop; killing it." >&2
  for pid in "${PIDS[@]}"; do
    if ours "$pid" || gone "$pid"; then kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; fi
  done
  STOP_GRACE=1 wait_stopped 2 || true  # disowned: `wait` would not wait for them
}
# On exit the children are stopped, then the command given here runs (demo.sh: agents_stop); after Ctrl-C or a
# SIGTERM, one line says it is done.
children_traps() {
  CHILDREN_THEN=("$@")
  CHILDREN_SIGNALLED=0
  trap '_children_exit' EXIT
  trap 'CHILDREN_SIGNALLED=1; exit 130' INT TERM
}
_children_exit() {
  children_stop
  if [ ${#CHILDREN_THEN[@]} -gt 0 ]; then "${CHILDREN_THEN[@]}"; fi
  if [ "$CHILDREN_SIGNALLED" = 1 ]; then echo "Stopped."; fi
}
