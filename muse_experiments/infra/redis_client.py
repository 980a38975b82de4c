"""The one Redis client factory, and what each part of the platform does when Redis is unreachable.

Every process talks to Redis through :func:`redis_client`: one ``redis.Redis`` per URL and
process, whose connection pool the threads share (redis-py reopens it after a fork). The URL is
``settings.REDIS_URL`` unless a caller names another (the reasoning store's
``REASONING_STORE_URL``). Without ``REDIS_URL`` it is the private server of
:mod:`muse_experiments.infra.private_redis`. Celery's broker and result store are on the same URL
(:func:`broker_url` spells it as kombu does).

When Redis cannot be reached
----------------------------
Production rules, one line each; the module named owns the rule and logs it. A guard *fails
open* (lets calls through) so that a broken store never takes healthy traffic down; what must
not be lost falls back to the database.

============================================  =================================================================
where                                         when Redis is unreachable
============================================  =================================================================
circuit breaker (routing.guards.circuit)      every call allowed; Redis skipped for 5 s
concurrency (routing.guards.concurrency)      the slot granted (no limit); Redis skipped for 5 s
cooling (routing.guards.cooling)              the endpoint counts as not cooling
config version (config_version)               read from the database row
sticky cache (sticky)                         exposures read from the database; Redis skipped for 5 s
job claim (routing.state.claims)              the job is claimed through its database row
claim read (routing.jobs)                     a deferred job's row is written ``queued`` (its claim decides
                                              later); ``GET /api/v1/completions/{id}`` of an unwritten job: 404
reaper (routing.jobs)                         Redis claims are reaped on the next tick; rows as usual
worker heartbeat (routing.worker.leases)      not set, dead workers not seen: leases and the requeue after
                                              ``COMPLETION_REQUEUE_AFTER_S`` are the bounds
job record at publish (routing.web.dispatch)  not written: the job is known to its waiting request, which
                                              writes its row before handing its id out
attempt note (routing.pipeline.attempts)      not written: a call dying with its worker leaves no attempt
call records (routing.pipeline.recording)     written to the database at once instead of buffered
final state (routing.state.handoff)           not handed over: the waiting request re-reads the job row
wait for a job (routing.web.dispatch)         the waiting request polls the job row
cancel flag (routing.web.relay)               set on the job row, where a stream's runner reads it; the cancel
                                              watcher cuts no non-streamed call off until Redis answers
reasoning (routing.reasoning_store)           load: none (the call goes out without it); save: dropped;
                                              session end: 503
rate limit (throttling)                       the request is refused 503 (the limit cannot be checked)
failed auth (auth_failures)                   failures not counted, nobody refused; Redis skipped for 5 s
task publish (routing.web.dispatch)           retried (``CELERY_TASK_PUBLISH_RETRY_POLICY``), then the job is
                                              failed ``broker_unavailable`` and the caller gets a 503
============================================  =================================================================
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from django.conf import settings

_lock = threading.Lock()
_clients: dict[str, Any] = {}


def redis_client(url: str | None = None):
    """The process's ``redis.Redis`` for ``url`` (default ``settings.REDIS_URL``), made once.

    Connection and socket timeouts: ``REDIS_CONNECT_TIMEOUT_S`` and ``REDIS_SOCKET_TIMEOUT_S``
    (keep the latter above the longest blocking read, 1 s: ``BLPOP``, ``XREAD BLOCK``); idle
    connections are checked before reuse after 30 s. Commands raise ``redis.RedisError``
    subclasses (``ConnectionError`` when the server is down).
    """
    url = url or settings.REDIS_URL
    client = _clients.get(url)
    if client is not None:
        return client
    import redis

    with _lock:
        if url not in _clients:
            _clients[url] = redis.Redis.from_url(
                url,
                socket_connect_timeout=settings.REDIS_CONNECT_TIMEOUT_S,
                socket_timeout=settings.REDIS_SOCKET_TIMEOUT_S,
                health_check_interval=30,
            )
        return _clients[url]


def broker_url(url: str) -> str:
    """``url`` as kombu and Celery spell it: redis-py's ``unix:///path?db=N`` is
    ``redis+socket:///path?virtual_host=N``; any other URL is returned as it is."""
    if not url.startswith("unix://"):
        return url
    parts = urlsplit(url)
    db = parse_qs(parts.query).get("db", [""])[0]
    return f"redis+socket://{parts.path}" + (f"?{urlencode({'virtual_host': db})}" if db else "")


def client_url(url: str) -> str:
    """The inverse of :func:`broker_url`: a ``redis+socket://`` URL as redis-py spells it."""
    if not url.startswith("redis+socket://"):
        return url
    parts = urlsplit(url)
    db = parse_qs(parts.query).get("virtual_host", [""])[0]
    return f"unix://{parts.path}" + (f"?{urlencode({'db': db})}" if db else "")


def xdist_worker_url(url: str, worker: str) -> str:
    """The Redis database a pytest-xdist process ``worker`` (``gw0``, ``gw1``, …) uses when the test
    session is given one ``redis://host:port/N`` URL: ``gw0`` keeps N, ``gwK`` takes N − K (mod 16),
    so parallel processes never purge each other's queues or claims. Other URLs are returned as
    they are. Raises ``ValueError`` for a worker name without a number."""
    if not worker or not url.startswith(("redis://", "rediss://")):
        return url
    index = int(worker.removeprefix("gw"))
    parts = urlsplit(url)
    db = int(parts.path.strip("/") or 0)
    return parts._replace(path=f"/{(db - index) % 16}").geturl()
