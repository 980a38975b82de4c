"""Per-API-key rate limits: ``ApiKey.rate_limit_per_minute`` requests per sliding minute.

Sliding-window counter (the approximation Cloudflare and others use): counts per fixed minute
window, and the estimate for "the last 60 s" is::

    estimate = previous_window_count * (1 - elapsed_fraction) + current_window_count

A request is admitted when ``estimate < limit`` after counting it; a refused request is not
counted. When refused, ``wait`` (seconds, DRF sends it as ``Retry-After``) is the time until the
estimate falls below the limit.

Storage: Redis (``INCR``/``EXPIRE`` on ``muse:rl:<key prefix>:<window>`` in one script, shared by
every process). When Redis is unreachable the request is refused 503 (the limit cannot be checked:
:class:`muse_experiments.api.errors.DependencyOutageMiddleware`). Staff sessions (admin,
dashboards) are not limited.

The same script reads the client address's failed-authentication counter
(:mod:`muse_experiments.api.auth_failures`): a valid key sent from an address refused for its failures
is refused (429), and nothing is counted, without a round trip of its own.

Deferred check (views with ``throttle_deferred = True``: the drop-in completion endpoints): the
counting script is *sent* when DRF checks throttles and its reply is *read* by :func:`settle`
just before the call is dispatched, so the round trip overlaps the request's parsing and
validation instead of adding to them. The synchronous check took 0.64 ms of a 1-client call's
~13 ms in the web process (timestamps inside ``bench/bench_stages.py`` runs, 2-core VM); sending
still costs most of that in the server, so the net gain is ~0.1-0.2 ms (send and read: 0.065-0.095
against 0.11-0.14 ms of CPU in a hot loop). The rule is the same; what changes is
the order of errors: a request over its limit whose body is also invalid gets the 400, and is
not counted. Every deferred check is settled: by the view before dispatching, or when the
response is finalised (:meth:`DeferredThrottleMixin.finalize_response`).
"""

from __future__ import annotations

import logging
import math
import time

from django.conf import settings
from rest_framework.exceptions import Throttled
from rest_framework.throttling import BaseThrottle

from muse_experiments.infra.redis_client import redis_client

from . import auth_failures
from .auth import ApiClient

log = logging.getLogger(__name__)

WINDOW_S = 60


def _counter_key(key_id: str, window: int) -> str:
    return f"muse:rl:{key_id}:{window}"


# KEYS: this window's counter, the previous window's, the client address's failed-authentication
# counter. ARGV: TTL (s), the failure limit. Returns {current, previous, 0}; for an address at its
# failure limit {0, 0, ms until it may try again}, and nothing is counted.
_HIT = """
local failures = tonumber(redis.call('GET', KEYS[3]) or '0')
if failures >= tonumber(ARGV[2]) then return {0, 0, math.max(redis.call('PTTL', KEYS[3]), 1)} end
local current = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[1])
return {current, tonumber(redis.call('GET', KEYS[2]) or '0'), 0}
"""


class _RedisCounter:
    """One script call per request (``INCR``, ``EXPIRE``, ``GET``). The same three commands in a
    pipeline were 14% of a drop-in request's CPU inside Django (``bench/bench_stages.py
    --profile``); the script costs the client 0.099 ms of CPU against the pipeline's 0.136 ms
    (3,000 calls each, measured here)."""

    def __init__(self) -> None:
        self.client = redis_client()
        self._hit = self.client.register_script(_HIT)

    def hit(self, key: str, previous: str, failures: str) -> tuple[int, int, float]:
        """``(current, previous, 0)`` counting this request; ``(0, 0, seconds)`` counting nothing
        when the address whose failure counter is ``failures`` is refused for that long."""
        reply = self._hit(keys=[key, previous, failures], args=[2 * WINDOW_S + 5, auth_failures.limit()])
        return _counts(reply)

    def undo(self, key: str) -> None:
        self.client.decr(key)

    def send_hit(self, key: str, previous: str, failures: str):
        """Send :meth:`hit`'s script on a connection taken from the pool and return that
        connection, whose reply :meth:`read_hit` reads (and then gives the connection back).
        Raises redis-py's connection errors (the connection is given back)."""
        pool = self.client.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_command(
                "EVAL", _HIT, 3, key, previous, failures, 2 * WINDOW_S + 5, auth_failures.limit()
            )
        except BaseException:
            conn.disconnect()
            pool.release(conn)
            raise
        return conn

    def read_hit(self, conn) -> tuple[int, int, float]:
        """:meth:`hit`'s answer, replied on ``conn`` (from :meth:`send_hit`)."""
        try:
            reply = conn.read_response()
        except BaseException:
            conn.disconnect()
            raise
        finally:
            self.client.connection_pool.release(conn)
        return _counts(reply)


def _counts(reply) -> tuple[int, int, float]:
    current, previous, refused_ms = reply
    return int(current), int(previous), int(refused_ms) / 1000


