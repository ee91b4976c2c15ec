"""A throw-away Postgres database for the benchmarks that run Django in-process (insight_refresh, insights_real):
dropped and created, the test settings pointed at it, migrated; dropped again at the end."""

from __future__ import annotations

import logging
import os
import secrets


def database_recreate(pg: str, db: str, *, create: bool = True) -> None:
    """Drop `db` on the server at `pg` (a URL without database), and create it again unless create=False."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(f"{pg}/postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
        if create:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))


def django_start(*, pg: str, db: str, redis: str, **env: str) -> None:
    """clear.settings.test on that database, no model, offline embeddings, plus `env`; migrated. The product's INFO
    log lines stay out of the benchmark's report."""
    os.environ.update(
        DJANGO_SETTINGS_MODULE="clear.settings.test", CLEAR_TEST_DATABASE="postgres", DATABASE_URL=f"{pg}/{db}",
        CLEAR_TEST_REDIS_URL=redis, LITELLM_LOCAL_MODEL_COST_MAP="True", CLEAR_JUDGE_MODEL="", HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false", **env)
    os.environ.setdefault("SECRET_KEY", "bench-" + secrets.token_hex(24))
    import django
    from django.core.management import call_command

    django.setup()
    logging.disable(logging.INFO)
    call_command("migrate", verbosity=0)


def bench_in_throwaway(*, pg: str, db: str, keep: bool, setup, bench):
    """Recreate the database, setup() (django_start), bench() and return its result; the database is dropped at the
    end, also when bench fails, unless keep."""
    database_recreate(pg, db)
    try:
        setup()
        return bench()
    finally:
        if not keep:
            from django.db import connections

            connections.close_all()
            database_recreate(pg, db, create=False)


def dataset_folder(name: str):
    """`CLEAR_SHARED_DIR/datasets/<name>` (after django_start), or exit saying where it was looked for."""
    from pathlib import Path

    from django.conf import settings

    folder = Path(settings.SHARED_DIR) / "datasets" / name
    if not folder.is_dir():
        raise SystemExit(f"no dataset at {folder}: lay shared/ next to the checkout or set CLEAR_SHARED_DIR")
    return folder


def dataset_import(*, project, folder, pattern: str, **options):
    """Import the trace files of `folder` matching `pattern` into `project`; returns (summary, files, seconds). The
    importer is given the trace files alone (links in a temporary folder): the labels file next to them is the
    scorer's, and the shipped code should never be handed it, even to refuse it."""
    import tempfile
    import time
    from pathlib import Path

    from traces.services.imports import traces_import

    files = sorted(folder.glob(pattern))
    with tempfile.TemporaryDirectory(prefix="clear-bench-") as tmp:
        for path in files:
            (Path(tmp) / path.name).symlink_to(path)
        started = time.monotonic()
        summary = traces_import(project=project, path=Path(tmp), **options)
    return summary, len(files), time.monotonic() - started
