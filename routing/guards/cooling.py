"""Endpoints cooling down: an upstream asked us to stay away longer than the retry policy waits.

When an attempt fails with a ``retry-after`` (or ``retry-after-ms``, or Anthropic's
``anthropic-ratelimit-*-reset``) beyond :attr:`routing.pipeline.retry.RetryPolicy.retry_after_cap_s`,
retrying the same endpoint cannot succeed before the upstream's own deadline. Serving then falls
back at once (reason ``cooling``) and calls :func:`cool`, so every call skips the endpoint until
that deadline (the guard refuses it with outcome ``cooling``, nothing is sent upstream).

The deadline is shared by every process: key ``muse:cool:<endpoint>`` holding the deadline
(epoch seconds) with a matching expiry (``SET … PXAT``, kept only if later than what is there).
**Fails open** like the circuit breaker: if Redis cannot be reached an endpoint is treated as not
cooling (a broken store must not take healthy
traffic down). Cooling is capped at :data:`MAX_COOL_S` so a bogus header cannot park an endpoint.
"""

from __future__ import annotations

import logging
import time

from muse_experiments.infra.redis_client import redis_client
from routing.guards import roundtrip

log = logging.getLogger(__name__)

KEY_PREFIX = "muse:cool:"
#: Longest an endpoint is parked on one upstream answer (seconds).
MAX_COOL_S = 3600.0

# Set the deadline only when it is later than the stored one (one round trip, atomic).
_COOL = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local wanted = tonumber(ARGV[1])
if wanted > current then
  redis.call('SET', KEYS[1], ARGV[1], 'PXAT', math.ceil(wanted * 1000))
  return 1
end
return 0
"""


def cool(endpoint_id: str, seconds: float) -> float:
    """Park ``endpoint_id`` for ``seconds`` (capped at :data:`MAX_COOL_S`) from now.

    Returns the deadline (epoch seconds). A later deadline already stored is kept. Store failures
    are logged and swallowed (the endpoint does not cool: fail open)."""
    until = time.time() + min(max(float(seconds), 0.0), MAX_COOL_S)
    try:
        redis_client().eval(_COOL, 1, KEY_PREFIX + endpoint_id, repr(until))
    except Exception as exc:  # noqa: BLE001 - any store failure: fail open
        log.warning("cooling store unavailable (%s); %s does not cool", type(exc).__name__, endpoint_id)
        return until
    log.info(
        "endpoint %s cooling for %.1f s (upstream retry-after beyond the retry policy)",
        endpoint_id,
        until - time.time(),
    )
    return until


def cooling_until(endpoint_id: str) -> float | None:
    """The deadline (epoch seconds) until which ``endpoint_id`` must not be called, or ``None``."""
    pipe = roundtrip.pipeline(redis_client())
    [deadline] = roundtrip.run(pipe, [cooling_check(pipe, endpoint_id)])
    return deadline


def cooling_check(pipe, endpoint_id: str) -> roundtrip.Pending[float | None]:
    """:func:`cooling_until` as a check queued on ``pipe`` (:mod:`routing.guards.roundtrip`). Fails open:
    a Redis error reads as not cooling."""
    pipe.get(KEY_PREFIX + endpoint_id)

    def read(value) -> float | None:
        if isinstance(value, Exception):
            log.warning(
                "cooling store unavailable (%s); treating %s as not cooling",
                type(value).__name__,
                endpoint_id,
            )
            return None
        deadline = float(value) if value else None
        return deadline if deadline is not None and deadline > time.time() else None

    return roundtrip.Pending(read)


def cooling_clear() -> None:
    """Forget every deadline (tests and operators' reset)."""
    client = redis_client()
    keys = list(client.scan_iter(KEY_PREFIX + "*"))
    if keys:
        client.delete(*keys)
