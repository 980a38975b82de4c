"""A validated drop-in call becomes a job: model resolution, the output-contract check, submission
and the wait for a non-streamed answer.

* Model: an alias in :data:`routing.pipeline.planning.ROUTING_ALIASES` (``muse-default``) lets the running
  experiments decide; an endpoint public id (``avocado/<hex>``, ``azure/muse-special``) pins it
  (reason ``forced``, no experiment). Anything else is a 404 ``model_not_found``.
* Output contracts (a JSON Schema or JSON mode for the answer, a forced tool call): a call whose
  plan has no model that honours them is a 400 naming the field, before any job exists
  (:func:`refuse_unhonoured_contracts`). For an alias the plan is the unit's chain (assigned
  variant, the experiment's control, the platform default); when some of it can honour them, the
  others are skipped with reason ``unsupported_contract`` (:func:`routing.pipeline.attempts.attempt`).
* Jobs run through the same job + worker path as ``POST /api/v1/completions``; ``Idempotency-Key``
  makes a retry return the same job; ``X-Muse-Subagent`` names the subagent.
* Answers carry ``x-muse-job-id``, ``x-muse-served-model``, ``x-muse-experiment`` and
  ``x-muse-variant`` headers (:func:`muse_headers`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings

from muse_experiments.api.auth import ApiClient
from routing.guards.killswitch import kill_state
from routing.models import CompletionJob, JobStatus
from routing.pipeline.attempts import EndpointRefused
from routing.pipeline.planning import ROUTING_ALIASES, unhonoured_contract
from routing.selectors import catalogue
from routing.web.dispatch import caller_gone_check, submit_completion, wait_for_job

from .errors import DropinError, require
from .identity import header_text, identity
from .shapes import DropinCall

#: What each output contract asks of a model, for errors.
CONTRACT_WORDS = {
    "structured_output": "an answer that follows a JSON Schema",
    "json_mode": "an answer in JSON mode",
    "tools": "a forced tool call",
}


def resolve_model(model: str) -> str | None:
    """``None`` for a routing alias (experiments decide); the endpoint id for a pinned model.
    Raises :class:`DropinError` (404 ``model_not_found``) for anything else, naming the id of a
    model whose version label was sent."""
    if model in ROUTING_ALIASES:
        return None
    known = catalogue()
    if known.get(model) is None:
        aliases = " or ".join(f"'{alias}'" for alias in sorted(ROUTING_ALIASES))
        labelled = sorted(e.public_id for e in known.endpoints.values() if e.version_label == model)
        hint = (
            f" '{model}' is a version label: pin the model by its id, '{labelled[0]}'."
            if len(labelled) == 1
            else ""
        )
        raise DropinError(
            f"The model '{model}' does not exist. Use {aliases} (the experiments decide) or a catalogue "
            f"model id.{hint}",
            kind="not_found",
            param="model",
        )
    return model


def refuse_unavailable_pinned_stream(model: str | None) -> None:
    """A *streamed* call pinned to a model that is disabled or under a kill switch: raise the 503
    ``model_unavailable`` a non-streamed call gets (same message, naming the kill) before the
    stream starts, rather than a 200 stream that ends in an error event. Nothing is recorded for
    it: no job is created. Routed calls (an alias) are not affected: they fall back."""
    info = catalogue().get(model) if model else None
    if info is None:
        return
    if not info.enabled:
        raise DropinError(
            EndpointRefused(info.public_id, "disabled").unavailable_message(), kind="model_unavailable"
        )
    kill = kill_state().endpoint_kill(
        public_id=info.public_id, provider_key=info.provider_key, is_external=info.is_external
    )
    if kill is not None:
        refused = EndpointRefused(info.public_id, "killed", kill.reason, kill)
        raise DropinError(refused.unavailable_message(), kind="model_unavailable")


def refuse_unhonoured_contracts(call: DropinCall, planned: Callable[[], CompletionJob]) -> None:
    """A 400 naming the field (``response_format``, ``text.format``, ``output_config.format``,
    ``tool_choice``) when no model of the plan of ``planned()`` (the job about to be submitted,
    unsaved) can honour the call's output contracts (:func:`routing.pipeline.planning.unhonoured_contract`).
    Calls without such contracts cost nothing here."""
    if call.output_format is None and (call.tool_choice is None or not call.tool_choice.forces_call):
        return
    contract = unhonoured_contract(planned())
    if contract is None:
        return
    need = call.output_format.capability if contract == "output_format" else "tools"
    field, what = call.contract_fields[contract], CONTRACT_WORDS[need]
    if call.model in ROUTING_ALIASES:
        message = f"'{field}': no model that '{call.model}' routes this call to can honour {what}."
    else:
        message = f"'{field}': the model '{call.model}' cannot honour {what}."
    raise DropinError(message, param=field)


def submit(request, call: DropinCall, *, pinned: str | None) -> CompletionJob:
    """Create and dispatch the job for a drop-in call (``pinned``: the endpoint id of a pinned
    model, else ``None``). Raises :class:`DropinError` for a bad id or header, an unavailable
    pinned model (streams), or output contracts no model of the plan honours."""
    require(bool(call.messages), "At least one message is required.", "messages")
    if call.stream:
        refuse_unavailable_pinned_stream(pinned)
    session_id, user_id, anonymous = identity(
        request, user=call.user, safety_identifier=call.safety_identifier, metadata=call.metadata
    )
    subagent = header_text(request, "X-Muse-Subagent")
    idempotency_key = header_text(request, "Idempotency-Key")
    # "cancellable": a caller that gives up has its upstream call closed at once (routing.worker.tasks)
    body: dict[str, Any] = {"messages": call.messages, "tools": call.tools, "cancellable": True}
    if anonymous:
        # a unit of its own: no sticky lookup, no reasoning kept (routing.pipeline.planning.is_anonymous)
        body["anonymous"] = True
    if pinned:
        body["model"] = pinned
    body.update(call.stored_contracts())
    refuse_unhonoured_contracts(
        call, lambda: CompletionJob(session_id=session_id, user_id=user_id, subagent=subagent, request=body)
    )
    job, _ = submit_completion(
        api_key=request.user.key if isinstance(request.user, ApiClient) else None,
        session_id=session_id,
        user_id=user_id,
        subagent=subagent,
        attributes={},
        request=body,
        idempotency_key=idempotency_key,
        stream=call.stream,
        durable=False,  # the caller waits for the answer on this request
    )
    return job


def finished_job(job: CompletionJob, request=None) -> CompletionJob:
    """Wait (``DROPIN_WAIT_S``) for a non-streamed job; raise DropinError if it failed or timed out.

    With the HTTP ``request``, a caller that gives up while waiting (its client's timeout) cancels
    the job: the worker closes the upstream call and records it ``cancelled``."""
    if job.status in (JobStatus.QUEUED, JobStatus.RUNNING):
        gone = caller_gone_check(request.META) if request is not None else None
        job = wait_for_job(job, timeout_s=settings.DROPIN_WAIT_S, caller_gone=gone)
    if job.status == JobStatus.SUCCEEDED:
        return job
    if job.status == JobStatus.FAILED:
        kind, _, detail = (job.error or "").partition(": ")
        if kind == "model_unavailable":
            raise DropinError(detail, kind="model_unavailable")
        if kind == "unsupported_contract":  # the catalogue changed since the call was checked
            raise DropinError(detail)
        raise DropinError(f"The completion failed: {job.error}", kind="upstream")
    raise DropinError(f"The completion is still running (job {job.id}).", kind="timeout")


def muse_headers(job: CompletionJob) -> dict[str, str]:
    """The ``x-muse-*`` headers of a finished job's answer."""
    result = job.result or {}
    headers = {"x-muse-job-id": str(job.id)}
    for name, key in (
        ("x-muse-served-model", "served_model"),
        ("x-muse-experiment", "experiment"),
        ("x-muse-variant", "variant"),
        ("x-muse-reason", "reason"),
    ):
        if result.get(key):
            headers[name] = str(result[key])
    kill = result.get("kill")
    if kill:
        headers["x-muse-kill"] = f"{kill['scope']}:{kill['target']}" if kill.get("target") else kill["scope"]
    return headers
