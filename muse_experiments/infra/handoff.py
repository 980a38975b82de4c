"""Hand a finished piece of work to the web request waiting for it, over Redis (no Celery result
backend).

A worker publishes a JSON text under a name (:func:`handoff_queue`, in its own Redis pipeline):

* ``SET <name>:final`` — readable by anyone until it expires;
* ``RPUSH <name>:done`` — wakes the one request blocked on it (``BLPOP``).

The waiting request calls :func:`handoff_wait`: one ``BLPOP`` at a time, each at most
:data:`STEP_S` (below ``REDIS_SOCKET_TIMEOUT_S``), until the deadline; nothing stays subscribed or
registered in the web process when it returns, whether the work finished or not. Completions use
it through :mod:`routing.state.handoff` (``muse:job:<id>``), results snapshots through
:func:`analytics.services.results_wait` (``muse:results:<request id>``).

Redis errors (``redis.RedisError``) reach the caller, who decides what to read instead.
"""

from __future__ import annotations

import time

from .redis_client import redis_client

#: Longest single ``BLPOP`` (s); keep below ``REDIS_SOCKET_TIMEOUT_S``.
STEP_S = 1.0
#: Shortest ``BLPOP`` timeout (s): 0 would block for ever.
MIN_BLOCK_S = 0.01


def final_key(name: str) -> str:
    return f"{name}:final"


def done_key(name: str) -> str:
    return f"{name}:done"


def handoff_queue(pipe, name: str, payload_json: str, *, ttl_s: int) -> None:
    """Add the commands that publish ``payload_json`` under ``name`` to a Redis pipeline (both
    keys expire after ``ttl_s`` seconds)."""
    pipe.set(final_key(name), payload_json, ex=ttl_s)
    pipe.rpush(done_key(name), payload_json)
    pipe.expire(done_key(name), ttl_s)


def handoff_publish(name: str, payload_json: str, *, ttl_s: int) -> None:
    """Publish ``payload_json`` under ``name`` at once (one ``MULTI``)."""
    pipe = redis_client().pipeline(transaction=True)
    handoff_queue(pipe, name, payload_json, ttl_s=ttl_s)
    pipe.execute()


def handoff_final(name: str) -> str | None:
    """The payload published under ``name``, if any (not consumed)."""
    raw = redis_client().get(final_key(name))
    return raw.decode() if isinstance(raw, bytes) else raw


def handoff_wait(name: str, *, timeout_s: float) -> str | None:
    """Block up to ``timeout_s`` seconds for the payload published under ``name``; ``None`` on
    timeout.

    Takes the wake-up (``BLPOP``, at most :data:`STEP_S` at a time); a second waiter for the same
    name (an idempotent retry) finds the payload under ``final`` once the first took the wake-up.
    """
    client = redis_client()
    deadline = time.monotonic() + timeout_s
    while True:
        step = min(STEP_S, max(deadline - time.monotonic(), MIN_BLOCK_S))
        popped = client.blpop([done_key(name)], timeout=step)
        if popped:
            raw = popped[1]
            return raw.decode() if isinstance(raw, bytes) else raw
        if time.monotonic() >= deadline:
            return handoff_final(name)
