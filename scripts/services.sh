#!/usr/bin/env bash
# Starts the local Postgres and Redis when they do not answer, and creates the `clear` database.
set -euo pipefail
source "$(dirname "$0")/_common.sh"

if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  echo "==> starting Postgres"
  if ! command -v pg_ctlcluster >/dev/null; then apt_install postgresql; fi
  as_root pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main start
  for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
fi
if ! psql -h 127.0.0.1 -U postgres -tAc "select 1 from pg_database where datname='clear'" 2>/dev/null | grep -q 1; then
  createdb -h 127.0.0.1 -U postgres clear
fi
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "==> starting Redis"
  if ! command -v redis-server >/dev/null; then apt_install redis-server; fi
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
  for _ in $(seq 1 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 1; done
fi
