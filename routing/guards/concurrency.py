"""Cap on concurrent calls per model endpoint (``ModelEndpoint.max_concurrency``).

A cluster-wide semaphore, one Redis sorted set per endpoint (``muse:conc:<endpoint>``) whose
members are slot tokens scored by their lease expiry (ms), so a slot held by a crashed process
frees itself after ``ROUTING_CONCURRENCY_LEASE_S``.

Acquisition never waits: when the endpoint is full the call falls back to the next candidate at
once (Attempt outcome ``concurrency_limited``, routing reason ``circuit_open`` — the endpoint was
protected and not called). Like the circuit breaker it **fails open**: if Redis is unreachable the
slot is granted.
"""

from __future__ import annotations

import logging
import time
import uuid

from django.conf import settings

from muse_experiments.infra.redis_client import redis_client
from routing.guards import roundtrip

log = logging.getLogger(__name__)
KEY_PREFIX = "muse:conc:"
REDIS_RETRY_S = 5.0

_ACQUIRE = """
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[4])
  redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])))
  return 1
end
return 0
"""


class Slot:
    """A held concurrency slot; call :meth:`release` exactly once (extra calls are no-ops)."""

    def __init__(self, release) -> None:
        self._release = release

    def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()


class ConcurrencyLimiter:
    """``acquire(endpoint_id, limit) -> Slot | None`` (None: the endpoint is at its limit)."""

    def __init__(self) -> None:
        self._skip_redis_until = 0.0

    def acquire(self, endpoint_id: str, limit: int) -> Slot | None:
        pipe = roundtrip.pipeline(redis_client())
        [slot] = roundtrip.run(pipe, [self.acquire_check(pipe, endpoint_id, limit)])
        return slot

    def acquire_check(self, pipe, endpoint_id: str, limit: int) -> roundtrip.Pending[Slot | None]:
        """:meth:`acquire` as a check queued on ``pipe`` (:mod:`routing.guards.roundtrip`). Fails open: a
        Redis error grants the slot and Redis is skipped for :data:`REDIS_RETRY_S`."""
        if time.monotonic() < self._skip_redis_until:
            return roundtrip.Pending(lambda _: Slot(None), queued=False)
        key = KEY_PREFIX + endpoint_id
        token = uuid.uuid4().hex
        lease_ms = float(settings.ROUTING_CONCURRENCY_LEASE_S) * 1000.0
        pipe.eval(_ACQUIRE, 1, key, time.time() * 1000.0, lease_ms, limit, token)

        def read(granted) -> Slot | None:
            if isinstance(granted, Exception):
                self._skip_redis_until = time.monotonic() + REDIS_RETRY_S
                log.warning(
                    "concurrency limiter: Redis unavailable (%s); not limiting", type(granted).__name__
                )
                return Slot(None)
            return self._redis_slot(key, token, endpoint_id) if int(granted) else None

        return roundtrip.Pending(read)

    @staticmethod
    def _redis_slot(key: str, token: str, endpoint_id: str) -> Slot:
        def release() -> None:
            try:
                redis_client().zrem(key, token)
            except Exception:  # noqa: BLE001 - the lease expires on its own
                log.warning("concurrency limiter: could not release a slot of %s", endpoint_id)

        return Slot(release)

    def in_flight(self, endpoint_id: str) -> int:
        """Slots currently held for the endpoint (expired leases excluded)."""
        return int(redis_client().zcount(KEY_PREFIX + endpoint_id, time.time() * 1000.0, "+inf"))

    def reset(self) -> None:
        """Forget all slots (tests)."""
        self._skip_redis_until = 0.0
        client = redis_client()
        keys = list(client.scan_iter(match=KEY_PREFIX + "*", count=500))
        if keys:
            client.delete(*keys)


limiter = ConcurrencyLimiter()
