"""Every write of a :class:`~routing.models.CompletionJob` row, and the row's message form.

The one module that creates or updates job rows (``tests/test_architecture.py`` holds that line):

* the web side's queued write (:func:`completion_job_create`, :func:`completion_job_materialize`,
  :func:`completion_job_hand_out`) and a job failed before it ran (:func:`completion_job_fail`);
* the worker's claim (:func:`completion_job_claim`), lease renewal
  (:func:`completion_jobs_renew_leases`) and reaping (:func:`completion_jobs_reap_expired`);
* the drainer's writes (:func:`completion_jobs_insert` for jobs claimed without a row,
  :func:`completion_jobs_finish` for every final state);
* the cancel flag set when Redis refused it (:func:`completion_job_flag_cancel`).

A deferred job's row travels in its task message (:func:`routing.messages.job_row`,
:func:`routing.messages.job_from_row`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from muse_experiments.infra import bulk_sql
from muse_experiments.infra.commit import relax_commit_durability
from muse_experiments.infra.storage_text import storable
from routing.idempotency import request_fingerprint, same_request
from routing.messages import job_from_row
from routing.models import FINISHED_STATUSES, CompletionJob, JobStatus
from routing.state import claims
from routing.state.events import publish_failure
from routing.state.handoff import publish_final

log = logging.getLogger(__name__)


def completion_job_create(
    *,
    api_key: Any,
    session_id: str,
    user_id: str,
    subagent: str,
    attributes: Mapping[str, Any],
    request: Mapping[str, Any],
    idempotency_key: str = "",
    stream: bool = False,
    durable: bool = True,
) -> tuple[CompletionJob, bool]:
    """Create a queued job, or return the existing one for the same idempotency key.

    ``request`` is ``{"messages": [...], "tools": [...]}`` plus, for a caller that pins a model,
    ``"model": <endpoint public id>``. ``stream`` makes the worker publish deltas (routing.pipeline.streaming).
    Returns ``(job, created)``. The caller enqueues the worker task on commit when ``created``.

    ``durable=False`` is for a caller that waits for the answer on this request (drop-ins, native
    sync and streamed calls): the insert commits without waiting for the WAL flush
    (:func:`relax_commit_durability`), taking one fsync off every call's path. Only a
    PostgreSQL *crash* in the next ≈0.6 s can forget such a job, and then its caller, still
    waiting, gets an error; a job id handed out for later (``async``) is always durable.
    """
    payload = request_fingerprint(session_id, user_id, subagent, attributes, request, stream)
    if idempotency_key:
        existing = CompletionJob.objects.filter(api_key=api_key, idempotency_key=idempotency_key).first()
        if existing:
            return same_request(existing, payload), False
    try:
        # a savepoint only where a concurrent request can make the insert fail (the same key)
        with transaction.atomic(savepoint=bool(idempotency_key)):
            if not durable:
                relax_commit_durability()
            job = completion_job_new(
                api_key=api_key, session_id=session_id, user_id=user_id, subagent=subagent,
                attributes=attributes, request=request,
            )  # fmt: skip
            job.idempotency_key, job.stream = idempotency_key, stream
            job.save(force_insert=True)
    except IntegrityError:  # a concurrent request with the same idempotency key won
        existing = CompletionJob.objects.get(api_key=api_key, idempotency_key=idempotency_key)
        return same_request(existing, payload), False
    return job, True


def completion_job_new(
    *,
    api_key: Any,
    session_id: str,
    user_id: str,
    subagent: str,
    attributes: Mapping[str, Any],
    request: Mapping[str, Any],
) -> CompletionJob:
    """A queued, non-streamed job that is *not* written yet (``job._state.adding`` stays True).

    For a caller that waits for the answer on this request and gave no idempotency key: no
    database round trip before the task is published. Its message carries :func:`routing.messages.job_row`; the
    worker claims the job from it (:func:`completion_job_claim` with ``row``: in Redis, its row
    written with the call's records; the row written ``running`` when Redis fails) — still before
    any upstream call — and the waiting request writes it itself
    (:func:`completion_job_materialize`) if it has to hand the job id out unanswered or the task
    looks lost.
    """
    return CompletionJob(
        id=uuid.uuid4(),
        api_key=api_key,
        session_id=session_id,
        user_id=user_id,
        subagent=subagent,
        attributes=storable(dict(attributes)),
        request=storable(dict(request)),
        created_at=timezone.now(),
    )


def _insert_statement(jobs: Sequence[CompletionJob]) -> tuple[str, list[Any]]:
    """``INSERT … VALUES (…), … ON CONFLICT (id) DO NOTHING RETURNING id`` for ``jobs`` as they
    are (no ``auto_now_add``: a deferred job keeps the time its request came)."""
    table = CompletionJob._meta.db_table
    ops = connection.ops
    fields = CompletionJob._meta.concrete_fields
    row = f"({', '.join(['%s'] * len(fields))})"
    sql = (
        f"INSERT INTO {ops.quote_name(table)} ({', '.join(ops.quote_name(f.column) for f in fields)}) "
        f"VALUES {', '.join([row] * len(jobs))} ON CONFLICT ({ops.quote_name('id')}) DO NOTHING "
        f"RETURNING {ops.quote_name('id')}"
    )
    return sql, [f.get_db_prep_save(getattr(job, f.attname), connection) for job in jobs for f in fields]


def _insert_new(job: CompletionJob) -> bool:
    """``INSERT … ON CONFLICT (id) DO NOTHING`` (autocommit). True if this call wrote the row.

    A job whose API key was deleted meanwhile is written without it (as ``on_delete=SET_NULL``
    would have left it)."""
    for attempt in range(2):
        sql, values = _insert_statement([job])
        try:
            # one statement in autocommit (its foreign key checked as it commits); a savepoint inside
            # a caller's transaction
            scope = transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()
            with scope, connection.cursor() as cursor:
                cursor.execute(sql, values)
                return cursor.fetchone() is not None
        except IntegrityError:
            if attempt or job.api_key_id is None:
                raise
            job.api_key_id = None
    return False  # pragma: no cover - the loop returns or raises


def completion_jobs_insert(jobs: Sequence[CompletionJob]) -> int:
    """Write the rows of jobs claimed without one (:mod:`routing.state.claims`), in one statement,
    skipping those already written. Returns how many it wrote. Meant for a caller's transaction
    (the write-behind drainer's): a job whose API key was deleted meanwhile is written without it
    (checked first: PostgreSQL checks the foreign key only at the commit)."""
    if not jobs:
        return 0
    keys = {j.api_key_id for j in jobs if j.api_key_id is not None}
    if keys:
        model = CompletionJob._meta.get_field("api_key").related_model
        live = set(model.objects.filter(pk__in=keys).values_list("pk", flat=True))
        for job in jobs:
            if job.api_key_id is not None and job.api_key_id not in live:
                job.api_key_id = None
    sql, values = _insert_statement(jobs)
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
        return len(cursor.fetchall())


def completion_job_materialize(job: CompletionJob) -> bool:
    """Write a job not written yet (:func:`completion_job_new`, or read from its message) as it is
    (``queued``) unless its row exists (the worker wrote it first). Returns True if this call
    wrote it (no worker has claimed the job); either way ``job`` counts as saved afterwards.

    Called by the request waiting for it before it hands the job id out unanswered, and when its
    task looks lost (``COMPLETION_REQUEUE_AFTER_S`` without a row)."""
    written = _insert_new(job)
    job._state.adding, job._state.db = False, connection.alias
    return written


def completion_job_hand_out(job: CompletionJob) -> bool:
    """Write a deferred job's row before its id is handed out or its task published again: as its
    Redis claim says (``running``, :func:`routing.state.claims.running`) if a worker took it, else
    ``queued``. Returns True if this call wrote it unclaimed (the caller may publish it again)."""
    taken = None
    try:
        taken = claims.running(str(job.id))
    except Exception as exc:  # noqa: BLE001 - Redis down: write it queued (the claim decides later)
        log.warning("reading the claim of job %s failed (%s)", job.id, type(exc).__name__)
    if taken is not None:
        job.worker, job.started_at, job.lease_expires_at = taken
        job.status, job.deliveries = JobStatus.RUNNING, 1
    return completion_job_materialize(job) and taken is None


#: Error stored on a job whose worker died during the upstream call (see :func:`completion_job_claim`).
WORKER_LOST = "worker_lost: the worker died during the upstream call; not retried, so the provider is never called twice for one attempt"


def worker_identity() -> str:
    """``host:pid`` of this process: who holds a job's lease."""
    return f"{socket.gethostname()}:{os.getpid()}"


def completion_job_claim(
    *,
    job_id,
    worker: str | None = None,
    row: Mapping[str, Any] | None = None,
) -> CompletionJob | None:
    """Take a job for this worker, under a row lock. Returns the running job, or None to do nothing.

    * ``queued`` → ``running``: ``deliveries`` + 1, a lease of ``settings.COMPLETION_LEASE_S``
      seconds (renewed by :class:`routing.worker.leases.LeaseKeeper` while the worker lives). Committing
      this *before* any upstream call is the attempt's intent record.
    * ``running`` with a live lease (a redelivery while the first worker still works): None.
    * ``running`` with an expired lease (the first worker died mid-call): the attempt may or may
      not have reached the provider, so the job is marked failed with :data:`WORKER_LOST` and not
      re-run — a redelivered task never calls the provider twice for the same attempt.
    * finished or missing: None.

    The common case (a queued job) costs one statement, ``UPDATE … WHERE status = 'queued'
    RETURNING *`` in autocommit; the others take the row lock. A deferred job (``row`` from its
    message, :func:`completion_job_new`) is claimed by writing its row already ``running``:
    ``INSERT … ON CONFLICT DO NOTHING``; if the row exists (a redelivery, or the waiting request
    wrote it), the cases above apply.

    Every delivery first goes through :func:`routing.state.claims.claim` (one script, one round trip);
    if Redis fails, the row is the claim, as above. A deferred job is claimed there alone: the returned job is *not written*
    (``_state.adding``), and its row reaches the database with the call's records
    (:func:`routing.pipeline.records.records_write`). A job claimed there whose lease ran out is failed
    ``worker_lost`` here; every other job (state ``db``) is claimed through its row, as above.
    """
    now = timezone.now()
    identity = (worker or worker_identity())[:200]
    job = None
    if row is not None:
        job = job_from_row(
            job_id, row, status=JobStatus.RUNNING, started_at=now, deliveries=1, worker=identity,
            lease_expires_at=now + timedelta(seconds=settings.COMPLETION_LEASE_S),
        )  # fmt: skip
    state, lost_row = _claim_in_redis(job_id, worker=identity, row=row)
    if state == claims.CLAIMED:
        return job
    if state == claims.LOST and lost_row is not None:  # its worker died mid-call
        completion_job_fail(job_id=job_id, reason=WORKER_LOST, row=lost_row)
    if state != claims.DB:  # running elsewhere, done or lost
        return None
    if row is not None:
        job = job_from_row(
            job_id, row, status=JobStatus.RUNNING, started_at=now, deliveries=1, worker=identity,
            lease_expires_at=now + timedelta(seconds=settings.COMPLETION_LEASE_S),
        )  # fmt: skip
        if completion_job_materialize(job):
            return job
    job = _claim_queued(job_id=job_id, now=now, worker=identity)
    if job is not None:
        return job
    with transaction.atomic():
        job = CompletionJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None:
            return None
        if job.status == JobStatus.QUEUED:
            job.status = JobStatus.RUNNING
            job.started_at = now
            job.deliveries += 1
            job.lease_expires_at = now + timedelta(seconds=settings.COMPLETION_LEASE_S)
            job.worker = identity
            job.save(update_fields=["status", "started_at", "deliveries", "lease_expires_at", "worker"])
            return job
        if (
            job.status == JobStatus.RUNNING
            and job.lease_expires_at is not None
            and job.lease_expires_at <= now
        ):
            job.deliveries += 1
            job.status = JobStatus.FAILED
            job.error = WORKER_LOST
            job.finished_at = now
            job.save(update_fields=["deliveries", "status", "error", "finished_at"])
            _announce_failure([job])
            _note_lost([job])
        return None


def _claim_in_redis(job_id, *, worker: str, row: Mapping[str, Any] | None) -> tuple[str, dict | None]:
    """:func:`routing.state.claims.claim`; if Redis fails, :data:`routing.state.claims.DB` (claim
    through the row). Returns ``(state, lost row)``."""
    try:
        return claims.claim(str(job_id), worker=worker, row=dict(row) if row is not None else None)
    except Exception as exc:  # noqa: BLE001 - Redis down: the database row is the claim
        log.warning("claiming job %s in Redis failed (%s); claiming its row", job_id, type(exc).__name__)
        return claims.DB, None


def _claim_queued(*, job_id, now, worker: str) -> CompletionJob | None:
    """``queued`` → ``running`` in one ``UPDATE … RETURNING`` statement; None if not queued."""
    table = CompletionJob._meta.db_table
    ops = connection.ops
    lease = now + timedelta(seconds=settings.COMPLETION_LEASE_S)
    try:
        pk = CompletionJob._meta.pk.get_db_prep_value(uuid.UUID(str(job_id)), connection)
    except ValueError:
        return None
    columns = ", ".join(ops.quote_name(f.column) for f in CompletionJob._meta.concrete_fields)
    rows = list(
        CompletionJob.objects.raw(
            f"UPDATE {ops.quote_name(table)} SET status = %s, started_at = %s, deliveries = deliveries + 1, "
            f"lease_expires_at = %s, worker = %s WHERE id = %s AND status = %s RETURNING {columns}",
            [
                JobStatus.RUNNING,
                ops.adapt_datetimefield_value(now),
                ops.adapt_datetimefield_value(lease),
                worker,
                pk,
                JobStatus.QUEUED,
            ],
        )
    )
    return rows[0] if rows else None


def completion_jobs_renew_leases(*, job_ids, worker: str) -> int:
    """Extend the leases of running jobs this worker holds by ``COMPLETION_LEASE_S`` from now:
    their rows, and their claims in Redis (:func:`routing.state.claims.renew`). Returns how many rows it
    extended. Raises what the database or Redis raised."""
    job_ids = list(job_ids)
    claims.renew(job_ids, worker=worker)
    return CompletionJob.objects.filter(pk__in=job_ids, status=JobStatus.RUNNING, worker=worker).update(
        lease_expires_at=timezone.now() + timedelta(seconds=settings.COMPLETION_LEASE_S)
    )


def completion_jobs_reap_expired(*, now=None, heartbeats: bool = True) -> int:
    """Fail running jobs whose worker died: their lease expired, or (with ``heartbeats``: the
    caller has beaten steadily, :meth:`routing.worker.leases.LeaseKeeper.steady`) their worker's
    heartbeat did (:func:`routing.state.claims.beat`). Returns how many were failed.

    The maintenance task and every worker's lease keeper run this (the keeper within a second of
    a worker's heartbeat expiring), so no job stays ``running`` forever even when its task message
    is never redelivered. It also fails the deferred jobs claimed in Redis whose lease ran out or
    whose worker died (:func:`routing.state.claims.reap`). Each failed job's id is left for
    :func:`routing.worker.reaper.lost_attempts_record` (:data:`routing.state.claims.LOST_JOBS`).
    """
    lost = _reap_redis_claims(heartbeats)
    now = now or timezone.now()
    running = CompletionJob.objects.filter(status=JobStatus.RUNNING)
    settled = running.filter(started_at__lt=now - timedelta(seconds=settings.WORKER_HEARTBEAT_TTL_S))
    dead = _dead_workers(settled) if heartbeats else []
    with transaction.atomic():
        jobs = list(
            running.select_for_update(skip_locked=True).filter(
                Q(lease_expires_at__lt=now) | Q(worker__in=dead)
            )
        )
        for job in jobs:
            job.status, job.error, job.finished_at = JobStatus.FAILED, WORKER_LOST, now
        CompletionJob.objects.bulk_update(jobs, ["status", "error", "finished_at"])
        _announce_failure(jobs)
    _note_lost(jobs)
    return lost + len(jobs)


def _dead_workers(running) -> list[str]:
    """The workers holding ``running`` jobs whose heartbeat has expired (none if Redis cannot say)."""
    workers = set(running.values_list("worker", flat=True).distinct())
    try:
        return sorted(workers - claims.alive(workers))
    except Exception as exc:  # noqa: BLE001 - Redis down: the leases decide
        log.warning("reading worker heartbeats failed (%s)", type(exc).__name__)
        return []


def _note_lost(jobs) -> None:
    """Leave lost jobs' attempts to the reaper (:data:`routing.state.claims.LOST_JOBS`); best effort."""
    try:
        claims.mark_lost(str(j.id) for j in jobs)
    except Exception as exc:  # noqa: BLE001 - the job is failed; only its attempt records wait
        log.warning("noting %d lost job(s) failed (%s)", len(jobs), type(exc).__name__)


def _reap_redis_claims(heartbeats: bool) -> int:
    """Fail ``worker_lost`` the jobs whose Redis claim's lease ran out or whose worker died.
    Returns how many."""
    try:
        expired = claims.reap(heartbeats=heartbeats)
    except Exception as exc:  # noqa: BLE001 - the next tick retries
        log.warning("reaping job claims in Redis failed (%s)", type(exc).__name__)
        return 0
    return sum(completion_job_fail(job_id=job_id, reason=WORKER_LOST, row=row) for job_id, row in expired)


def _announce_failure(jobs) -> None:
    """After commit, tell whoever waits for these jobs that they failed (stream listeners and the
    request waiting for the final state)."""
    failed = [(str(j.id), j.error, j.stream, j.finished_at) for j in jobs]
    if not failed:
        return

    def announce() -> None:
        for job_id, error, stream, finished_at in failed:
            if stream:
                publish_failure(job_id=job_id, message=error)
            state = {"status": JobStatus.FAILED, "result": None, "error": error, "finished_at": finished_at}
            publish_final(job_id=job_id, state=state)

    transaction.on_commit(announce)


def completion_job_fail(*, job_id, reason: str, row: Mapping[str, Any] | None = None) -> bool:
    """Mark a job failed unless it already finished (Celery failure hook). Returns True if it was.

    With ``row`` (a deferred job, :func:`completion_job_new`) the row is written first if missing."""
    if row is not None:
        completion_job_materialize(job_from_row(job_id, row, status=JobStatus.QUEUED))
    with transaction.atomic():
        job = (
            CompletionJob.objects.select_for_update()
            .filter(pk=job_id, status__in=[JobStatus.QUEUED, JobStatus.RUNNING])
            .first()
        )
        if job is None:
            return False
        job.status, job.error, job.finished_at = JobStatus.FAILED, storable(reason)[:2000], timezone.now()
        job.save(update_fields=["status", "error", "finished_at"])
        _announce_failure([job])
    return True


def completion_jobs_finish(states: Sequence[Mapping[str, Any]]) -> None:
    """Store each job's final state unless it already finished (a ``worker_lost`` verdict excepted).

    ``states``: the ``job`` part of :func:`routing.pipeline.records.call_payload` s, ``{"id",
    "status", "result", "error", "finished_at"}`` (``finished_at`` ISO 8601). Meant for the
    caller's transaction (:func:`routing.pipeline.records.records_write`).

    One ``UPDATE`` for the batch (:func:`muse_experiments.infra.bulk_sql.update_from_values`; Django's
    ``bulk_update`` builds a CASE expression per row and field, which cost more CPU than the rest
    of the drain); one per job where that is not supported.
    """
    if not bulk_sql.supported():
        unfinished = Q(status__in=[JobStatus.QUEUED, JobStatus.RUNNING]) | Q(
            status=JobStatus.FAILED, error=WORKER_LOST
        )
        for state in states:
            CompletionJob.objects.filter(unfinished, pk=state["id"]).update(
                status=state["status"],
                result=state["result"],
                error=state["error"],
                finished_at=datetime.fromisoformat(state["finished_at"]),
            )
        return
    pk, ops = CompletionJob._meta.pk, connection.ops
    bulk_sql.update_from_values(
        CompletionJob._meta.db_table,
        columns=[
            ("id", "uuid"),
            ("status", "text"),
            ("result", "jsonb"),
            ("error", "text"),
            ("finished_at", "timestamptz"),
        ],
        rows=[
            (
                pk.get_db_prep_value(uuid.UUID(str(state["id"])), connection),
                state["status"],
                json.dumps(state["result"]) if state["result"] is not None else None,
                state["error"],
                ops.adapt_datetimefield_value(datetime.fromisoformat(state["finished_at"])),
            )
            for state in states
        ],
        assign="status = v.status, result = v.result, error = v.error, finished_at = v.finished_at",
        where="x.id = v.id AND (x.status IN (%s, %s) OR (x.status = %s AND x.error = %s))",
        where_params=[JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.FAILED, WORKER_LOST],
    )


def completion_job_flag_cancel(*, job_id) -> None:
    """Set an unfinished job's ``cancel_requested`` flag: its caller went away and Redis refused
    the cancel key (:func:`routing.web.relay.job_cancel_request`). Harmless on a finished job."""
    CompletionJob.objects.filter(pk=job_id).exclude(status__in=FINISHED_STATUSES).update(
        cancel_requested=True
    )
