"""Settings for every environment, read from env vars with working local defaults (see .env.example)."""

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from clear.env import env_bool, env_float, env_int, env_list, env_str
from clear.llm_limits import STRUCTURED_OUTPUT_HINT, STRUCTURED_OUTPUT_MODES

# Importing LiteLLM otherwise downloads its price table and hangs on a closed network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(env_str("CLEAR_VAR_DIR", str(BASE_DIR / "var"))).resolve()
SHARED_DIR = Path(env_str("CLEAR_SHARED_DIR", str(BASE_DIR.parent / "shared"))).resolve()



def _demo_written(name: str) -> str:
    """What scripts/demo.sh wrote under var/ for the manage.py commands run in its checkout afterwards."""
    path = VAR_DIR / name
    try:
        return path.read_text().strip() if path.is_file() else ""
    except OSError as exc:
        raise ImproperlyConfigured(f"{path} (written by scripts/demo.sh) cannot be read: {exc}") from exc


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY") or _demo_written("secret_key")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is required when DEBUG is off. Set SECRET_KEY (or SECRET_KEY_FILE), "
            "or run scripts/demo.sh, which generates one under var/."
        )
    SECRET_KEY = "insecure-debug-only-key"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# HTTPS hardening has its own switches so the demo works on http://127.0.0.1.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", False)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", False)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
if env_bool("SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# The Content-Security-Policy of every page (clear/csp.py); empty: no header. Never needs 'unsafe-inline'.
CLEAR_CSP = env_str(
    "CLEAR_CSP",
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'",
)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "clear.projects",
    "clear.webhooks",
    "clear.outbox",
    "clear.guards",
    "traces",
    "diagnosis",
    "diagnosis.attribution",
    "diagnosis.tickets",
    "evolution",
    "frontend",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "clear.csp.ContentSecurityPolicyMiddleware",
]

ROOT_URLCONF = "clear.urls"
WSGI_APPLICATION = "clear.wsgi.application"
ASGI_APPLICATION = "clear.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "frontend.context_processors.projects",
            ],
        },
    },
]

# A worker and the web process write to SQLite concurrently: wait for the lock instead of failing, take the write
# lock at BEGIN (no deadlock between two readers upgrading), and let readers go on while one writes (WAL).
SQLITE_OPTIONS = {"timeout": 30, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"}
DATABASE_URL = env_str("DATABASE_URL")
if DATABASE_URL:
    DATABASES = {
        "default": dj_database_url.parse(
            DATABASE_URL, conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 600), conn_health_checks=True
        )
    }
    if DATABASES["default"]["ENGINE"].endswith("postgresql") and not env_bool("DATABASE_JIT", False):
        # Postgres JIT-compiles any query with a high cost estimate; the pages' bounded aggregates (a few thousand
        # traces' spans) then spend ~150 ms compiling to save a few (benchmarks/ui/README.md).
        options = DATABASES["default"].setdefault("OPTIONS", {})
        options["options"] = (options.get("options", "") + " -c jit=off").strip()
    elif DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        DATABASES["default"]["OPTIONS"] = {**SQLITE_OPTIONS, **DATABASES["default"].get("OPTIONS", {})}
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": VAR_DIR / "clear.sqlite3", "OPTIONS": SQLITE_OPTIONS}
    }
# The guard table (the throttles' counters and the dashboard cache when there is no Redis: CACHES below). On SQLite
# it is a file of its own beside the database (var/clear-guards.sqlite3), so that counting a failed login never waits
# for an ingestion's write lock; `manage.py guards_migrate` creates it (scripts/demo.sh runs it). Losing it
# loses nothing but counts and cached figures, hence no fsync per commit. On Postgres it is in the database itself.
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    _main_file = Path(DATABASES["default"]["NAME"])
    DATABASES["guards"] = {
        "ENGINE": "django.db.backends.sqlite3", "NAME": _main_file.with_name(f"{_main_file.stem}-guards.sqlite3"),
        "OPTIONS": {**SQLITE_OPTIONS, "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"},
    }
    CLEAR_GUARDS_DATABASE = "guards"
else:
    CLEAR_GUARDS_DATABASE = "default"
