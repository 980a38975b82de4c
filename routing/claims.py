"""The intent record of a deferred job, in Redis: one round trip before the upstream call.

A drop-in call whose caller waits for the answer is *deferred*: its row travels in the task
message and is not in the database yet (:func:`routing.services.completion_job_new`). Its worker
must still record, before any upstream call, that this attempt is under way, so that a
redelivered task never calls the provider a second time and a worker that dies mid-call leaves
a ``worker_lost`` job behind. That record used to be the job's row, inserted ``running`` (one
PostgreSQL commit on the critical path). With Redis it is a hash instead, written by one Lua
script (atomic, one round trip; bench/README.md, "Measured outside bench/"), and the row reaches the database with the call's
other records through the write-behind drainer (:mod:`routing.writebehind`).

``muse:claim:<job id>`` (a hash, kept :func:`ttl_s`) holds ``st``, the job's state for claims:

* ``running`` — a worker (``w``) took it at ``at`` and holds it until ``lease`` (epoch ms); ``row`` keeps the job's
  row (JSON) so that a lost job can still be written. Its id is in the sorted set
  :data:`LEASES`, scored by the lease's end. :class:`routing.leases.LeaseKeeper` renews both
  every third of ``COMPLETION_LEASE_S`` while the worker lives (:func:`renew`).
* ``done`` — the call's records and final state were buffered (:func:`queue_done`, in the same
  ``MULTI`` as :func:`routing.writebehind.buffer_call`): a redelivery does nothing.
* ``lost`` — the lease ran out before the job finished: its worker died mid-call. The job is
  failed ``worker_lost`` (:func:`routing.services.completion_job_fail`), by the redelivery that
  found it (:func:`claim`) or by the reaper (:func:`reap`), and never run again.
* ``db`` — the job is claimed through its database row (a task without a row: streams, durable
  jobs, a deferred job whose waiting request wrote its row and published it again). Every later
  delivery goes to the row too, so the two ways of claiming never both run one job.

A claim finds the hash absent (and takes it), or finds one of the states above; the script
decides atomically, so of two deliveries racing for one job exactly one runs it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from muse_experiments.infra.redis_client import redis_client

KEY_PREFIX = "muse:claim:"
#: Running claims by the end of their lease (epoch ms): what :func:`reap` scans.
LEASES = "muse:claims:leases"
#: The shortest a claim's hash is kept (s).
MIN_TTL_S = 3600


def ttl_s() -> int:
    """How long a claim's hash is kept (s): twice the broker's visibility timeout (a redelivery
    comes within it; RabbitMQ redelivers a dead consumer's messages at once), at least
    :data:`MIN_TTL_S` — 2 h by default, so about 720,000 small hashes at 100 calls/s (the row of
    a job is dropped once it is written)."""
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {}
    return max(MIN_TTL_S, 2 * int(options.get("visibility_timeout", MIN_TTL_S)))


CLAIMED, BUSY, DONE, LOST, DB = "claimed", "running", "done", "lost", "db"

# KEYS: claim hash, lease set. ARGV: worker, now ms, lease ms, ttl s, row JSON ("" = no row), job id.
# Returns {state} or {"lost", row JSON}.
_CLAIM = """
local st = redis.call('HGET', KEYS[1], 'st')
if not st then
  if ARGV[5] == '' then
    redis.call('HSET', KEYS[1], 'st', 'db')
    redis.call('EXPIRE', KEYS[1], ARGV[4])
    return {'db'}
  end
  local until_ms = tonumber(ARGV[2]) + tonumber(ARGV[3])
  redis.call('HSET', KEYS[1], 'st', 'running', 'w', ARGV[1], 'at', ARGV[2], 'lease', until_ms, 'row', ARGV[5])
  redis.call('EXPIRE', KEYS[1], ARGV[4])
  redis.call('ZADD', KEYS[2], until_ms, ARGV[6])
  return {'claimed'}
end
if st == 'running' and tonumber(redis.call('HGET', KEYS[1], 'lease')) <= tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'st', 'lost')
  redis.call('ZREM', KEYS[2], ARGV[6])
  return {'lost', redis.call('HGET', KEYS[1], 'row')}
end
return {st}
"""

# KEYS: claim hash, lease set. ARGV: worker, lease end ms, job id. Extends a running claim of
# this worker's; returns 1 if it did.
_RENEW = """
if redis.call('HGET', KEYS[1], 'st') == 'running' and redis.call('HGET', KEYS[1], 'w') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'lease', ARGV[2])
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
  return 1
end
return 0
"""

# KEYS: claim hash, lease set. ARGV: now ms, job id. Returns the row JSON of a claim whose
# lease ended (now ``lost``), else false; drops the id from the set either way unless it lives.
_REAP = """
local st = redis.call('HGET', KEYS[1], 'st')
if st == 'running' and tonumber(redis.call('HGET', KEYS[1], 'lease')) > tonumber(ARGV[1]) then
  return false
end
redis.call('ZREM', KEYS[2], ARGV[2])
if st ~= 'running' then
  return false
