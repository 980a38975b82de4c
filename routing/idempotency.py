"""Idempotency keys of completion requests: a retry with the same key and the same request gets
the first request's job; the same key with another request is refused (HTTP 422, as Stripe does).
"""

from __future__ import annotations

import json

from rest_framework import exceptions

from routing.models import CompletionJob


class IdempotencyConflict(exceptions.APIException):
    """An idempotency key was reused with a different request (HTTP 422, as Stripe answers)."""

    status_code = 422
    default_code = "idempotency_conflict"
    default_detail = "This idempotency key was already used with a different request."


def request_fingerprint(session_id, user_id, subagent, attributes, request, stream) -> str:
    """What must match for an idempotency key's retry to be the same request. An anonymous call's
    unit id is made fresh for each request (``request["anonymous"]``), so it is left out: the
    retry gets the first request's job, unit id included."""
    if request.get("anonymous"):
        session_id = user_id = ""
    return json.dumps(
        [session_id, user_id, subagent, attributes, request, bool(stream)], sort_keys=True, default=str
    )


def same_request(job: CompletionJob, payload: str) -> CompletionJob:
    """``job`` if it was created from the same request; raises :class:`IdempotencyConflict` if not."""
    stored = request_fingerprint(
        job.session_id, job.user_id, job.subagent, job.attributes, job.request, job.stream
    )
    if stored != payload:
        raise IdempotencyConflict()
    return job