DATABASE_ROUTERS = ["clear.guards.routers.GuardsRouter"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "frontend:login"
LOGIN_REDIRECT_URL = "frontend:home"
LOGOUT_REDIRECT_URL = "frontend:login"

# E-mail (password reset, frontend/views_password.py). The console backend prints each mail to the web process'
# output (the demo's web log); production sets the SMTP backend and its server. EMAIL_HOST_USER/PASSWORD may come
# from *_FILE like every secret. A reset mail goes to one account at most CLEAR_PASSWORD_RESET_RATE times
# ("<n>/<s|min|h|d>", counted in the shared throttle cache; empty: no limit); its link is valid for
# PASSWORD_RESET_TIMEOUT seconds and only until the password changes.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10)  # seconds; the reset form sends in the request
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "Clear <clear@localhost>")
PASSWORD_RESET_TIMEOUT = env_int("PASSWORD_RESET_TIMEOUT", 24 * 3600)
CLEAR_PASSWORD_RESET_RATE = env_str("CLEAR_PASSWORD_RESET_RATE", "3/h")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(VAR_DIR / "static")))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns on every request when it is missing
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if not DEBUG
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "clear.projects.authentication.ProjectKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "EXCEPTION_HANDLER": "clear.errors.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Clear API",
    "DESCRIPTION": "Traces, diagnosis runs, insights, tickets and evolution jobs.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"LiteLLM": {"level": "WARNING"}, "httpx": {"level": "WARNING"}},
}

# Celery: Redis when REDIS_URL is set, else kombu's filesystem transport under var/ with a worker process.
REDIS_URL = env_str("REDIS_URL")
CELERY_VISIBILITY_TIMEOUT = env_int("CELERY_VISIBILITY_TIMEOUT", 3600)
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": CELERY_VISIBILITY_TIMEOUT,
        # kombu sweeps for unacknowledged tasks every interval × throttle seconds (100 s by default), so a short
        # visibility timeout would otherwise redeliver long after it expired.
        "unacked_restore_interval": max(1, min(10, CELERY_VISIBILITY_TIMEOUT // 5)),
        "unacked_restore_throttle": 1,
    }
else:
    CELERY_QUEUE_DIR = VAR_DIR / "celery" / "queue"
    CELERY_PROCESSED_DIR = VAR_DIR / "celery" / "processed"
    CELERY_QUEUE_DIR.mkdir(parents=True, exist_ok=True)
    CELERY_PROCESSED_DIR.mkdir(parents=True, exist_ok=True)
    (VAR_DIR / "celery" / "control").mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    # kombu's filesystem transport, with each message written whole before a worker can list it (the module says why).
    CELERY_BROKER_TRANSPORT = "clear.broker_filesystem:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(CELERY_QUEUE_DIR),
        "data_folder_out": str(CELERY_QUEUE_DIR),
        "processed_folder": str(CELERY_PROCESSED_DIR),
        "control_folder": str(VAR_DIR / "celery" / "control"),
        "store_processed": False,
        # kombu sleeps this long whenever the worker cannot take a message (none queued, or its prefetch full): at
        # kombu's 1 s a worker took about one task a second, so the demo's gate (two 22-trace runs) took 41-49 s.
        "polling_interval": env_float("CELERY_POLLING_INTERVAL", 0.1),
    }
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 600)
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 660)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE: dict = {
    # Hands pending outbox rows to their subscribers (they stay pending while the broker is down).
    "outbox-sweep": {"task": "outbox.sweep", "schedule": env_float("CLEAR_OUTBOX_SWEEP_SECONDS", 5.0)},
    # Judges traces once they are complete (root ended, quiet for CLEAR_TRACE_QUIET_SECONDS) and re-sends lost
    # diagnosis messages; see diagnosis/services/continuous.py.
    "diagnosis-continuous": {
        "task": "diagnosis.continuous_tick", "schedule": env_float("CLEAR_CONTINUOUS_SECONDS", 15.0),
    },
}

