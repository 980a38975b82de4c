"""Failed API-key authentications, counted per client address; over the limit, the address is refused.

A *failure* is a key that is malformed, unknown, wrong or revoked (a request without a key is
not one). Each counts one against the client's address (:func:`client_address`). From
``AUTH_FAILURE_LIMIT`` failures (20 by default) within ``AUTH_FAILURE_WINDOW_S`` (60 s) of the
address's first one, the address is refused for the rest of that window: 429 with
``Retry-After`` (the seconds left), in the API's error shape or the drop-ins' vendor shapes,
**whatever key it sends, a valid one included**. If a valid key still passed, the 429/200
difference would tell a guesser when a guess is right, and the limit would not limit guessing
(GitHub refuses the address the same way). Refused requests are not counted.

Where the count is read, without a new Redis round trip for a request that authenticates:

* before any key lookup, :func:`check` reads a memo of the addresses this process has learnt
  are refused, and until when (no I/O): a refused address costs no key lookup, no database
  and no Redis;
* a failure: :func:`record`, one script call (``muse:authfail:<address>``: ``GET``, ``INCR``,
  ``PEXPIRE``, ``PTTL``) counts it, or refuses it when the address is already at the limit;
* a valid key: its per-key rate-limit script (:mod:`muse_experiments.api.throttling`) reads the same
  counter in the same round trip, so an address refused by another process is refused here too.

**Fails open** like the circuit breaker and the concurrency limiter (:mod:`routing.guards.circuit`): if
Redis cannot be reached nothing is counted or refused, Redis is not asked again for
:data:`REDIS_RETRY_S`, and one warning is logged for the outage (and one line when it ends).
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from itertools import islice

from django.conf import settings
from rest_framework.exceptions import Throttled

from muse_experiments.infra.redis_client import redis_client

log = logging.getLogger(__name__)

KEY_PREFIX = "muse:authfail:"
#: After a Redis error, do not count failures (allow them) for this many seconds.
REDIS_RETRY_S = 5.0
#: The most addresses a process remembers as refused; beyond it the
#: oldest are forgotten (their count is still in Redis).
MEMO_MAX = 10_000
#: Where :func:`client_address` keeps its answer in the request's ``META`` (a WSGI environ key).
_META_KEY = "muse.client_address"

# KEYS: the address's failure counter. ARGV: the limit, the window (ms).
# Returns {1 if this failure was counted else 0, failures in the window, ms left in the window}.
_FAIL = """
local failures = tonumber(redis.call('GET', KEYS[1]) or '0')
local counted = 0
if failures < tonumber(ARGV[1]) then
  failures = redis.call('INCR', KEYS[1])
  if failures == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
  counted = 1
end
return {counted, failures, redis.call('PTTL', KEYS[1])}
"""


class AuthFailuresThrottled(Throttled):
    """429: too many failed authentications from this address; ``wait``: seconds until it may try
    again (DRF sends it as ``Retry-After``)."""

    default_detail = "Too many failed authentications from this address."


def counter_key(address: str) -> str:
    """The Redis key counting ``address``'s failures (read by the rate-limit script too)."""
    return KEY_PREFIX + address


def limit() -> int:
    """Failures an address may make in a window (``AUTH_FAILURE_LIMIT``)."""
    return settings.AUTH_FAILURE_LIMIT


def client_address(request) -> str:
    """The address failures are counted against, for a Django or DRF request.

    ``REMOTE_ADDR``, unless that peer is one of ``TRUSTED_PROXIES``: then the rightmost
    ``X-Forwarded-For`` address that is not a trusted proxy (each proxy appends the address it
    received the request from; what lies further left is the client's own word). An IPv6
    address counts as its /64 (``2001:db8:1:2::/64``: a host usually holds a whole /64), an
    IPv4-mapped one as its IPv4 address; no usable address is ``"unknown"``. Computed once per
    request.
    """
    meta = request.META
    address = meta.get(_META_KEY)
    if address is None:
        address = meta[_META_KEY] = _counted_as(_client_ip(meta))
    return address


