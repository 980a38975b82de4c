"""Shadow tests' counters in Redis: the daily spend (budget), the backlog, and dropped calls.

Backlog: the shadow calls waiting on the ``shadow`` queue. Where the broker is this Redis (the
production shape) it is the queue's list itself (:func:`backlog_room`; the push checks it in the
same script: :meth:`muse_experiments.infra.broker.DirectPublisher.push_bounded`), so it cannot
drift. With another broker a counter stands in for it (:func:`backlog_take`, given back when the
call starts or its publish fails: :func:`backlog_release`).

Budget: each test's spend today (UTC) is an integer of micro-USD under
``muse:shadow:<key>:spent:<YYYYMMDD>``. A call (candidate or judge) is admitted by
:func:`budget_admit` only when the spend is below ``max_usd_per_day`` and -- when other calls of
the test are in flight -- when the spend plus each in-flight call and this one, each costing as
much as the dearest call seen today, stays within the limit. Until a call has finished today
(no dearest cost yet) only one call at a time is admitted: the others wait for it. So the spend can pass the limit by
at most one call's cost (the call admitted with nothing else in flight), never by one call per
worker thread. :func:`budget_settle` adds a finished call's cost and frees its place.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from muse_experiments.infra.queues import Queue
from muse_experiments.infra.redis_client import redis_client

#: Keys live two days (today's is read by the API; yesterday's lingers harmlessly).
TTL_S = 2 * 86_400
MICRO = Decimal(1_000_000)

BACKLOG_KEY = "muse:shadow:backlog"

_ADMIT = """
local spent = tonumber(redis.call('GET', KEYS[1]) or '0')
local inflight = tonumber(redis.call('GET', KEYS[2]) or '0')
local dearest = tonumber(redis.call('GET', KEYS[3]) or '0')
local limit = tonumber(ARGV[1])
if spent >= limit then return 0 end
if inflight > 0 and dearest == 0 then return -1 end
if inflight > 0 and spent + (inflight + 1) * dearest > limit then return 0 end
redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return 1
"""

_SETTLE = """
redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
local left = redis.call('DECR', KEYS[2])
if left < 0 then redis.call('SET', KEYS[2], 0) end
local dearest = tonumber(redis.call('GET', KEYS[3]) or '0')
if tonumber(ARGV[1]) > dearest then redis.call('SET', KEYS[3], ARGV[1], 'EX', ARGV[2]) end
return 1
"""


def _day(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("%Y%m%d")


def _keys(test_key: str, now: datetime | None = None) -> list[str]:
    day = _day(now)
    base = f"muse:shadow:{test_key}"
    return [f"{base}:spent:{day}", f"{base}:inflight:{day}", f"{base}:dearest:{day}"]


def counters_forget(test_key: str) -> None:
    """Delete the test's spend (today's and yesterday's) and dropped counters: called once a
    deleted test's row is gone, so a new test under the same key starts at nothing spent and
    nothing dropped. (Its calls' ``job`` claims expire on their own; job ids are never reused.)"""
    now = datetime.now(UTC)
    redis_client().delete(
        *_keys(test_key, now),
        *_keys(test_key, now - timedelta(days=1)),
        f"muse:shadow:{test_key}:dropped",
    )


#: Seconds between two asks while today's first call, of unknown cost, is in flight.
ADMIT_POLL_S = 0.05


def budget_admit(*, test_key: str, max_usd_per_day: Decimal, wait_s: float = 60.0) -> bool:
    """Whether one more call of the test may run now (see the module docstring); when True the
    caller must call :func:`budget_settle` once the call ends, whatever its outcome. While no call
    has finished today and another is in flight, waits for it (up to ``wait_s`` seconds, then
    False)."""
    limit = int(Decimal(max_usd_per_day) * MICRO)
    deadline = time.monotonic() + wait_s
    while True:
        verdict = int(redis_client().eval(_ADMIT, 3, *_keys(test_key), limit, TTL_S))
        if verdict >= 0 or time.monotonic() >= deadline:
            return verdict == 1
        time.sleep(ADMIT_POLL_S)


def budget_settle(*, test_key: str, cost_usd: Decimal) -> None:
    """Add a finished call's cost (USD, rounded up to the micro-dollar) and free its place."""
    micro = int((Decimal(cost_usd) * MICRO).to_integral_value(rounding="ROUND_CEILING"))
    redis_client().eval(_SETTLE, 3, *_keys(test_key), max(micro, 0), TTL_S)


def spent_usd_today(test_key: str) -> float:
    """What the test's calls cost today (UTC), USD."""
    value = redis_client().get(_keys(test_key)[0])
    return float(Decimal(int(value or 0)) / MICRO)


def dropped_count(test_key: str, reason: str, n: int = 1) -> None:
    """Count ``n`` shadow calls of the test not made (``reason``: ``backlog``, ``busy``, ``stopped``,
    ``budget``, ``killed``, ``opted_out``, ``external_disallowed``)."""
    redis_client().hincrby(f"muse:shadow:{test_key}:dropped", reason, n)


def dropped_counts(test_key: str) -> dict[str, int]:
    """``{reason: count}`` of the test's dropped shadow calls (all time)."""
    raw = redis_client().hgetall(f"muse:shadow:{test_key}:dropped")
    return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}


def backlog_take(limit: int) -> bool:
    """Take a place in the backlog counter (a broker other than this Redis); False (nothing
    taken) when it is full."""
    client = redis_client()
    if int(client.incr(BACKLOG_KEY)) > limit:
        client.decr(BACKLOG_KEY)
        return False
    return True


def backlog_room(limit: int, client) -> int:
    """How many more shadow calls the ``shadow`` queue's list on ``client`` (the broker) takes
    now (0 when full); it may change at once."""
    return max(0, limit - int(client.llen(Queue.SHADOW)))


def backlog_release() -> None:
    """Give back a place taken by :func:`backlog_take` (when its shadow call starts, or its publish
    failed)."""
    client = redis_client()
    if int(client.decr(BACKLOG_KEY)) < 0:
        client.set(BACKLOG_KEY, 0)