# Clear's own settings.
CLEAR_INGEST_MAX_BODY_BYTES = env_int("CLEAR_INGEST_MAX_BODY_BYTES", 16 * 1024 * 1024)
CLEAR_INGEST_MAX_IN_FLIGHT = env_int("CLEAR_INGEST_MAX_IN_FLIGHT", 32)
CLEAR_OUTBOX_DISPATCH_INTERVAL = env_float("CLEAR_OUTBOX_DISPATCH_INTERVAL", 1.0)
# Who reacts to what (clear/outbox/services.py): topic -> Celery task names. An app publishes its facts (its facts.py)
# and runs its reactions to other apps' facts (its subscribers.py); neither imports the other, this table joins them.
CLEAR_OUTBOX_SUBSCRIPTIONS: dict[str, list[str]] = {
    "trace.finalize": ["traces.finalize_traces"],
    # Runs that were waiting for the deleted traces may be complete now (diagnosis's deletion hook names them).
    "trace.deleted": ["diagnosis.runs_finish_after_trace_delete"],
    # Promoted fixes confirmed or reopened by the run's insights (after the tickets followed them); the run's failed
    # traces attributed (who, which step) for the insight page and the ticket list.
    "insights.built": ["evolution.fixes_check_after_build", "attribution.after_build"],
    "diagnosis_run.finished": ["webhooks.emit"],
    "evolution_job.state_changed": ["webhooks.emit"],
}
CLEAR_OUTCOME_SCORE_NAME = env_str("CLEAR_OUTCOME_SCORE_NAME", "outcome")
# Days traces are kept when a project sets none (Settings > Data retention); empty or 0: forever, so that an upgrade
# never deletes data (traces/services/lifecycle.py).
CLEAR_RETENTION_DAYS = env_int("CLEAR_RETENTION_DAYS", 0) or None
# Daily span partitions (Postgres) that beat keeps created ahead of today.
CLEAR_SPAN_PARTITIONS_AHEAD = env_int("CLEAR_SPAN_PARTITIONS_AHEAD", 7)
# Whether the evidence quotes (text copied out of spans) stay on insights and tickets once retention removes their
# traces; off: they go with the traces, for privacy, and the figures stay (diagnosis/services/evidence_expiry.py).
CLEAR_RETENTION_KEEP_EVIDENCE_QUOTES = env_bool("CLEAR_RETENTION_KEEP_EVIDENCE_QUOTES", False)
CLEAR_JUDGE_MODEL = env_str("CLEAR_JUDGE_MODEL")
CLEAR_JUDGE_API_BASE = env_str("CLEAR_JUDGE_API_BASE")
CLEAR_JUDGE_API_KEY = env_str("CLEAR_JUDGE_API_KEY")
# Every model call (judges, attribution, naming; evolution roles unless the backend config says otherwise) runs
# under these: see clear/llm_limits.py for the per-kind output sizes below the max_tokens ceiling.
CLEAR_JUDGE_TIMEOUT_SECONDS = env_float("CLEAR_JUDGE_TIMEOUT_SECONDS", 60.0)
CLEAR_JUDGE_MAX_RETRIES = env_int("CLEAR_JUDGE_MAX_RETRIES", 3)
CLEAR_JUDGE_MAX_TOKENS = env_int("CLEAR_JUDGE_MAX_TOKENS", 4096)
CLEAR_JUDGE_STRUCTURED_OUTPUT = env_str("CLEAR_JUDGE_STRUCTURED_OUTPUT", "auto").strip().lower() or "auto"
if CLEAR_JUDGE_STRUCTURED_OUTPUT not in STRUCTURED_OUTPUT_MODES:
    raise ImproperlyConfigured(f"CLEAR_JUDGE_STRUCTURED_OUTPUT={CLEAR_JUDGE_STRUCTURED_OUTPUT!r}: "
                               f"{STRUCTURED_OUTPUT_HINT}")
CLEAR_EMBEDDING_MODEL = env_str("CLEAR_EMBEDDING_MODEL")
# torch threads of the embedding model; 0: one per core. Several Clear processes on few cores each want fewer: torch's
# idle threads spin, and processes sharing two cores burn CPU waiting on each other (scripts/test.sh sets 1).
CLEAR_EMBEDDING_THREADS = env_int("CLEAR_EMBEDDING_THREADS", 0)
CLEAR_TRACE_QUIET_SECONDS = env_float("CLEAR_TRACE_QUIET_SECONDS", 30.0)

# REST API (/api/v1/, clear/api/): rate limit per API key, docs UI served from drf-spectacular-sidecar (no CDN).
CLEAR_API_RATE = env_str("CLEAR_API_RATE", "600/min")  # "<n>/<s|min|h|d>"; empty: no limit
CLEAR_API_SPAN_IO_MAX_CHARS = env_int("CLEAR_API_SPAN_IO_MAX_CHARS", 20_000)  # span input/output in trace detail
CLEAR_API_TRACE_MAX_SPANS = env_int("CLEAR_API_TRACE_MAX_SPANS", 5_000)
# The rate limit's counters: Redis when there is one, else the guard table; every web process counts against one limit.
CLEAR_API_THROTTLE_CACHE = "api_throttle"
# Failed logins and failed API keys (clear/projects/auth_throttle.py): at most CLEAR_AUTH_FAILURE_RATE ("<n>/<period>",
# e.g. "10/15min"; empty: no limit) per (account, client address) and per client address, then 429 until the window
# ends. The client address is REMOTE_ADDR, or X-Forwarded-For when REMOTE_ADDR is one of CLEAR_TRUSTED_PROXIES (the
# reverse proxies' addresses or CIDRs; empty: X-Forwarded-For is never believed). Counted in a shared cache as above.
CLEAR_AUTH_FAILURE_RATE = env_str("CLEAR_AUTH_FAILURE_RATE", "10/15min")
CLEAR_TRUSTED_PROXIES = env_list("CLEAR_TRUSTED_PROXIES", [])
CLEAR_AUTH_THROTTLE_CACHE = "auth_throttle"


