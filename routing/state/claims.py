"""The intent record of a deferred job, in Redis: one round trip before the upstream call.

A drop-in call whose caller waits for the answer is *deferred*: its row travels in the task
message and is not in the database yet (:func:`routing.jobs.completion_job_new`). Its worker
must still record, before any upstream call, that this attempt is under way, so that a
redelivered task never calls the provider a second time and a worker that dies mid-call leaves
a ``worker_lost`` job behind. That record used to be the job's row, inserted ``running`` (one
PostgreSQL commit on the critical path). With Redis it is a hash instead, written by one Lua
script (atomic, one round trip; bench/README.md, "Measured outside bench/"), and the row reaches the database with the call's
other records through the write-behind drainer (:mod:`routing.worker.drainer`).

``muse:claim:<job id>`` (a hash, kept :func:`ttl_s`) holds ``st``, the job's state for claims:

* ``queued`` — published, not claimed yet (:func:`queue_published`, written with the task
  message by :func:`routing.web.dispatch.publish_completion`): the job is findable from then on
  (``row`` keeps a deferred job's row, ``s`` whether it streams) and its id is in
  :data:`QUEUED_JOBS`, scored by when it was published, until a claim takes it; the reaper publishes
  it again when a worker died meanwhile (it may have taken the message with it) or when it
  waited ``COMPLETION_REQUEUE_AFTER_S`` (:func:`unclaimed`).
* ``running`` — a worker (``w``) took it at ``at`` and holds it until ``lease`` (epoch ms); ``row`` keeps the job's
  row (JSON) so that a lost job can still be written. Its id is in the sorted set
  :data:`LEASES`, scored by the lease's end. :class:`routing.worker.leases.LeaseKeeper` renews both
  every third of ``COMPLETION_LEASE_S`` while the worker lives (:func:`renew`).
* ``done`` — the call's records and final state were buffered (:func:`queue_done`, in the same
  ``MULTI`` as :func:`routing.pipeline.recording.buffer_call`): a redelivery does nothing.
* ``lost`` — the lease ran out, or the worker's heartbeat (:func:`beat`) expired, before the
  job finished: its worker died mid-call. The job is failed ``worker_lost``
  (:func:`routing.jobs.completion_job_fail`), by the redelivery that found it (:func:`claim`)
  or by the reaper (:func:`reap`), and never run again; its id waits in :data:`LOST_JOBS` until the
  reaper has recorded the attempts that died with it (:func:`attempt_notes`).
* ``db`` — the job is claimed through its database row (a task without a row: streams, durable
  jobs, a deferred job whose waiting request wrote its row and published it again). Every later
  delivery goes to the row too, so the two ways of claiming never both run one job.

A claim finds the hash absent or ``queued`` (and takes it), or finds one of the states above;
the script decides atomically, so of two deliveries racing for one job exactly one runs it.

Worker liveness: each worker process sets ``muse:worker:<identity>`` with a TTL of
``WORKER_HEARTBEAT_TTL_S`` every fifth of it and belongs to :data:`WORKERS` (:func:`beat`). A
running claim whose worker's key has expired is lost as soon as the reaper looks, however long
its lease still runs; the lease stays the bound when Redis lost the heartbeat keys.

Attempt notes: before each upstream call, its attempt is noted in ``muse:job:<id>:attempts``
(:func:`queue_attempt_note`, in the same round trip as the attempt's guards), so that a call
that died with its worker is still recorded, as ``lost`` with its cost unknown.
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
#: Published, unclaimed jobs by when they were published (epoch ms): what :func:`unclaimed` scans.
QUEUED_JOBS = "muse:claims:queued"
#: Lost jobs whose attempts the reaper has not recorded yet (:mod:`routing.worker.reaper`).
LOST_JOBS = "muse:claims:lost"
#: Worker identities that have beaten (:func:`beat`); a member whose key expired is dead.
WORKERS = "muse:workers"
HEARTBEAT_PREFIX = "muse:worker:"
NOTES_SUFFIX = ":attempts"
#: The shortest a claim's hash is kept (s).
MIN_TTL_S = 3600


def ttl_s() -> int:
    """How long a claim's hash is kept (s): twice the broker's visibility timeout (a redelivery
    comes within it; RabbitMQ redelivers a dead consumer's messages at once), at least
    :data:`MIN_TTL_S` — 2 h by default, so about 720,000 small hashes at 100 calls/s (the row of
    a job is dropped once it is written)."""
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {}
    return max(MIN_TTL_S, 2 * int(options.get("visibility_timeout", MIN_TTL_S)))


CLAIMED, BUSY, DONE, LOST, DB, QUEUED = "claimed", "running", "done", "lost", "db", "queued"

# KEYS: claim hash, lease set, queued set, lost set. ARGV: worker, now ms, lease ms, ttl s, row
# JSON ("" = no row), job id. Returns {state} or {"lost", row JSON}.
_CLAIM = """
local st = redis.call('HGET', KEYS[1], 'st')
if not st or st == 'queued' then
  redis.call('ZREM', KEYS[3], ARGV[6])
  if ARGV[5] == '' then
    redis.call('HSET', KEYS[1], 'st', 'db')
    redis.call('HDEL', KEYS[1], 'row')
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
  redis.call('SADD', KEYS[4], ARGV[6])
  return {'lost', redis.call('HGET', KEYS[1], 'row')}
end
return {st}
"""

# KEYS: claim hash, queued set. ARGV: now ms, ttl s, row JSON ("" = none), stream ("1"/"0"), job id.
# Records a published job unless a claim already took it (a task published again).
_RECORD_PUBLISHED = """
local st = redis.call('HGET', KEYS[1], 'st')
if not st or st == 'queued' then
  redis.call('HSET', KEYS[1], 'st', 'queued', 'at', ARGV[1], 's', ARGV[4])
  if ARGV[3] ~= '' then
    redis.call('HSET', KEYS[1], 'row', ARGV[3])
  end
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  redis.call('ZADD', KEYS[2], ARGV[1], ARGV[5])
end
"""
_PUBLISHED = _RECORD_PUBLISHED + "return 1\n"
# The same, then the task message (ARGV[6]) pushed onto the queue's list (KEYS[3]); returns LPUSH's reply.
_PUBLISH = _RECORD_PUBLISHED + "return redis.call('LPUSH', KEYS[3], ARGV[6])\n"

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

# KEYS: claim hash, lease set, lost set. ARGV: now ms, job id, heartbeat key prefix, grace ms
# (negative: heartbeats not read).
# Returns the row JSON ("" if none) of a claim whose lease ended or whose worker's heartbeat
# expired (now ``lost``), else false; drops the id from the lease set unless it lives.
_REAP = """
local st, w, lease, at = unpack(redis.call('HMGET', KEYS[1], 'st', 'w', 'lease', 'at'))
local now = tonumber(ARGV[1])
if st == 'running' and tonumber(lease) > now then
  local grace = tonumber(ARGV[4])
  if grace < 0 or redis.call('EXISTS', ARGV[3] .. w) == 1 or now - tonumber(at) < grace then
    return false
  end
end
redis.call('ZREM', KEYS[2], ARGV[2])
if st ~= 'running' then
  return false
end
redis.call('HSET', KEYS[1], 'st', 'lost')
redis.call('SADD', KEYS[3], ARGV[2])
return redis.call('HGET', KEYS[1], 'row') or ''
"""

# KEYS: workers set. ARGV: this worker ("" = none), ttl ms, heartbeat key prefix, find dead
# ("1"/"0"). Sets this worker's heartbeat and returns the members whose heartbeat expired
# (removed: one caller each).
_BEAT = """
if ARGV[1] ~= '' then
  redis.call('SET', ARGV[3] .. ARGV[1], '1', 'PX', ARGV[2])
  redis.call('SADD', KEYS[1], ARGV[1])
end
local dead = {}
if ARGV[4] == '0' then
  return dead
end
for _, w in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('EXISTS', ARGV[3] .. w) == 0 then
    redis.call('SREM', KEYS[1], w)
    table.insert(dead, w)
  end
end
return dead
"""

# KEYS: a job's attempt list. ARGV: the note (JSON), ttl s.
_NOTE = """
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
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
            "EVAL", _CLAIM, 4, claim_key(job_id), LEASES, QUEUED_JOBS, LOST_JOBS, worker, _now_ms(),
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


def reap(*, limit: int = 500, heartbeats: bool = True) -> list[tuple[str, dict | None]]:
    """Mark ``lost`` the running claims whose lease ended or (with ``heartbeats``) whose worker's
    heartbeat expired (after :func:`heartbeat_ttl_ms` of grace from the claim, for a worker's
    first beat). Returns
    ``[(job id, row)]`` of the jobs to fail ``worker_lost`` (the caller writes them;
    :func:`routing.jobs.completion_jobs_reap_expired`); their ids join :data:`LOST_JOBS`."""
    client = redis_client()
    now = _now_ms()
    ids = [i.decode() for i in client.zrange(LEASES, 0, limit - 1)]
    if not ids:
        return []
    script = _script(client, _REAP)
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        script(
            keys=[claim_key(job_id), LEASES, LOST_JOBS],
            args=[now, job_id, HEARTBEAT_PREFIX, heartbeat_ttl_ms() if heartbeats else -1],
            client=pipe,
        )
    return [
        (j, json.loads(raw) if raw else None)
        for j, raw in zip(ids, pipe.execute(), strict=True)
        if raw is not None
    ]


def heartbeat_ttl_ms() -> int:
    """How long a worker's heartbeat lasts without renewal (ms): ``WORKER_HEARTBEAT_TTL_S``."""
    return int(settings.WORKER_HEARTBEAT_TTL_S * 1000)


def beat(worker: str | None, *, find_dead: bool = True) -> list[str]:
    """Set ``worker``'s heartbeat (``None``: only look) and, with ``find_dead``, return the
    workers whose heartbeat expired since anyone last looked: each dead worker is returned to
    one caller only, which must reap (one script, one round trip). Raises ``redis.RedisError``."""
    client = redis_client()
    args = [worker or "", heartbeat_ttl_ms(), HEARTBEAT_PREFIX, "1" if find_dead else "0"]
    return [w.decode() for w in _script(client, _BEAT)(keys=[WORKERS], args=args)]


def alive(workers: Iterable[str]) -> set[str]:
    """Which of ``workers`` have a live heartbeat (one round trip). Raises ``redis.RedisError``."""
    names = list(workers)
    if not names:
        return set()
    pipe = redis_client().pipeline(transaction=False)
    for name in names:
        pipe.exists(f"{HEARTBEAT_PREFIX}{name}")
    return {name for name, n in zip(names, pipe.execute(), strict=True) if n}


def queue_published(pipe, job_id: str, *, row: dict[str, Any] | None, stream: bool) -> None:
    """Add to a pipeline the script that records a just-published job as ``queued`` (findable,
    and in :data:`QUEUED_JOBS` until a claim takes it); a job a claim already took is left as it
    is (a task published again)."""
    pipe.eval(_PUBLISHED, 2, claim_key(job_id), QUEUED_JOBS, *_published_args(job_id, row, stream))


def push_published(queue: str, entry: str, *, job_id: str, row: dict[str, Any] | None, stream: bool) -> int:
    """Push the task message ``entry`` onto the broker list ``queue`` and record the job as
    :func:`queue_published` does, in one script (atomic: both or neither; safe to retry: the
    record is written once, a second message is a second delivery the claim turns away). One
    command instead of a ``MULTI`` of two: less of the web's CPU per publish
    (``bench/bench_publish.py``; bench/README.md). Returns the list's length. Raises
    ``redis.RedisError``."""
    return redis_client().eval(
        _PUBLISH, 3, claim_key(job_id), QUEUED_JOBS, queue, *_published_args(job_id, row, stream), entry
    )


def _published_args(job_id: str, row: dict[str, Any] | None, stream: bool) -> list[Any]:
    row_json = json.dumps(row, separators=(",", ":")) if row is not None else ""
    return [_now_ms(), ttl_s(), row_json, "1" if stream else "0", job_id]


def unclaimed(*, before_ms: int, limit: int = 500) -> list[tuple[str, dict | None, bool]]:
    """``[(job id, row, stream)]`` of jobs published before ``before_ms`` (epoch ms) that no claim
    has taken. Ids whose record is gone or taken are dropped from :data:`QUEUED_JOBS`; the caller
    re-scores those it published again (:func:`republished`). Raises ``redis.RedisError``."""
    client = redis_client()
    ids = [i.decode() for i in client.zrangebyscore(QUEUED_JOBS, "-inf", before_ms, start=0, num=limit)]
    if not ids:
        return []
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hmget(claim_key(job_id), "st", "row", "s")
    found, gone = [], []
    for job_id, (st, row, stream) in zip(ids, pipe.execute(), strict=True):
        if st == b"queued":
            found.append((job_id, json.loads(row) if row else None, stream == b"1"))
        else:
            gone.append(job_id)
    if gone:
        client.zrem(QUEUED_JOBS, *gone)
    return found


def republished(job_ids: Iterable[str]) -> None:
    """Re-score jobs just published again to now, so that they come back only after another
    wait (or another death); a job a claim took meanwhile stays out. Raises ``redis.RedisError``."""
    now = _now_ms()
    ids = list(job_ids)
    if ids:
        redis_client().zadd(QUEUED_JOBS, dict.fromkeys(ids, now), xx=True)


def notes_key(job_id: str) -> str:
    return f"muse:job:{job_id}{NOTES_SUFFIX}"


def queue_attempt_note(pipe, job_id: str, note: dict[str, Any]) -> None:
    """Add to a pipeline the command (one reply) that notes an attempt about to call upstream
    (JSON: ``endpoint``, ``at`` its start in epoch ms) in the job's attempt list (kept :func:`ttl_s`)."""
    pipe.eval(_NOTE, 1, notes_key(job_id), json.dumps(note, separators=(",", ":")), ttl_s())


def forget_last_note(job_id: str) -> None:
    """Drop the last attempt note of ``job_id``: its attempt was refused before calling upstream."""
    redis_client().rpop(notes_key(job_id))


def attempt_notes(job_id: str) -> list[dict[str, Any]]:
    """The attempts noted for ``job_id`` in the order they started. Raises ``redis.RedisError``."""
    return [json.loads(n) for n in redis_client().lrange(notes_key(job_id), 0, -1)]


def mark_lost(job_ids: Iterable[str]) -> None:
    """Add jobs failed ``worker_lost`` outside the Redis claims (their row was the claim) to
    :data:`LOST_JOBS`, so that the reaper records their attempts. Raises ``redis.RedisError``."""
    ids = [str(i) for i in job_ids]
    if ids:
        redis_client().sadd(LOST_JOBS, *ids)


def lost_pending(*, limit: int = 500) -> list[str]:
    """Ids of lost jobs whose attempts are not recorded yet. Raises ``redis.RedisError``."""
    return [i.decode() for i in redis_client().srandmember(LOST_JOBS, limit) or []]


def forget_lost(job_id: str) -> None:
    """The lost job's attempts are recorded: drop it from :data:`LOST_JOBS` with its notes."""
    pipe = redis_client().pipeline(transaction=True)
    pipe.srem(LOST_JOBS, job_id)
    pipe.delete(notes_key(job_id))
    pipe.execute()


def queue_done(pipe, job_id: str) -> None:
    """Add to a ``MULTI`` pipeline the commands that mark a job's claim ``done`` (its records and
    final state are buffered in the same transaction). The row stays until the drainer has
    written it (:func:`queue_forget_row`): until then ``GET /api/v1/completions/{id}`` reads it here."""
    key = claim_key(job_id)
    pipe.hset(key, "st", DONE)
    pipe.expire(key, ttl_s())
    pipe.zrem(LEASES, job_id)
    pipe.delete(notes_key(job_id))


def queue_forget_row(pipe, job_id: str) -> None:
    """Add to a pipeline the command that drops the row a job's claim kept (now written to the
    database)."""
    pipe.hdel(claim_key(job_id), "row")


def unwritten(job_id: str) -> tuple[dict, datetime | None, str] | None:
    """``(row, started, worker)`` of a job published or claimed here whose row is not in the
    database yet (queued: ``started`` None and ``worker`` empty; running, lost and not yet
    failed, or done and not drained), else None. Raises ``redis.RedisError``."""
    st, row, worker, at = redis_client().hmget(claim_key(job_id), "st", "row", "w", "at")
    if st not in (b"queued", b"running", b"lost", b"done") or not row or not at:
        return None
    if st == b"queued":
        return json.loads(row), None, ""
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
