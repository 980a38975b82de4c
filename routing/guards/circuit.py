"""Circuit breaker per model endpoint, shared by every process through Redis.

States (per endpoint public id)::

    closed ──N failures within window──▶ open ──cooldown elapsed──▶ half-open
      ▲                                   ▲                            │ one probe call
      └──────────── probe succeeds ───────┼──────── probe fails ───────┘

* ``failures`` (``ROUTING_CIRCUIT_FAILURES``), ``window`` (``ROUTING_CIRCUIT_WINDOW_S``) and
  ``cooldown`` (``ROUTING_CIRCUIT_COOLDOWN_S``) come from settings at each call.
* A *failure* is an attempt that ended in a retryable upstream error (429, 5xx, 529, timeout,
  reset, malformed body, in-stream error) or an authentication failure; a 4xx caused by the
  request itself says nothing about the endpoint and is not counted.
* Half-open lets exactly one probe through (``allow`` returns :data:`PROBE` to one caller); other
  callers are refused until the probe reports. A probe whose process died is forgotten after its
  lease (the endpoint timeout + 5 s), so the circuit can never stick in half-open.

The state lives in Redis (atomic Lua scripts; keys ``muse:cb:<endpoint>:*``). **Fail open**: if Redis cannot be reached the breaker allows every
call (and stops asking Redis for :data:`REDIS_RETRY_S`), because a broken breaker must never take
healthy traffic down. (The kill switch, by contrast, fails closed: see :mod:`routing.guards.killswitch`.)
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

from django.conf import settings

from muse_experiments.infra.redis_client import redis_client
from routing.guards import roundtrip

log = logging.getLogger(__name__)

#: ``allow`` results.
CLOSED, OPEN, PROBE = "closed", "open", "probe"
KEY_PREFIX = "muse:cb:"
#: After a Redis error, skip Redis (allow everything) for this many seconds.
REDIS_RETRY_S = 5.0

_ALLOW = """
local opened = redis.call('HGET', KEYS[1], 'opened_at')
if not opened then return 0 end
local now = tonumber(ARGV[1])
if now < tonumber(opened) + tonumber(ARGV[2]) then return 1 end
local probe = redis.call('HGET', KEYS[1], 'probe_until')
if probe and tonumber(probe) > now then return 1 end
redis.call('HSET', KEYS[1], 'probe_until', now + tonumber(ARGV[3]))
return 2
"""
_FAILURE = """
local now = tonumber(ARGV[1])
if ARGV[5] == '1' then
  redis.call('HSET', KEYS[1], 'opened_at', now)
  redis.call('HDEL', KEYS[1], 'probe_until')
  return 2
end
if redis.call('HEXISTS', KEYS[1], 'opened_at') == 1 then return 1 end
redis.call('ZADD', KEYS[2], now, ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[2]))
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[1], 'opened_at', now)
  redis.call('DEL', KEYS[2])
  return 2