def _shared_cache(name: str) -> dict:
    """Redis when there is one, else the guard table (clear/guards/cache.py): either way every web process sees the
    same entries, so a limit is one limit however many workers gunicorn runs."""
    if REDIS_URL:
        return {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
    return {"BACKEND": "clear.guards.cache.GuardCache", "LOCATION": name}


CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    CLEAR_API_THROTTLE_CACHE: _shared_cache("api-throttle"),
    CLEAR_AUTH_THROTTLE_CACHE: _shared_cache("auth-throttle"),
    "dashboards": _shared_cache("dashboards"),  # frontend/dashboard_cache.py
}
CLEAR_DASHBOARD_CACHE = env_bool("CLEAR_DASHBOARD_CACHE", True)
CLEAR_DASHBOARD_CACHE_SECONDS = env_float("CLEAR_DASHBOARD_CACHE_SECONDS", 30.0)
REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"] = ["clear.api.throttling.ApiKeyRateThrottle"]
REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"] = "clear.api.schema.AutoSchema"
SPECTACULAR_SETTINGS.update({
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "DiagnosisRunStatusEnum": "diagnosis.models.DiagnosisRun.Status",
        # A target's state beside a job's: both fields are named "state"; the job's keeps the name it always had.
        "EvolutionTargetStateEnum": "evolution.models.EvolutionTarget.State",
        "StateEnum": "evolution.models.JobState",
        "DiagnosisRunPurposeEnum": "diagnosis.models.DiagnosisRun.Purpose",
        "FeedbackStatusEnum": "diagnosis.models.Feedback.Status",
        "InsightStatusEnum": "diagnosis.models.Insight.Status",
        "TicketStatusEnum": ["open", "in_progress", "fixed", "wont_fix"],  # Ticket.Status.values (label = value)
        "WebhookDeliveryStatusEnum": "clear.webhooks.models.WebhookDelivery.Status",
    },
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "clear.api.schema.error_responses_hook",
                             "traces.schema.ingestion_paths_hook"],
})