def _parse(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _client_ip(meta) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    ip = _parse(meta.get("REMOTE_ADDR") or "")
    trusted = settings.TRUSTED_PROXIES
    if ip is None or not any(ip in net for net in trusted):
        return ip
    for hop in reversed((meta.get("HTTP_X_FORWARDED_FOR") or "").split(",")):
        hop_ip = _parse(hop)
        if hop_ip is None:  # not written by a trusted proxy: stop at the last address we trust
            return ip
        ip = hop_ip
        if not any(ip in net for net in trusted):
            return ip
    return ip  # every hop is a trusted proxy: the leftmost


def _counted_as(ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> str:
    if ip is None:
        return "unknown"
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class _FailureCounter:
    """The per-process side: the memo of refused addresses, the Redis script and the outage
    state."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.refused: dict[str, float] = {}  # address -> time.monotonic() when it may try again
        self.script = None
        self.skip_until = 0.0
        self.down = False

    def count(self, address: str) -> tuple[bool, int, float] | None:
        """``(counted, failures in the window, seconds left in it)``, or None when Redis is
        unreachable (fail open)."""
        client = redis_client()
        window_s = float(settings.AUTH_FAILURE_WINDOW_S)
        if time.monotonic() < self.skip_until:
            return None
        try:
            if self.script is None:
                self.script = client.register_script(_FAIL)
            counted, failures, left_ms = self.script(
                keys=[counter_key(address)], args=[limit(), int(window_s * 1000)], client=client
            )
        except Exception as exc:  # noqa: BLE001 - any Redis failure: fail open
            self.skip_until = time.monotonic() + REDIS_RETRY_S
            if not self.down:
                self.down = True
                log.warning(
                    "failed-authentication counter: Redis unavailable (%s); failures are not "
                    "counted until it answers",
                    type(exc).__name__,
                )
            return None
        if self.down:
            self.down = False
            log.warning("failed-authentication counter: Redis answers again; counting failures")
        return bool(counted), int(failures), max(int(left_ms), 1) / 1000

    def refuse(self, address: str, wait_s: float) -> None:
        now = time.monotonic()
        with self.lock:
            self.refused[address] = now + wait_s
            _bound(self.refused, now, key=lambda until: until)


def _bound(memo: dict, now: float, *, key) -> None:
    """Keep ``memo`` under :data:`MEMO_MAX`: drop expired entries, then the oldest half."""
    if len(memo) <= MEMO_MAX:
        return
    for address in [a for a, entry in memo.items() if key(entry) <= now]:
        del memo[address]
    if len(memo) > MEMO_MAX // 2:
        for address in list(islice(memo, len(memo) - MEMO_MAX // 2)):
            del memo[address]


_counter = _FailureCounter()


def check(address: str) -> None:
    """Raise :class:`AuthFailuresThrottled` if this process knows ``address`` is refused. No I/O."""
    until = _counter.refused.get(address)
    if until is None:
        return
    wait_s = until - time.monotonic()
    if wait_s > 0:
        raise AuthFailuresThrottled(wait=wait_s)
    _counter.refused.pop(address, None)


def record(address: str) -> None:
    """Count one failed authentication from ``address`` (one Redis script call).

    Raises :class:`AuthFailuresThrottled` when the address was already at the limit (this
    failure is not counted); the failure that reaches the limit is still answered (401) and
    refuses the address from the next request on. Redis unreachable: counts nothing.
    """
    reply = _counter.count(address)
    if reply is None:
        return
    counted, failures, wait_s = reply
    if failures >= limit():
        _counter.refuse(address, wait_s)
    if not counted:
        raise AuthFailuresThrottled(wait=wait_s)


def refusal(address: str, wait_s: float) -> AuthFailuresThrottled:
    """The 429 for ``address``, refused for ``wait_s`` more seconds as the rate-limit script
    found; this process remembers it (:func:`check`)."""
    _counter.refuse(address, wait_s)
    return AuthFailuresThrottled(wait=wait_s)


def forget_all() -> None:
    """Forget this process's memo (tests; the counts in Redis stay)."""
    with _counter.lock:
        _counter.refused.clear()
    _counter.skip_until = 0.0
    _counter.down = False
