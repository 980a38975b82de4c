"""The inference proxy's core: decide which model serves a job, call it, record what happened.

``execute_job`` is what the Celery task runs. It reads as a line of steps, one module per step,
each importable on its own:

1. claim the job (:func:`routing.jobs.completion_job_claim`; with Redis, a job whose row
   came in the task message is claimed in Redis, :mod:`routing.state.claims`, and its row written
   with its records; a redelivered task for a finished or claimed job does nothing);
2. plan (:mod:`routing.pipeline.planning`): the pure assignment engine on the cached configuration snapshot, with the unit's
   durable sticky assignments (one indexed query);
3. serve (:mod:`routing.pipeline.serving`, each try one guarded call of :mod:`routing.pipeline.attempts`): try
   the candidate chain — assigned variant, the experiment's control, the platform
   default — each candidate with its own variant's overrides. Per candidate, up to
   ``1 + ROUTING_MAX_RETRIES`` guarded attempts (:func:`attempt`) with exponential backoff and
   full jitter (or the upstream's ``retry-after``, capped; :mod:`routing.pipeline.retry`) for retryable
   failures; then the next candidate;
4. record (:mod:`routing.pipeline.recording`), in one transaction: the exposure (intent-to-treat: recorded even when a fallback
   served), the call record with every attempt, and the job's public result.

Fallback triggers and the ``reason`` a CallRecord gets when a later candidate serves (the cause
that made routing leave the *first* candidate):

* ``experiment_killed`` / ``variant_killed`` / ``endpoint_killed`` / ``provider_killed`` /
  ``external_killed`` — the kill switch that refused the candidate (all external also when failing
  closed or forced by ``MUSE_KILL_EXTERNAL``; a disabled endpoint counts as ``endpoint_killed``). A
  kill of the unit's experiment or assigned variant gives that reason even when the control is the
  first candidate, and the unit is not enrolled (no exposure, no sticky write);
* ``cooling`` — the endpoint answered with a ``retry-after`` beyond the retry policy's cap, or is
  still cooling from one (:mod:`routing.guards.cooling`): no retry, no call until then;
* ``circuit_open`` — the endpoint's circuit breaker is open (or half-open with its probe in
  flight), or the endpoint is at ``max_concurrency`` (Attempt outcome ``concurrency_limited``):
  in both cases the endpoint is protected and was not called;
* ``error_fallback`` — retries exhausted on retryable errors (429, 5xx, 529, timeout, reset,
  malformed body, in-stream error before content), an authentication failure, a missing
  credential, or a credential the binding does not let go to the endpoint's host
  (``credential_not_allowed``, :func:`routing.guards.credentials.credential_for`: nothing is sent) --
  endpoint problems, not retried on the same endpoint.

A 4xx caused by the request itself (``ClientRequestError`` other than 401/403) is not retried
and ends the call: it would fail the same way elsewhere. When the first candidate serves, the
reason is the decision's (``assigned``, ``forced``, ``sticky``, ``holdout``, ``default``). A call
no candidate could serve because each was killed fails ``model_unavailable`` (a pinned model
under a kill: the drop-ins answer 503) with the kill's reason.

Streaming (:mod:`routing.pipeline.streaming`) runs the same steps with :func:`routing.pipeline.serving.serve_stream`.
A stream that has already sent content to the client is never restarted:
:func:`routing.pipeline.attempts.attempt_stream` yields a final ``error`` event whose
``StreamFailed.after_content`` is True, and the caller must end the response there instead of
trying the next candidate.

Encrypted reasoning returned by external providers never reaches the job result or the database:
only ``CompletionResult.to_public_dict()`` is stored.
"""

from __future__ import annotations

from muse_experiments.infra.deferral import run_deferred
from routing.jobs import completion_job_claim
from routing.models import CompletionJob
from routing.pipeline.planning import build_request, job_plan, state_session
from routing.pipeline.recording import record_call
from routing.pipeline.serving import serve


def execute_job(*, job_id: str, row: dict | None = None) -> str:
    """Run one completion job end to end. Returns the job's final status; safe to call twice.

    ``row``: the job's row when it is not written yet (:func:`routing.jobs.completion_job_new`).

    Each upstream call is non-streamed; with Redis, a caller that goes away (the job's cancel flag,
    :func:`routing.web.relay.job_cancel_request`) has it cut off within ~0.2 s and the job ends
    ``cancelled`` / ``client_disconnected`` (:data:`routing.pipeline.cancel.cancel_watcher`)."""

    job = completion_job_claim(job_id=job_id, row=row)
    if job is None:
        return CompletionJob.objects.filter(pk=job_id).values_list("status", flat=True).first() or "missing"
    decision, chain, reason = job_plan(job)
    request = build_request(job, {})
    with run_deferred():  # what the attempts defer (their bookkeeping) runs after the answer
        outcome = serve(request, chain, reason, session=state_session(job), job_id=job_id)
        record_call(job, decision, chain, outcome)
    return job.status