# Webhooks (clear/webhooks/): attempts per delivery, exponential backoff between them, request timeout.
CLEAR_WEBHOOK_MAX_ATTEMPTS = env_int("CLEAR_WEBHOOK_MAX_ATTEMPTS", 8)
CLEAR_WEBHOOK_BACKOFF_SECONDS = env_float("CLEAR_WEBHOOK_BACKOFF_SECONDS", 30.0)
CLEAR_WEBHOOK_BACKOFF_MAX_SECONDS = env_float("CLEAR_WEBHOOK_BACKOFF_MAX_SECONDS", 1800.0)
CLEAR_WEBHOOK_TIMEOUT_SECONDS = env_float("CLEAR_WEBHOOK_TIMEOUT_SECONDS", 10.0)
# Every connection made on a project's behalf reaches only public addresses, over its purpose's schemes (clear/outbound/
# policy.py). Per purpose, ALLOW_PRIVATE lets an on-premise operator allow loopback and private addresses (link-local,
# multicast and reserved stay refused whatever is set) and ALLOW_HTTP adds plain http where https is the rule.
# Webhooks: http or https.
CLEAR_WEBHOOK_ALLOW_PRIVATE = env_bool("CLEAR_WEBHOOK_ALLOW_PRIVATE", False)
# The issue tracker's base_url (diagnosis/tickets/): https.
CLEAR_TRACKER_ALLOW_PRIVATE = env_bool("CLEAR_TRACKER_ALLOW_PRIVATE", False)
CLEAR_TRACKER_ALLOW_HTTP = env_bool("CLEAR_TRACKER_ALLOW_HTTP", False)
# Git sources and push URLs of evolution targets: https or ssh (git's user@host:path included).
CLEAR_GIT_ALLOW_PRIVATE = env_bool("CLEAR_GIT_ALLOW_PRIVATE", False)
CLEAR_GIT_ALLOW_HTTP = env_bool("CLEAR_GIT_ALLOW_HTTP", False)
# The model endpoints of evolution jobs started through the API or the web UI (with CLEAR_EVOLUTION_MODEL_HOSTS
# below): https.
CLEAR_EVOLUTION_MODEL_ALLOW_PRIVATE = env_bool("CLEAR_EVOLUTION_MODEL_ALLOW_PRIVATE", False)
CLEAR_EVOLUTION_MODEL_ALLOW_HTTP = env_bool("CLEAR_EVOLUTION_MODEL_ALLOW_HTTP", False)
# insight.regressed fires when an insight's frequency rose by at least this much (absolute, 0..1) since the last run
# it occurred in (or when a fixed insight is reopened).
CLEAR_INSIGHT_REGRESSION_DELTA = env_float("CLEAR_INSIGHT_REGRESSION_DELTA", 0.1)
# An insight absent from (or fixed in) the previous release is "regressed" in a newer one judged on at least this many
# traces where its frequency rose by CLEAR_INSIGHT_REGRESSION_DELTA (diagnosis/insights/regressed.py).
CLEAR_INSIGHT_REGRESSION_MIN_TRACES = env_int("CLEAR_INSIGHT_REGRESSION_MIN_TRACES", 10)
# Continuous insights (diagnosis/services/insights_refresh.py): newly judged traces of the day's continuous run refresh
# the insights at most every REFRESH seconds, over the run's traces of the last CLEAR_CONTINUOUS_LOOKBACK_HOURS, the
# newest WINDOW_TRACES of them; statements that join no insight wait for a full re-clustering of that window, at most
# every RECLUSTER seconds.
CLEAR_INSIGHT_REFRESH_SECONDS = env_float("CLEAR_INSIGHT_REFRESH_SECONDS", 120.0)
CLEAR_INSIGHT_WINDOW_TRACES = env_int("CLEAR_INSIGHT_WINDOW_TRACES", 5000)
CLEAR_INSIGHT_RECLUSTER_SECONDS = env_float("CLEAR_INSIGHT_RECLUSTER_SECONDS", 300.0)
CLEAR_INSIGHT_JOIN_SIMILARITY = env_float("CLEAR_INSIGHT_JOIN_SIMILARITY", 0.6)
# Evolution sandbox (evolution/sandbox/): the weakest isolation a trial may run under (subprocess < bwrap < docker),
# and the image the Docker runner uses (it must run the host's Python: same libc).
# The minimum is bwrap: candidate code never runs unconfined unless the operator lowers it (subprocess gives no
# filesystem, network or process isolation at all). A worker running as root drops to CLEAR_EVOLUTION_SANDBOX_USER
# inside bubblewrap (scripts/install.sh creates it), so the sandboxed process is never uid 0 on the host.
CLEAR_EVOLUTION_MIN_SANDBOX = env_str("CLEAR_EVOLUTION_MIN_SANDBOX", "bwrap")
CLEAR_EVOLUTION_SANDBOX_USER = env_str("CLEAR_EVOLUTION_SANDBOX_USER", "clear-sandbox")
# Sandboxed processes of one run may not exceed this many processes (RLIMIT_NPROC of the sandbox user).
CLEAR_EVOLUTION_SANDBOX_NPROC = env_int("CLEAR_EVOLUTION_SANDBOX_NPROC", 256)
# Targets registered through the API: a git URL (https or ssh), or a local path under one of these directories
# (empty: no local paths through the API; the operator's `manage.py evolution_target add` may name any path).
CLEAR_EVOLUTION_SOURCE_ROOTS = env_list("CLEAR_EVOLUTION_SOURCE_ROOTS", [])
# The model hosts ("host" or "host:port"; a host without a port means port 443) a job started through the API or the
# web UI may send its API key to (external backend's model_url, litellm's api_base, or where litellm sends the model
# without one): the key goes there, and litellm calls it from the worker.
CLEAR_EVOLUTION_MODEL_HOSTS = env_list("CLEAR_EVOLUTION_MODEL_HOSTS", [
    "api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com", "api.mistral.ai", "openrouter.ai"])
