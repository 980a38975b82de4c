"""The reaper: nothing a dead worker held stays unknown.

A worker's death (its heartbeat expired, :func:`routing.state.claims.beat`, or its lease lapsed) leaves
three kinds of work behind, and :func:`reap_lost_work` settles each, idempotently (any number of
reapers may run it, any number of times):

1. jobs it was running: failed ``worker_lost`` (:func:`routing.jobs.completion_jobs_reap_expired`),
   never re-run — their attempt may have reached the provider, which must not be called twice;
2. the attempts those jobs had started (noted before each upstream call,
   :func:`routing.state.claims.queue_attempt_note`): recorded as a failed call whose attempts are
   ``lost`` with their cost unknown (:func:`lost_attempts_record`), so a billed call is never
   silently absent; they count in ``cost_unknown`` of the call rollups and in
   ``muse_attempts_cost_unknown_total``;
3. jobs published but not claimed, whose task message it may have taken with it (a Redis
   broker hands a message over before it is recorded, :mod:`muse_experiments.infra.broker`):
   published again (:func:`republish_unclaimed`) — at once after a death, else once they waited
   ``COMPLETION_REQUEUE_AFTER_S``. Their claim lets exactly one delivery run each.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError
from django.utils import timezone

from routing.jobs import WORKER_LOST, completion_jobs_reap_expired
from routing.metrics import observe_outcome
from routing.models import CompletionJob, JobStatus
from routing.pipeline.planning import job_plan
from routing.pipeline.records import call_payload, records_write
from routing.pipeline.serving import AttemptLog, ServeOutcome
from routing.state import claims

log = logging.getLogger(__name__)

#: The outcome of an attempt that died with its worker (its cost is unknown).
LOST_OUTCOME = "lost"
#: ``publish(job_id, row, stream)``: publish a job's task again (:func:`routing.worker.tasks.republish`).
Publish = Callable[[str, "dict | None", bool], None]


def reap_lost_work(*, death: bool, publish: Publish, heartbeats: bool = True) -> int:
    """Settle what dead workers left (module docstring). ``death``: a worker's heartbeat was just
    found expired, so unclaimed jobs are published again at once. ``heartbeats``: whether other
    workers' heartbeats may be read (the caller has beaten steadily itself), else only leases
    tell a death. Returns how many running jobs were failed ``worker_lost``. Each step logs and
    leaves to the next run what Redis or the database refused."""
    failed = completion_jobs_reap_expired(heartbeats=heartbeats)
    try:
        lost_attempts_record()
    except Exception:  # noqa: BLE001 - the ids stay in LOST_JOBS for the next run
        log.exception("recording the attempts of lost jobs failed")
    try:
        republish_unclaimed(death=death, publish=publish)
    except Exception:  # noqa: BLE001 - the next run (or the waiting request) publishes them
        log.exception("publishing unclaimed jobs again failed")
    return failed


def lost_attempts_record(*, limit: int = 500) -> int:
    """Record the attempts of jobs failed ``worker_lost`` (:data:`routing.state.claims.LOST_JOBS`): one
    failed call record (error kind ``worker_lost``) whose attempts are ``lost``, cost unknown,
    latency up to when the job was found lost. A job with no noted attempt died before calling
    upstream: nothing to record. Returns how many calls were recorded. Idempotent (the write
    skips a job that has a call record); a job whose row is not written yet waits for the next
    run. Raises what Redis or the database raised."""
    recorded = 0
    for job_id in claims.lost_pending(limit=limit):
        notes = claims.attempt_notes(job_id)
        if notes:
            job = CompletionJob.objects.filter(pk=job_id).first()
            if job is None:
                continue
            try:
                recorded += records_write([lost_call_payload(job, notes)])
            except IntegrityError:  # another reaper (or its answer) recorded the call meanwhile
                continue  # the next run finds it recorded and forgets the job
        claims.forget_lost(job_id)
    if recorded:
        log.warning("recorded %d call(s) whose attempts died with their worker (cost unknown)", recorded)
    return recorded


def lost_call_payload(job: CompletionJob, notes: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The :func:`routing.pipeline.records.call_payload` of a call that died with its worker: planned again
    (the plan is the job's, as the worker made it unless the configuration changed meanwhile),
    failed ``worker_lost``, with one ``lost`` attempt per note."""
    finished = job.finished_at or timezone.now()
    outcome = ServeOutcome(
        result=None, served=None, reason="", error_kind="worker_lost", error_message=WORKER_LOST,
        attempts=[_lost_attempt(note, finished) for note in notes],
    )  # fmt: skip
    decision, chain, outcome.reason = job_plan(job)
    observe_outcome(
        experiment=decision.experiment_key,
        variant=decision.variant_key,
        assigned=chain[0].endpoint.public_id if chain else "",
        outcome=outcome,
    )
    final = {
        "status": JobStatus.FAILED,
        "result": None,
        "error": WORKER_LOST,
        "finished_at": finished.isoformat(),
    }
    return call_payload(job, decision, chain, outcome, final)


def _lost_attempt(note: Mapping[str, Any], finished: datetime) -> AttemptLog:
    started = datetime.fromtimestamp(note["at"] / 1000, tz=finished.tzinfo)
    return AttemptLog(
        note["endpoint"], LOST_OUTCOME, max((finished - started) / timedelta(milliseconds=1), 0.0),
        cost_unknown=True,
    )  # fmt: skip


def republish_unclaimed(*, death: bool, publish: Publish) -> int:
    """Publish again the jobs published and not claimed (:func:`routing.state.claims.unclaimed`): all of
    them after a worker's death, else those that waited ``COMPLETION_REQUEUE_AFTER_S``. Returns
    how many. Raises ``redis.RedisError``."""
    now_ms = int(timezone.now().timestamp() * 1000)
    before = now_ms if death else now_ms - int(settings.COMPLETION_REQUEUE_AFTER_S * 1000)
    jobs = claims.unclaimed(before_ms=before)
    # a job whose row is written (its waiting request wrote it, or a claim did while Redis was
    # down) is published without its row: claimed through the row, it never runs twice
    ids = [job_id for job_id, _, _ in jobs]
    written = {str(pk) for pk in CompletionJob.objects.filter(pk__in=ids).values_list("pk", flat=True)}
    for job_id, row, stream in jobs:
        publish(job_id, None if job_id in written else row, stream)
    claims.republished(ids)
    if jobs:
        log.warning("published %d unclaimed completion task(s) again", len(jobs))
    return len(jobs)
