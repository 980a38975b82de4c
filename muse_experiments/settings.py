"""Django settings for Muse Experiments, read from the environment (django-environ).

Defaults are for a laptop: SQLite in ``var/``, a private Redis server on a Unix socket under
``var/`` (:mod:`muse_experiments.infra.private_redis`) and simulated upstreams. Production sets
``DATABASE_URL``, ``REDIS_URL``, ``SECRET_KEY`` and ``ALLOWED_HOSTS``; a missing ``SECRET_KEY``
outside DEBUG fails loudly at start-up.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import environ
from django.core.exceptions import ImproperlyConfigured

from muse_experiments.infra import private_redis
from muse_experiments.infra.redis_client import broker_url, xdist_worker_url

BASE_DIR = Path(__file__).resolve().parent.parent


class _Env(environ.FileAwareEnv):
    """FileAwareEnv (every variable may instead name a file holding it: SECRET_KEY_FILE,
    DATABASE_URL_FILE …) that remembers the names it was asked for: SETTINGS_ENV_VARS below, which
    a provider credential may never be (routing.guards.credentials)."""

    def __init__(self, **scheme):
        super().__init__(**scheme)
        self.names_read: set[str] = set()

    def get_value(self, var, *args, **kwargs):
        self.names_read.add(var)
        return super().get_value(var, *args, **kwargs)


env = _Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

TESTING = "pytest" in sys.modules
# Local state (SQLite file, private Redis socket, logs); the test suite keeps its own apart.
VAR_DIR = Path(env.str("MUSE_VAR_DIR", default=str(BASE_DIR / "var" / ("test" if TESTING else ""))))
VAR_DIR.mkdir(parents=True, exist_ok=True)
DEBUG = env.bool("DJANGO_DEBUG", default=False)

SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not (DEBUG or TESTING):
        raise ImproperlyConfigured("SECRET_KEY must be set when DJANGO_DEBUG is off.")
    SECRET_KEY = "insecure-development-only-key-never-used-in-production"

ALLOWED_HOSTS = env.list(
    "ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"] if DEBUG or TESTING else []
)
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI / Redoc assets from our static files (works offline)
    "django_celery_beat",
    "muse_experiments.experiments",  # label "muse_experiments"
    "routing",
    "routing.transcripts",
    "analytics",
]

MIDDLEWARE = [
    "muse_experiments.api.base.ChunkedBodyMiddleware",  # a chunked body reaches the parser (bounded)
    "muse_experiments.api.base.DrainRefusedBodyMiddleware",  # a 413 leaves keep-alive usable
    "muse_experiments.infra.observability.ObservabilityMiddleware",  # request id, latency, access log
    "muse_experiments.api.errors.DependencyOutageMiddleware",  # database/broker/Redis down: JSON 503
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",  # static files (admin CSS) under gunicorn
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",  # ALLOWED_HOSTS (a foreign Host header: 400)
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "muse_experiments.urls"
WSGI_APPLICATION = "muse_experiments.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'muse.sqlite3'}")}
SQLITE = DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3"
if SQLITE:
    # Web server and worker share the file: WAL lets readers run beside the writer, IMMEDIATE
    # transactions take the write lock up front instead of failing on upgrade. synchronous=NORMAL
    # (SQLite's recommendation for WAL): a commit no longer waits for an fsync of the WAL, which
    # every writer queued behind it paid too; the database stays consistent, and only the last
    # commits before a power loss (not a process crash) can be rolled back.
    # ...and writers queue for the write lock instead of sleeping in SQLite's busy handler
    # (muse_experiments.infra.sqlite_backend).
    DATABASES["default"]["ENGINE"] = "muse_experiments.infra.sqlite_backend"
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
        }
    )
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A dead or restarting server fails a connection attempt in seconds instead of hanging a worker.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
        "connect_timeout", env.int("DB_CONNECT_TIMEOUT_S", default=5)
    )
# Persistent connections (s; 0 = one per request/task) are checked before reuse, so a restarted
# database server costs one failed check, not a failed request (README "Deployment").
# SQLite keeps each thread's connection (opening one costs its pragmas and function registrations
# on every request and task, for nothing: there is no server to restart).
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE_S", default=600 if SQLITE else 0)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if (
    DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
    and env.bool("DATABASE_POOL", default=not TESTING)
    and not DATABASES["default"]["CONN_MAX_AGE"]
):
    # A per-process connection pool (psycopg_pool): a request or task borrows a connection and
    # gives it back, instead of opening a new PostgreSQL backend each time (a fork on the server,
    # several ms). At most DATABASE_POOL_MAX connections per process. (Django's pool and
    # persistent connections exclude each other: DB_CONN_MAX_AGE_S > 0 turns the pool off.)
    DATABASES["default"]["OPTIONS"]["pool"] = {
        "min_size": env.int("DATABASE_POOL_MIN", default=2),
        "max_size": env.int("DATABASE_POOL_MAX", default=12),
        "timeout": env.float("DATABASE_POOL_TIMEOUT_S", default=10.0),
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
# The reporting time zone: dates on the admin and the dashboards are shown in it, with the zone
# written next to them (FORMAT_MODULE_PATH formats end in "T"). Stored times stay UTC (USE_TZ).
REPORTING_TIME_ZONE = env.str("MUSE_REPORTING_TIME_ZONE", default="UTC")
try:
    ZoneInfo(REPORTING_TIME_ZONE)
except (ZoneInfoNotFoundError, ValueError) as exc:
    raise ImproperlyConfigured(
        f"MUSE_REPORTING_TIME_ZONE={REPORTING_TIME_ZONE!r} is not an IANA zone."
    ) from exc
TIME_ZONE = REPORTING_TIME_ZONE
FORMAT_MODULE_PATH = ["muse_experiments.formats"]
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise serves it (manage.py collectstatic)

# Security: secure cookies whenever we are not on a developer's laptop.
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=not DEBUG and not TESTING)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=not DEBUG and not TESTING)
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("MAX_REQUEST_BYTES", default=2 * 1024 * 1024)
LOGIN_URL = "/admin/login/"

# --- Redis / Celery -------------------------------------------------------------------------
# One runtime: Redis carries tasks, claims, hand-offs, streams, buffered records and shared guard
# state. REDIS_URL unset means a private server of this checkout's own on a Unix socket under
# var/ (muse_experiments.infra.private_redis; the demo, the test session and the Makefile start it); the
# test suite's is apart from the demo's (var/test/, one per pytest-xdist process); a given REDIS_URL
# gives each pytest-xdist process a database of its own.
_REDIS_URL = env.str("REDIS_URL", default="")
_XDIST = os.environ.get("PYTEST_XDIST_WORKER", "") if TESTING else ""
PRIVATE_REDIS_DIR = "" if _REDIS_URL else str(VAR_DIR / (f"redis-{_XDIST}" if _XDIST else "redis"))
REDIS_URL = xdist_worker_url(_REDIS_URL, _XDIST) or private_redis.url(PRIVATE_REDIS_DIR)
# Every client comes from muse_experiments.infra.redis_client; keep the socket timeout above the longest
# blocking read (1 s).
REDIS_CONNECT_TIMEOUT_S = env.float("REDIS_CONNECT_TIMEOUT_S", default=1.0)
REDIS_SOCKET_TIMEOUT_S = env.float("REDIS_SOCKET_TIMEOUT_S", default=5.0)

CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=broker_url(REDIS_URL))
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default=broker_url(REDIS_URL))
# Seconds before an unacknowledged task (its worker died) is redelivered. Keep every task
# countdown/ETA below it, or the task would be delivered twice.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT_S", default=3600),
    # how often a worker looks for unacknowledged messages past the timeout (kombu: every
    # interval * throttle seconds)
    "unacked_restore_interval": env.int("CELERY_UNACKED_RESTORE_INTERVAL_S", default=10),
    "unacked_restore_throttle": env.int("CELERY_UNACKED_RESTORE_THROTTLE", default=10),
    # a completion task is recorded as unacknowledged only if it still runs this many seconds
    # after delivery: its job's claim is its record (muse_experiments.infra.broker.QoS); 0 = kombu's
    # record at delivery
    "unacked_record_after_s": {"completions": env.float("CELERY_COMPLETION_RECORD_AFTER_S", default=1.0)},
}
CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}

# Publishing retries ride out a broker restart of a few seconds before the request fails (503).
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 6,
    "interval_start": 0.2,
    "interval_step": 0.5,
    "interval_max": 1.0,
}
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_RESULT_EXPIRES = 3600
CELERY_TASK_DEFAULT_QUEUE = "completions"
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
# Every task goes to the queue of its purpose (muse_experiments.infra.queues.Queue).
CELERY_TASK_ROUTES = {
    "routing.*": {"queue": "completions"},
    "analytics.*": {"queue": "analytics"},
    "maintenance.*": {"queue": "maintenance"},
    "shadow.*": {"queue": "shadow"},
}
# Periodic maintenance (synced into django-celery-beat's tables by `celery beat`).
CELERY_BEAT_SCHEDULE = {
    "reap-expired-completion-jobs": {
        "task": "maintenance.reap_expired_completion_jobs",
        "schedule": env.float("COMPLETION_REAP_INTERVAL_S", default=30.0),  # see below
        "options": {"queue": "maintenance", "expires": 60},
    },
    # a safety net behind the drainer process (manage.py drain_records): empty buffer, 3 Redis calls
    "drain-call-records": {
        "task": "maintenance.drain_call_records",
        "schedule": 15.0,
        "options": {"queue": "maintenance", "expires": 30},
    },
    # progressive rollouts: guardrails tested, breach → 0 % within one interval (analytics.rollouts)
    "check-rollouts": {
        "task": "analytics.check_rollouts",
        "schedule": env.float("ROLLOUT_CHECK_INTERVAL_S", default=300.0),
        "options": {"queue": "analytics", "expires": 240},
    },
    # bandits: each running bandit updates when its update interval is due (one update per slot)
    "bandit-updates": {
        "task": "analytics.bandit_updates",
        "schedule": env.float("BANDIT_CHECK_INTERVAL_S", default=60.0),
        "options": {"queue": "analytics", "expires": 120},
    },
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Seconds in a minute of a bandit's schedule (its update_every_minutes and explore_minutes): 60.
# `make demo` shortens it (with BANDIT_CHECK_INTERVAL_S) so a bandit updates several times in its
# run, through the same beat task and slots; nothing else reads it.
BANDIT_MINUTE_S = env.float("BANDIT_MINUTE_S", default=60.0)
if not BANDIT_MINUTE_S > 0:
    raise ImproperlyConfigured("BANDIT_MINUTE_S must be a positive number of seconds.")

# --- REST API ------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "muse_experiments.api.auth.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "muse_experiments.api.schema.MuseAutoSchema",
    "DEFAULT_PARSER_CLASSES": ["muse_experiments.api.base.BoundedJSONParser"],
    "DEFAULT_THROTTLE_CLASSES": ["muse_experiments.api.throttling.ApiKeyRateThrottle"],
    "EXCEPTION_HANDLER": "muse_experiments.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
}
# Failed API-key authentications (muse_experiments/api/auth_failures.py): from AUTH_FAILURE_LIMIT failures
# within AUTH_FAILURE_WINDOW_S seconds of an address's first one, the address is refused (429 with
# Retry-After) for the rest of that window, whatever key it sends.
AUTH_FAILURE_LIMIT = env.int("AUTH_FAILURE_LIMIT", default=20)
AUTH_FAILURE_WINDOW_S = env.int("AUTH_FAILURE_WINDOW_S", default=60)
if AUTH_FAILURE_LIMIT < 1 or AUTH_FAILURE_WINDOW_S < 1:
    raise ImproperlyConfigured("AUTH_FAILURE_LIMIT and AUTH_FAILURE_WINDOW_S must be at least 1.")
# Your own reverse proxies or load balancers (addresses or networks, comma-separated). Only a request
# whose peer is one of them has its client address read from X-Forwarded-For (the rightmost address
# that is not a trusted proxy); empty (the default): the peer's address, X-Forwarded-For ignored.
# Never list a network clients can connect from: they could then choose their address.
try:
    TRUSTED_PROXIES = tuple(
        ipaddress.ip_network(n, strict=False) for n in env.list("TRUSTED_PROXIES", default=[])
    )
except ValueError as exc:
    raise ImproperlyConfigured(f"TRUSTED_PROXIES: {exc}") from None

SPECTACULAR_SETTINGS = {
    "TITLE": "Muse Experiments API",
    "DESCRIPTION": "Routed LLM completions under A/B experiments, outcome events and results.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Platform ------------------------------------------------------------------------------
# The metric names experiments may use (primary and guardrails), injected as a dotted path so the
# experiments app never imports analytics; empty accepts any name.
METRIC_NAMES_LOOKUP = "analytics.selectors.metric_names"
# Why a bandit cannot optimise a metric (a ratio or a quantile), or None; injected the same way.
BANDIT_METRIC_CHECK = "analytics.bandits.bandit_metric_problem"
# How long POST /api/v1/completions waits for the worker before answering 202 with a job URL.
COMPLETION_SYNC_WAIT_S = env.float("COMPLETION_SYNC_WAIT_S", default=30.0)
# Shadow tests (routing.shadow): most shadow calls waiting on the shadow queue; beyond it new ones
# are dropped and counted, never delaying a primary call.
SHADOW_MAX_BACKLOG = env.int("SHADOW_MAX_BACKLOG", default=1000)
# A shadow call waits until at least this share (0-1) of the host's CPU was idle over the last 0.25 s
# (muse_experiments.infra.idle_cpu), at most SHADOW_MAX_WAIT_S seconds, else it is dropped and counted
# (reason "busy"). 0 (the default): no wait, for shadow workers on hosts of their own; the Procfile's
# shadow worker, beside the primaries, sets it.
SHADOW_MIN_IDLE_CPU = env.float("SHADOW_MIN_IDLE_CPU", default=0.0)
SHADOW_MAX_WAIT_S = env.float("SHADOW_MAX_WAIT_S", default=240.0)
# A Celery worker that runs only on CPU nothing else wants (Linux SCHED_IDLE, nice 19, every thread:
# muse_experiments.infra.runtime.run_at_idle_priority): the Procfile's shadow worker sets it.
WORKER_IDLE_PRIORITY = env.bool("WORKER_IDLE_PRIORITY", default=False)
# Shadow pairs written in batches (routing.shadow.pairs): every SHADOW_PAIR_FLUSH_S seconds (0: each
# pair at once, the default; the Procfile's shadow worker batches) or once SHADOW_PAIR_BATCH wait.
SHADOW_PAIR_FLUSH_S = env.float("SHADOW_PAIR_FLUSH_S", default=0.0)
SHADOW_PAIR_BATCH = env.int("SHADOW_PAIR_BATCH", default=200)
# Seconds a session's encrypted provider reasoning stays in the server-side store after its last
# turn (routing.reasoning_store).
REASONING_SESSION_TTL_S = env.int("REASONING_SESSION_TTL_S", default=3600)
# The Redis of that store (default REDIS_URL). Production may give it a dedicated instance without
# persistence (no RDB/AOF), so the blobs never reach a disk while the main Redis persists its
# queues and buffered records; the private server keeps nothing on disk.
REASONING_STORE_URL = env.str("REASONING_STORE_URL", default="") or REDIS_URL
# A running job's lease (s), renewed by its worker every third of it; a lapsed lease means the
# worker died and the job is failed ("worker_lost") by the next redelivery or the reaper.
COMPLETION_LEASE_S = env.float("COMPLETION_LEASE_S", default=60.0)
# A job still queued (never claimed) this long (s) has its task published again (routing.web.dispatch).
COMPLETION_REQUEUE_AFTER_S = env.float("COMPLETION_REQUEUE_AFTER_S", default=120.0)
# How often (s) workers (and beat) fail running jobs whose lease lapsed.
COMPLETION_REAP_INTERVAL_S = env.float("COMPLETION_REAP_INTERVAL_S", default=30.0)
# A worker process's heartbeat (s): renewed every fifth of it; once it expires, the worker is
# dead: its running jobs are failed "worker_lost" (their attempts recorded lost, cost unknown) and
# the jobs published meanwhile are published again, by the next worker to beat (routing.worker.leases).
WORKER_HEARTBEAT_TTL_S = env.float("WORKER_HEARTBEAT_TTL_S", default=5.0)
# Write the records of each call (exposure, call record, attempts, transcript turn) behind the
# answer: buffered in Redis, drained in bulk by a drainer (routing.worker.drainer). The test process
# writes them synchronously (no drainer runs in it, and each test's database transaction is rolled
# back) unless a test turns this on; the worker processes tests start write behind.
RECORDS_WRITE_BEHIND = env.bool("RECORDS_WRITE_BEHIND", default=not TESTING)
# Whether each worker process runs a drainer thread (the Procfile turns it off: its drainer process,
# manage.py drain_records, drains; beat's maintenance.drain_call_records is the safety net).
RECORDS_DRAINER = env.bool("RECORDS_DRAINER", default=True)
# Most buffered call records one drain writes in one transaction (routing.worker.drainer).
RECORDS_DRAIN_BATCH = env.int("RECORDS_DRAIN_BATCH", default=500)
# How long (ms) a worker's drainer waits after a batch so the next one gathers the calls answered
# meanwhile (fewer, larger transactions; adds at most this much to the records' lag).
RECORDS_DRAIN_LINGER_MS = env.int("RECORDS_DRAIN_LINGER_MS", default=200)
# How long a streamed job's events stay in its Redis stream (s), for late subscribers.
COMPLETION_STREAM_TTL_S = env.int("COMPLETION_STREAM_TTL_S", default=3600)
# How long a drop-in (OpenAI/Anthropic-compatible) non-streaming call waits before a 504.
DROPIN_WAIT_S = env.float("DROPIN_WAIT_S", default=300.0)
# How often (s) a process re-checks the configuration version; bounds propagation time.
CONFIG_REFRESH_INTERVAL_S = env.float("CONFIG_REFRESH_INTERVAL_S", default=0.5)
# The model whose row 1 holds the configuration version in the database, which readers fall back to
# when Redis is unreachable (muse_experiments.infra.config_version).
CONFIG_VERSION_MODEL = "muse_experiments.PlatformConfig"

# --- Routing resilience (routing/pipeline/retry.py, routing/guards/) -------------------------
# Retries per endpoint after the first attempt, for retryable failures (429, 5xx, 529, timeouts,
# resets, malformed responses). Backoff: full jitter, uniform(0, min(cap, base * 2**retry)) ms.
ROUTING_MAX_RETRIES = env.int("ROUTING_MAX_RETRIES", default=2)
ROUTING_BACKOFF_BASE_MS = env.float("ROUTING_BACKOFF_BASE_MS", default=200.0)
ROUTING_BACKOFF_CAP_MS = env.float("ROUTING_BACKOFF_CAP_MS", default=5000.0)
# An upstream's retry-after is honoured up to this many seconds (then we wait the cap).
ROUTING_RETRY_AFTER_CAP_S = env.float("ROUTING_RETRY_AFTER_CAP_S", default=10.0)
# Circuit breaker per endpoint: open after N failures within the window; after the cooldown one
# probe call is let through (half-open); its success closes the circuit, its failure re-opens it.
ROUTING_CIRCUIT_FAILURES = env.int("ROUTING_CIRCUIT_FAILURES", default=5)
ROUTING_CIRCUIT_WINDOW_S = env.float("ROUTING_CIRCUIT_WINDOW_S", default=30.0)
ROUTING_CIRCUIT_COOLDOWN_S = env.float("ROUTING_CIRCUIT_COOLDOWN_S", default=30.0)
# A concurrency slot held by a crashed process expires after this many seconds.
ROUTING_CONCURRENCY_LEASE_S = env.float("ROUTING_CONCURRENCY_LEASE_S", default=330.0)
# Emergency override: true turns every external provider off regardless of the database.
MUSE_KILL_EXTERNAL = env.bool("MUSE_KILL_EXTERNAL", default=False)
# How the experiments app (which may not import routing) reads the kill switch of an experiment or
# variant: a function (experiment key, variant key) -> {"scope", "target", "reason", "since"} | None.
MUSE_ENROLMENT_KILL_LOOKUP = "routing.guards.killswitch.enrolment_kill_info"

# --- Provider credentials bound to their hosts (routing/guards/credentials.py) ----------------------
# Which environment variables a provider may name as its credential, and the hosts each may be
# sent to: "host" (port 443), "host:port", or "*.domain" (exactly one label in front), always
# over https. A catalogue row outside it is a form error, and the router refuses to send the
# credential. PROVIDER_CREDENTIAL_HOSTS replaces the whole default, in django-environ's dict
# format: "ANTHROPIC_API_KEY=api.anthropic.com;AZURE_OPENAI_API_KEY=*.openai.azure.com,eu.example.com:8443".
# Django's and this platform's own variables can never be bound (refused at start-up).
# The native Avocado service has no public host: production sets AVOCADO_HOSTS (e.g.
# "avocado.internal.example.com"); unset, its key goes only to the simulated upstreams.
AVOCADO_HOSTS = env.list("AVOCADO_HOSTS", default=[])
if any(e.count("=") != 1 for e in env.str("PROVIDER_CREDENTIAL_HOSTS", default="").split(";") if e):
    raise ImproperlyConfigured("PROVIDER_CREDENTIAL_HOSTS: use NAME=host,host;NAME=host (one '=' per entry).")
PROVIDER_CREDENTIAL_HOSTS = env.dict(
    "PROVIDER_CREDENTIAL_HOSTS",
    cast={"value": list},
    default={
        "AVOCADO_API_KEY": AVOCADO_HOSTS,
        "AZURE_OPENAI_API_KEY": ["*.openai.azure.com", "*.cognitiveservices.azure.com"],
        "OPENAI_API_KEY": ["api.openai.com"],
        "ANTHROPIC_API_KEY": ["api.anthropic.com"],
    },
)
# The simulated upstreams (routing/simulated/) as loopback host:port: every bound
# credential may go there, over http. `make demo`, `seed_catalogue --simulated-base-url` and the
# tests need it; in debug it defaults to `make upstreams`' address.
SIMULATED_UPSTREAMS = env.list("SIMULATED_UPSTREAMS", default=["127.0.0.1:8900"] if DEBUG else [])

# --- Observability (muse_experiments/infra/logs.py, metrics.py, health.py) -------------------------
# json: one JSON object per line with request_id / job_id (production default); plain: for a terminal.
# Garbage collection thresholds applied after start-up, with start-up's objects frozen
# (muse_experiments.infra.runtime.tune_gc); empty = the interpreter's defaults.
GC_THRESHOLD = env.list("GC_THRESHOLD", cast=int, default=[] if TESTING else [50_000, 50, 100])
LOG_FORMAT = env.str("LOG_FORMAT", default="plain" if DEBUG or TESTING else "json")
# /metrics requires "Authorization: Bearer <token>" when set (else expose it on an internal network only).
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
METRICS_BROKER_TIMEOUT_S = env.float("METRICS_BROKER_TIMEOUT_S", default=1.0)
# Scrape-time collectors (dotted paths), so the experiments app never imports routing.
METRICS_COLLECTORS = [
    "muse_experiments.infra.metrics.QueueDepthCollector",
    "routing.metrics.RoutingStateCollector",
]
READYZ_TIMEOUT_S = env.float("READYZ_TIMEOUT_S", default=2.0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {
            "()": "muse_experiments.infra.logs.ContextFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
        "json": {"()": "muse_experiments.infra.logs.JsonFormatter"},
    },
    "filters": {"not_gateway_status": {"()": "muse_experiments.infra.logs.NotGatewayStatus"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        # a 502/503/504 is an answer about an upstream or a dependency, not a server error
        "django.request": {"filters": ["not_gateway_status"]},
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
        # The SDKs log whole request bodies at DEBUG (Anthropic: "Request options", with thinking
        # signatures): never below INFO, so encrypted reasoning cannot reach the logs. Do not set
        # ANTHROPIC_LOG/OPENAI_LOG=debug in production either.
        "anthropic": {"level": "INFO"},
        "openai": {"level": "INFO"},
        # one line per request (muse_experiments.infra.observability); ACCESS_LOG=false silences it
        "muse.access": {"level": "INFO" if env.bool("ACCESS_LOG", default=True) else "WARNING"},
        # Celery's "Task … received" line is formatted and written by the worker's consumer thread
        # before the task reaches a pool thread, on every call's critical path; the "succeeded" (or
        # failed) line after it carries the same task id, job id and request id. TASK_RECEIVED_LOG=true
        # brings it back (bench/bench_stages.py measures the difference).
        "celery.worker.strategy": {
            "level": "INFO" if env.bool("TASK_RECEIVED_LOG", default=False) else "WARNING"
        },
    },
}

#: Every environment variable the settings read (some only in some configurations, so
#: routing.guards.credentials also keeps a fixed list): never a provider credential.
SETTINGS_ENV_VARS = frozenset(env.names_read)