# The environment variables a job's backend config may name as its api_key_env (the worker's value is handed to the
# coding agent); any other name is refused.
CLEAR_EVOLUTION_BACKEND_ENV_ALLOW = env_list("CLEAR_EVOLUTION_BACKEND_ENV_ALLOW", [
    "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "MISTRAL_API_KEY", "OPENROUTER_API_KEY"])
CLEAR_EVOLUTION_DOCKER_IMAGE = env_str("CLEAR_EVOLUTION_DOCKER_IMAGE", "debian:12-slim")
# Evolution jobs (evolution/services/): mirrors, worktrees and the content-addressed artifacts live under
# CLEAR_EVOLUTION_DIR; a working stage beats every HEARTBEAT seconds and the janitor fails a job silent for STALE
# seconds (worker lost); a candidate waits CONSENT_TTL_HOURS for a human before it expires.
CLEAR_EVOLUTION_DIR = Path(env_str("CLEAR_EVOLUTION_DIR", str(VAR_DIR / "evolution"))).resolve()
CLEAR_EVOLUTION_HEARTBEAT_SECONDS = env_float("CLEAR_EVOLUTION_HEARTBEAT_SECONDS", 10.0)
CLEAR_EVOLUTION_STALE_SECONDS = env_float("CLEAR_EVOLUTION_STALE_SECONDS", 300.0)
CLEAR_EVOLUTION_CONSENT_TTL_HOURS = env_float("CLEAR_EVOLUTION_CONSENT_TTL_HOURS", 168.0)
CLEAR_EVOLUTION_STAGE_TIME_LIMIT_SECONDS = env_int("CLEAR_EVOLUTION_STAGE_TIME_LIMIT_SECONDS", 4 * 3600)
# Hot-swap releases of a target live in <CLEAR_EVOLUTION_RELEASES_DIR>/<target id> (releases/, current, state.json);
# blank: <CLEAR_EVOLUTION_DIR>/releases.
CLEAR_EVOLUTION_RELEASES_DIR = env_str("CLEAR_EVOLUTION_RELEASES_DIR", "")
# A clone, fetch or push of a target's repository (in the worker: registering a target, a job's prepare, its PR
# branch) is killed after this many seconds, so a silent git host holds a worker no longer than this.
CLEAR_GIT_TIMEOUT_SECONDS = env_float("CLEAR_GIT_TIMEOUT_SECONDS", 60.0)
# Closing the loop: after a promotion, a diagnosis run with at least FIXED_MIN_JUDGED judged traces of the fixed
# release (or later ones) in which the insight's frequency is under FIXED_BELOW marks it fixed and closes its ticket.
CLEAR_INSIGHT_FIXED_BELOW = env_float("CLEAR_INSIGHT_FIXED_BELOW", 0.02)
CLEAR_INSIGHT_FIXED_MIN_JUDGED = env_int("CLEAR_INSIGHT_FIXED_MIN_JUDGED", 20)
# Tickets: absolute links in bodies and exports (read outside Clear, so no request to take the host from) start with
# CLEAR_PUBLIC_URL (empty: the address scripts/demo.sh last served on, var/public_url, else http://127.0.0.1:8000),
# and so do the links of password-reset mails
# (empty: the address the request came to, its host checked against ALLOWED_HOSTS); an insight not associated with
# failure (lift interval includes 1) gets a ticket only when CLEAR_TICKET_NOT_ASSOCIATED is true.
CLEAR_PUBLIC_URL = env_str("CLEAR_PUBLIC_URL", "") or _demo_written("public_url")
CLEAR_TICKET_NOT_ASSOCIATED = env_bool("CLEAR_TICKET_NOT_ASSOCIATED", False)
CELERY_BEAT_SCHEDULE["evolution-janitor"] = {
    # Stale heartbeats → FAILED(worker_lost), lost prepare messages re-sent, orphaned worktrees removed, consent expiry.
    "task": "evolution.janitor", "schedule": env_float("CLEAR_EVOLUTION_JANITOR_SECONDS", 60.0),
}
CELERY_BEAT_SCHEDULE.update({
    # Re-sends webhook deliveries whose message was lost.
    "webhooks-sweep": {"task": "webhooks.sweep", "schedule": 60.0},
    # Deletes traces past their project's retention (retention_days, else CLEAR_RETENTION_DAYS), once a day.
    "traces-retention": {"task": "traces.enforce_retention", "schedule": 24 * 3600.0},
    # Creates the coming days' span partitions on Postgres (traces/services/partitions.py).
    "traces-span-partitions": {"task": "traces.span_partitions_ensure", "schedule": 3600.0},
})