end
redis.call('HSET', KEYS[1], 'st', 'lost')
return redis.call('HGET', KEYS[1], 'row')
"""

_scripts: dict[str, Any] = {}


def _script(client, source: str):
    script = _scripts.get(source)
    if script is None or script.registered_client is not client:
        script = _scripts[source] = client.register_script(source)
    return script


def claim_key(job_id: str) -> str:
    return f"{KEY_PREFIX}{job_id}"


def _now_ms() -> int:
    return int(time.time() * 1000)


def claim(job_id: str, *, worker: str, row: dict[str, Any] | None) -> tuple[str, dict | None]:
    """Take ``job_id`` for ``worker``. Returns ``(state, lost_row)``.

    ``state`` is :data:`CLAIMED` (this delivery runs the job: with ``row`` only), :data:`DB` (claim
    it through its database row), :data:`BUSY` (another worker holds a live lease), :data:`DONE`
    or :data:`LOST` (the holder's lease ran out: this delivery must fail the job ``worker_lost``;
    ``lost_row`` is its row, or None if it had none). Raises ``redis.RedisError``.
    """
    return claim_send(job_id, worker=worker, row=row)()


def claim_send(
    job_id: str, *, worker: str, row: dict[str, Any] | None
) -> Callable[[], tuple[str, dict | None]]:
    """:func:`claim` in two halves: send the script now (``EVAL`` on a connection taken from the
    pool) and return the function that reads its reply (and gives the connection back), so that
    work which needs no claim can run while the reply is on its way. The reader must be called
    once; both halves raise ``redis.RedisError`` (the connection is dropped and given back)."""
    pool = redis_client().connection_pool
    conn = pool.get_connection()
    try:
        conn.send_command(
            "EVAL", _CLAIM, 2, claim_key(job_id), LEASES, worker, _now_ms(),
            int(settings.COMPLETION_LEASE_S * 1000), ttl_s(),
            json.dumps(row, separators=(",", ":")) if row is not None else "", job_id,
        )  # fmt: skip
    except BaseException:
        conn.disconnect()
        pool.release(conn)
        raise

    def read() -> tuple[str, dict | None]:
        try:
            reply = conn.read_response()
        except BaseException:
            conn.disconnect()
            raise
        finally:
            pool.release(conn)
        state = reply[0].decode()
        lost_row = json.loads(reply[1]) if state == LOST and len(reply) > 1 and reply[1] else None
        return state, lost_row

    return read


def renew(job_ids: Iterable[str], *, worker: str) -> int:
    """Extend this worker's running claims among ``job_ids`` by ``COMPLETION_LEASE_S`` from now
    (one pipelined round trip). Returns how many it extended."""
    ids = [str(i) for i in job_ids]
    if not ids:
        return 0
    client = redis_client()
    script = _script(client, _RENEW)
    until_ms = _now_ms() + int(settings.COMPLETION_LEASE_S * 1000)
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        script(keys=[claim_key(job_id), LEASES], args=[worker, until_ms, job_id], client=pipe)
    return sum(int(n) for n in pipe.execute())


def reap(*, limit: int = 500) -> list[tuple[str, dict]]:
    """Mark ``lost`` the running claims whose lease ended. Returns ``[(job id, row)]`` of the jobs
    to fail ``worker_lost`` (the caller writes them; :func:`routing.services.completion_jobs_reap_expired`)."""
    client = redis_client()
    now = _now_ms()
    ids = [i.decode() for i in client.zrangebyscore(LEASES, "-inf", now, start=0, num=limit)]
    if not ids:
        return []
    script = _script(client, _REAP)
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        script(keys=[claim_key(job_id), LEASES], args=[now, job_id], client=pipe)
    return [(j, json.loads(raw)) for j, raw in zip(ids, pipe.execute(), strict=True) if raw]


def queue_done(pipe, job_id: str) -> None:
    """Add to a ``MULTI`` pipeline the commands that mark a job's claim ``done`` (its records and
    final state are buffered in the same transaction). The row stays until the drainer has
    written it (:func:`queue_forget_row`): until then ``GET /api/v1/completions/{id}`` reads it here."""
    key = claim_key(job_id)
    pipe.hset(key, "st", DONE)
    pipe.expire(key, ttl_s())
    pipe.zrem(LEASES, job_id)


def queue_forget_row(pipe, job_id: str) -> None:
    """Add to a pipeline the command that drops the row a job's claim kept (now written to the
    database)."""
    pipe.hdel(claim_key(job_id), "row")


def unwritten(job_id: str) -> tuple[dict, datetime, str] | None:
    """``(row, started, worker)`` of a job claimed here whose row is not in the database yet
    (running, or done and not drained), else None. Raises ``redis.RedisError``."""
    st, row, worker, at = redis_client().hmget(claim_key(job_id), "st", "row", "w", "at")
    if st not in (b"running", b"done") or not row or not at:
        return None
    return json.loads(row), _utc(at), worker.decode()


def running(job_id: str) -> tuple[str, datetime, datetime] | None:
    """``(worker, started, lease end)`` of a live claim on ``job_id`` (UTC), else None: not
    claimed here, or finished. Raises ``redis.RedisError``."""
    st, worker, at, lease = redis_client().hmget(claim_key(job_id), "st", "w", "at", "lease")
    if st != b"running":
        return None
    return worker.decode(), _utc(at), _utc(lease)


def _utc(ms: bytes) -> datetime:
    return datetime.fromtimestamp(int(ms) / 1000, tz=UTC)
