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
"""

from __future__ import annotations

import math
import time

from django.conf import settings
from rest_framework.throttling import BaseThrottle

from muse_experiments.infra.redis_client import redis_client

from . import auth_failures
from .auth import ApiClient

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
    """One script call per request (the address's failure check, ``INCR``, ``EXPIRE``, ``GET``):
    one round trip, atomic, and the simplest way to refuse before counting. Kept for that, not for
    its CPU (a little less than a pipeline's; bench/README.md, ``bench_stages.py``)."""

    def __init__(self) -> None:
        self.client = redis_client()
        self._hit = self.client.register_script(_HIT)

    def hit(self, key: str, previous: str, failures: str) -> tuple[int, int, float]:
        """``(current, previous, 0)`` counting this request; ``(0, 0, seconds)`` counting nothing
        when the address whose failure counter is ``failures`` is refused for that long."""
        current, previous_count, refused_ms = self._hit(
            keys=[key, previous, failures], args=[2 * WINDOW_S + 5, auth_failures.limit()]
        )
        return int(current), int(previous_count), int(refused_ms) / 1000

    def undo(self, key: str) -> None:
        self.client.decr(key)


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
        current, previous, refused_s = counter.hit(current_key, previous_key, failures_key)
        if refused_s:
            raise auth_failures.refusal(address, refused_s)
        if previous * (1 - elapsed) + current <= limit:
            return True
        counter.undo(current_key)
        self.wait_s = sliding_wait_s(
            limit=limit, current=current - 1, previous=previous, elapsed_fraction=elapsed
        )
        return False

    def wait(self) -> float | None:
        return None if self.wait_s is None else max(1.0, math.ceil(self.wait_s))