_counters: dict[str, _RedisCounter] = {}


def _counter() -> _RedisCounter:
    url = settings.REDIS_URL
    if url not in _counters:
        _counters[url] = _RedisCounter()
    return _counters[url]


def sliding_wait_s(*, limit: int, current: int, previous: int, elapsed_fraction: float) -> float:
    """Seconds until one more request fits: ``previous * (1 - f) + current + 1 <= limit``.

    ``current``/``previous``: admitted requests in this and the previous window; ``f`` the elapsed
    fraction of this window. If it cannot fit in this window, the next window's start turns
    ``current`` into the previous count.
    """
    f = elapsed_fraction
    if previous * (1 - f) + current + 1 <= limit:
        return 0.0
    if current + 1 <= limit:  # fits later in this window, as the previous window's weight fades
        return (1 - (limit - current - 1) / previous - f) * WINDOW_S
    g = max(0.0, 1 - (limit - 1) / current) if limit >= 1 else 1.0
    return (1 - f + g) * WINDOW_S


class ApiKeyRateThrottle(BaseThrottle):
    """DRF throttle: each API key gets ``rate_limit_per_minute`` requests per sliding minute."""

    def __init__(self) -> None:
        self.wait_s: float | None = None

    def allow_request(self, request, view) -> bool:
        user = getattr(request, "user", None)
        if not isinstance(user, ApiClient):
            return True
        key = user.key
        limit = key.rate_limit_per_minute
        now = time.time()
        window = int(now // WINDOW_S)
        elapsed = (now % WINDOW_S) / WINDOW_S
        counter = _counter()
        current_key = _counter_key(key.prefix, window)
        previous_key = _counter_key(key.prefix, window - 1)
        address = auth_failures.client_address(request)
        failures_key = auth_failures.counter_key(address)
        if getattr(view, "throttle_deferred", False):
            conn = counter.send_hit(current_key, previous_key, failures_key)
            request._muse_throttle = _Deferred(self, counter, conn, current_key, limit, elapsed, address)
            return True
        current, previous, refused_s = counter.hit(current_key, previous_key, failures_key)
        if refused_s:
            raise auth_failures.refusal(address, refused_s)
        return self._admit(counter, current_key, limit, elapsed, current, previous)

    def _admit(self, counter, key: str, limit: int, elapsed: float, current: int, previous: int) -> bool:
        if previous * (1 - elapsed) + current <= limit:
            return True
        counter.undo(key)
        self.wait_s = sliding_wait_s(
            limit=limit, current=current - 1, previous=previous, elapsed_fraction=elapsed
        )
        return False

    def wait(self) -> float | None:
        return None if self.wait_s is None else max(1.0, math.ceil(self.wait_s))


class _Deferred:
    """A rate-limit check sent to Redis whose reply :func:`settle` reads."""

    __slots__ = ("throttle", "counter", "conn", "key", "limit", "elapsed", "address")

    def __init__(self, throttle, counter, conn, key, limit, elapsed, address) -> None:
        self.throttle, self.counter, self.conn = throttle, counter, conn
        self.key, self.limit, self.elapsed, self.address = key, limit, elapsed, address


def settle(request, *, raise_throttled: bool = True) -> None:
    """Finish the request's deferred rate-limit check, if it has one (once; later calls do
    nothing). Over the limit, or from an address refused for its failed authentications, the
    request is not counted and, with ``raise_throttled``, DRF's ``Throttled`` is raised with the
    wait in seconds (the view answers 429 with ``Retry-After``). Raises redis-py's connection
    errors (Redis down: the caller gets a 503)."""
    pending = getattr(request, "_muse_throttle", None)
    if pending is None:
        return
    request._muse_throttle = None
    current, previous, refused_s = pending.counter.read_hit(pending.conn)
    if refused_s:
        refused = auth_failures.refusal(pending.address, refused_s)
        if raise_throttled:
            raise refused
        return
    throttle = pending.throttle
    if throttle._admit(pending.counter, pending.key, pending.limit, pending.elapsed, current, previous):
        return
    if raise_throttled:
        raise Throttled(wait=throttle.wait())


class DeferredThrottleMixin:
    """For a DRF view that calls :func:`settle` itself before it dispatches work: its rate-limit
    check's round trip overlaps the request's parsing and validation. A check the view did not
    settle is settled when the response is finalised: an error response stands (and an
    over-limit request is not counted); a success the view answered without settling becomes
    the 429 it should have been, so the limit holds whatever a view forgets."""

    throttle_deferred = True

    def finalize_response(self, request, response, *args, **kwargs):
        if getattr(request, "_muse_throttle", None) is not None:
            try:
                settle(request, raise_throttled=response.status_code < 400)
            except Throttled as exc:
                response = self.handle_exception(exc)
            except Exception:  # noqa: BLE001 - the error answer stands; only its count is lost
                log.warning("could not settle a deferred rate-limit check", exc_info=True)
        return super().finalize_response(request, response, *args, **kwargs)