end
redis.call('PEXPIRE', KEYS[2], math.ceil(tonumber(ARGV[2])))
return 0
"""
_PROBE_SUCCESS = """
redis.call('DEL', KEYS[1], KEYS[2])
return 1
"""


@dataclass(frozen=True)
class BreakerSettings:
    """``failures`` in ``window_s`` seconds open the circuit for ``cooldown_s`` seconds."""

    failures: int
    window_s: float
    cooldown_s: float

    @classmethod
    def from_settings(cls) -> BreakerSettings:
        return cls(
            failures=max(1, int(settings.ROUTING_CIRCUIT_FAILURES)),
            window_s=float(settings.ROUTING_CIRCUIT_WINDOW_S),
            cooldown_s=float(settings.ROUTING_CIRCUIT_COOLDOWN_S),
        )


class RedisCircuitBreaker:
    """The cluster-wide breaker. All methods fail open on Redis errors (see module docstring)."""

    def __init__(self) -> None:
        self._skip_until = 0.0
        self._scripts: dict[str, object] = {}

    def _script(self, client, name: str, source: str):
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = client.register_script(source)
        return script

    def _run(self, name: str, source: str, keys: list[str], args: list[object]) -> int | None:
        if time.monotonic() < self._skip_until:
            return None
        client = redis_client()
        try:
            return int(self._script(client, name, source)(keys=keys, args=args, client=client))
        except Exception as exc:  # noqa: BLE001 - any Redis failure: fail open
            self._failed(exc)
            return None

    def allow(self, endpoint_id: str, *, probe_lease_s: float = 65.0) -> str:
        """:data:`CLOSED` (call), :data:`PROBE` (call; you are the half-open probe) or :data:`OPEN`."""
        pipe = roundtrip.pipeline(redis_client())
        [permission] = roundtrip.run(pipe, [self.allow_check(pipe, endpoint_id, probe_lease_s=probe_lease_s)])
        return permission

    def allow_check(self, pipe, endpoint_id: str, *, probe_lease_s: float = 65.0) -> roundtrip.Pending[str]:
        """:meth:`allow` as a check queued on ``pipe`` (:mod:`routing.guards.roundtrip`). Fails open."""
        if time.monotonic() < self._skip_until:
            return roundtrip.Pending(lambda _: CLOSED, queued=False)
        cfg = BreakerSettings.from_settings()
        pipe.eval(
            _ALLOW,
            1,
            KEY_PREFIX + endpoint_id + ":state",
            _now_ms(),
            cfg.cooldown_s * 1000.0,
            probe_lease_s * 1000.0,
        )

        def read(code) -> str:
            if isinstance(code, Exception):
                self._failed(code)
                return CLOSED
            return {0: CLOSED, 1: OPEN, 2: PROBE}[int(code)]

        return roundtrip.Pending(read)

    def release_probe(self, endpoint_id: str) -> None:
        """Give back a :data:`PROBE` permission that made no call (another guard refused it), so
        the next caller may probe at once instead of after the probe's lease."""
        client = redis_client()
        try:
            client.hdel(KEY_PREFIX + endpoint_id + ":state", "probe_until")
        except Exception as exc:  # noqa: BLE001 - the probe's lease ends on its own
            self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        self._skip_until = time.monotonic() + REDIS_RETRY_S
        log.warning("circuit breaker: Redis unavailable (%s); allowing calls", type(exc).__name__)

    def record_failure(self, endpoint_id: str, *, probe: bool = False) -> bool:
        """Count a failure; returns True when this failure opened (or re-opened) the circuit."""
        cfg = BreakerSettings.from_settings()
        code = self._run(
            "failure",
            _FAILURE,
            [KEY_PREFIX + endpoint_id + ":state", KEY_PREFIX + endpoint_id + ":failures"],
            [_now_ms(), cfg.window_s * 1000.0, cfg.failures, uuid.uuid4().hex, "1" if probe else "0"],
        )
        return code == 2

    def record_success(self, endpoint_id: str, *, probe: bool = False) -> None:
        """A successful call. A probe's success closes the circuit and forgets past failures; any
        other success changes nothing (failures age out of the window), so it costs no Redis
        round trip."""
        if not probe:
            return
        self._run(
            "probe_success",
            _PROBE_SUCCESS,
            [KEY_PREFIX + endpoint_id + ":state", KEY_PREFIX + endpoint_id + ":failures"],
            [],
        )

    def state(self, endpoint_id: str) -> str:
        """``closed`` | ``open`` | ``half_open`` (read-only; ``closed`` when Redis is unreachable)."""
        client = redis_client()
        try:
            values = client.hmget(KEY_PREFIX + endpoint_id + ":state", "opened_at", "probe_until")
        except Exception:  # noqa: BLE001
            return "closed"
        return _state_of(values[0], values[1], BreakerSettings.from_settings().cooldown_s)

    def reset(self) -> None:
        """Forget every endpoint's state (tests, operators after an incident)."""
        self._skip_until = 0.0
        client = redis_client()
        keys = list(client.scan_iter(match=KEY_PREFIX + "*", count=500))
        if keys:
            client.delete(*keys)


def _now_ms() -> float:
    return time.time() * 1000.0


def _state_of(opened_at, probe_until, cooldown_s: float) -> str:
    if opened_at is None:
        return "closed"
    now = _now_ms()
    if now < float(opened_at) + cooldown_s * 1000.0:
        return "open"
    return "half_open"


_breaker = RedisCircuitBreaker()


def breaker() -> RedisCircuitBreaker:
    """The process's circuit breaker."""
    return _breaker
