"""What the drop-in endpoints share: identity, model resolution, job submission, errors, views.

* Auth: the SDKs' own headers (``Authorization: Bearer <muse key>`` — openai and anthropic>=2 —
  or ``x-api-key``), handled by :class:`muse_experiments.api.auth.ApiKeyAuthentication`; scope
  ``completions``; the per-key rate limit applies (429 + ``retry-after``, which the SDKs honour).
* Model: an alias in :data:`routing.planning.ROUTING_ALIASES` (``muse-default``) lets the running
  experiments decide; an endpoint public id (``avocado/<hex>``, ``azure/muse-special``) pins it
  (reason ``forced``, no experiment). Anything else is a 404 ``model_not_found``.
* Identity: ``X-Muse-Session-Id`` / ``X-Muse-User-Id`` headers, else the body's ``user``
  (OpenAI) or ``metadata.user_id`` (Anthropic / OpenAI metadata) for the user, and
  ``metadata.session_id`` for the session. Missing session → the user id; both missing → a
  fresh id per request (each call its own unit: no sticky lookup, and no encrypted reasoning
  kept for it, since no later call can continue it; :func:`routing.planning.is_anonymous`). ``X-Muse-Subagent`` names the subagent;
  ``Idempotency-Key`` makes a retry return the same job.
* Sampling parameters (temperature, max tokens, tool_choice …) are accepted for compatibility
  and ignored: the experiment variant decides them. A value the provider would refuse is a 400
  all the same (:func:`check_sampling`), and so is an unknown parameter.
* Jobs run through the same job + worker path as ``POST /api/v1/completions``.
* Responses carry ``x-muse-job-id``, ``x-muse-served-model``, ``x-muse-experiment`` and
  ``x-muse-variant`` headers; failures carry ``x-should-retry: false`` (routing already retried
  and fell back), so the SDKs do not re-submit them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework import exceptions
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from muse_experiments.api.auth import ApiClient, HasScope
from muse_experiments.api.base import MAX_JSON_DEPTH, RequestTooLarge, depth_exceeds
from muse_experiments.api.throttling import DeferredThrottleMixin, settle
from muse_experiments.experiments.validation import tool_parameters_problem, unit_id_problem
from muse_experiments.infra.storage_text import unstorable_paths

from ..attempts import EndpointRefused
from ..dispatch import caller_gone_check, submit_completion, wait_for_job
from ..killswitch import kill_state
from ..models import CompletionJob, JobStatus
from ..planning import ROUTING_ALIASES
from ..selectors import catalogue
from ..services import IdempotencyConflict
from ..streaming import KEEPALIVE_FRAME, job_events

MAX_MESSAGES = 1000
MAX_TOOLS = 128


class DropinError(Exception):
    """A client error rendered in the provider's error shape. ``kind``: invalid_request |
    not_found | timeout | upstream | model_unavailable (503: the model is under a kill switch)."""

    STATUS = {
        "invalid_request": 400,
        "not_found": 404,
        "timeout": 504,
        "upstream": 502,
        "model_unavailable": 503,
        "conflict": 409,
    }

    def __init__(self, message: str, *, kind: str = "invalid_request", param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.param = param
        self.status = self.STATUS[kind]


def require(condition: bool, message: str, param: str | None = None) -> None:
    if not condition:
        raise DropinError(message, param=param)


#: The largest output-token limit a drop-in accepts (``max_tokens`` and its kin): above every
#: served model's output limit, so a larger value is a client bug the provider would refuse.
MAX_OUTPUT_TOKENS = 1_048_576


def check_sampling(
    body: Mapping[str, Any], *, token_fields: tuple[str, ...], temperature_max: float, top_k: bool = False
) -> None:
    """Sampling parameters are ignored (the experiment variant decides them) but held to the
    provider's own types and ranges, so a client's bug is a 400 here as it would be upstream:
    ``token_fields`` positive integers, ``temperature`` a number from 0 to ``temperature_max``
    (OpenAI 2, Anthropic 1), ``top_p`` from 0 to 1, ``top_k`` (``top_k=True``) a positive integer.
    Raises :class:`DropinError` naming the field."""

    def number(value: Any) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool)

    for name in (*token_fields, *(("top_k",) if top_k else ())):
        value = body.get(name)
        ok = value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)
        require(ok, f"'{name}' must be a positive integer.", name)
        require(
            value is None or name == "top_k" or value <= MAX_OUTPUT_TOKENS,
            f"'{name}' is too large: no model writes more than {MAX_OUTPUT_TOKENS} tokens.",
            name,
        )
    for name, high in (("temperature", temperature_max), ("top_p", 1.0)):
        value = body.get(name)
        ok = value is None or (number(value) and 0 <= value <= high)
        require(ok, f"'{name}' must be a number from 0 to {high:g}.", name)


def check_tool_choice(choice: Any, tools: list[dict[str, Any]], *, style: str) -> None:
    """``tool_choice`` held to the provider's rules (it is ignored otherwise: the variant decides):
    a known value, a named tool that is among ``tools``, and no forced tool call without tools.
    ``style``: ``"chat"`` (``"none" | "auto" | "required"`` or ``{"type": "function",
    "function": {"name"}}``), ``"responses"`` (the same strings or ``{"type": "function",
    "name"}``; both also ``{"type": "allowed_tools", …}``, which needs tools) or ``"anthropic"`` (``{"type": "auto" | "any" | "none" | "tool", "name"}``).
    Raises :class:`DropinError` (400 naming ``tool_choice``)."""
    if choice is None:
        return
    names = {t["name"] for t in tools}
    if style == "anthropic":
        choice = as_object(choice, "tool_choice")
        kind = choice.get("type")
        require(
            kind in ("auto", "any", "none", "tool"),
            "tool_choice.type: must be one of 'auto', 'any', 'none', 'tool'.",
            "tool_choice.type",
        )
        named, forced = kind == "tool", kind in ("any", "tool")
        name = choice.get("name") if named else None
    elif isinstance(choice, str):
        require(
            choice in ("none", "auto", "required"),
            "Invalid value for 'tool_choice': must be 'none', 'auto', 'required' or a named function.",
            "tool_choice",
        )
        named, name, forced = False, None, choice == "required"
    else:
        choice = as_object(choice, "tool_choice")
        kind = choice.get("type")
        require(
            kind in ("function", "allowed_tools"),
            "Only function tool choices (or allowed_tools) are supported.",
            "tool_choice.type",
        )
        named = forced = True  # allowed_tools: a subset of the function tools, "auto" or "required"
        if kind == "allowed_tools":
            named, name = False, None
        else:
            spec = as_object(choice.get("function"), "tool_choice.function") if style == "chat" else choice
            name = spec.get("name")
    require(
        not forced or bool(tools),
        "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
        "tool_choice",
    )
    if named:
        require(
            isinstance(name, str) and name in names,
            f"Invalid value for 'tool_choice': tool {name!r} is not among 'tools'.",
            "tool_choice",
        )


def check_known(body: Mapping[str, Any], known: frozenset[str]) -> None:
    """400 for parameters this endpoint does not know (as OpenAI answers them)."""
    unknown = sorted(set(body) - known)
    if unknown:
        raise DropinError(f"Unrecognized request argument supplied: {unknown[0]}", param=unknown[0])


def as_object(value: Any, param: str) -> dict[str, Any]:
    require(isinstance(value, dict), f"'{param}' must be an object.", param)
    return value


def as_list(
    value: Any, param: str, *, max_len: int, allow_empty: bool = True, or_string: bool = False
) -> list[Any]:
    """``value`` if it is a list within the bounds, else a 400 naming ``param`` (``or_string``: the
    field also takes a string, which the caller has handled, so the message says both)."""
    kind = "a string or an array" if or_string else "an array"
    require(isinstance(value, list), f"'{param}' must be {kind}.", param)
    require(allow_empty or bool(value), f"'{param}' must not be empty.", param)
    require(len(value) <= max_len, f"'{param}' has more than {max_len} items.", param)
    return value


def as_str(value: Any, param: str, *, max_len: int = 200_000, allow_empty: bool = True) -> str:
    require(isinstance(value, str), f"'{param}' must be a string.", param)
    require(len(value) <= max_len, f"'{param}' is longer than {max_len} characters.", param)
    require(allow_empty or bool(value), f"'{param}' must not be empty.", param)
    return value


def parse_arguments(raw: Any, param: str) -> dict[str, Any]:
    """Tool-call arguments sent back by a client: a JSON object (string or already decoded).

    A string is held to the body's own rules: valid JSON, an object, nested at most
    ``MAX_JSON_DEPTH`` (64) levels (deeper text would exhaust the decoder's recursion), no NUL or
    lone surrogate. Raises :class:`DropinError` (a 400 naming ``param``) otherwise.
    """
    if isinstance(raw, dict):
        return raw
    text = as_str(raw, param)
    deep = f"'{param}' is nested deeper than {MAX_JSON_DEPTH} levels."
    try:
        value = json.loads(text or "{}")
    except ValueError:
        raise DropinError(f"'{param}' is not valid JSON.", param=param) from None
    except RecursionError:  # deeper than the decoder goes, so deeper than the limit
        raise DropinError(deep, param=param) from None
    require(not depth_exceeds(value, MAX_JSON_DEPTH), deep, param)
    require(isinstance(value, dict), f"'{param}' must encode a JSON object.", param)
    nul, surrogate = unstorable_paths(value, param)
    require(nul is None, f"'{nul}': NUL characters (\\u0000) are not allowed.", nul)
    require(surrogate is None, f"'{surrogate}': lone surrogate characters are not allowed.", surrogate)
    return value


def tool_spec(
    name: Any, description: Any, parameters: Any, param: str, *, schema_field: str = "parameters"
) -> dict[str, Any]:
    """Our stored tool shape, validated like ``POST /api/v1/completions`` does; ``schema_field``
    names the JSON Schema's field in errors (``input_schema`` on the Anthropic drop-in)."""
    name = as_str(name, f"{param}.name", max_len=64, allow_empty=False)
    require(
        all(c.isalnum() or c in "_-" for c in name) and name.isascii(),
        "Tool names may contain only a-z, A-Z, 0-9, _ and -.",
        f"{param}.name",
    )
    description = "" if description is None else as_str(description, f"{param}.description", max_len=4000)
    parameters = {} if parameters is None else as_object(parameters, f"{param}.{schema_field}")
    problem = tool_parameters_problem(parameters)
    if problem:
        where = f"{param}.{schema_field}{problem[0]}"
        raise DropinError(f"'{where}': {problem[1]}", param=where)
    return {"name": name, "description": description, "parameters": parameters}


def resolve_model(model: Any) -> str | None:
    """``None`` for a routing alias (experiments decide); the endpoint id for a pinned model."""
    model = as_str(model, "model", max_len=200, allow_empty=False)
    if model in ROUTING_ALIASES:
        return None
    if catalogue().get(model) is None:
        raise DropinError(
            f"The model '{model}' does not exist. Use one of {sorted(ROUTING_ALIASES)} or a catalogue model id.",
            kind="not_found",
            param="model",
        )
    return model


def refuse_unavailable_pinned_stream(model: str | None) -> None:
    """A *streamed* call pinned to a model that is disabled or under a kill switch: raise the 503
    ``model_unavailable`` a non-streamed call gets (same message, naming the kill) before the
    stream starts, rather than a 200 stream that ends in an error event. Nothing is recorded for it: no job is created. Routed
    calls (an alias) are not affected: they fall back."""
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


def header_text(request, name: str, *, max_len: int = 200) -> str:
    """A request header as the UTF-8 text the client sent ("" when absent).

    WSGI hands headers over as ISO-8859-1 (PEP 3333), so ``café`` would arrive as ``cafÃ©`` and
    never join the events that name ``café``; the bytes are decoded as UTF-8 instead. Raises
    :class:`DropinError` (400 naming the header) for bytes that are not UTF-8 or a value longer than
    ``max_len`` characters (refused, not cut: two keys sharing a prefix must not collide).
    """
    raw = request.headers.get(name) or ""
    try:
        value = raw.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        raise DropinError(f"The {name} header is not valid UTF-8.", param=name) from None
    require(len(value) <= max_len, f"The {name} header is longer than {max_len} characters.", name)
    return value


def identity(
    request, *, user: Any = None, metadata: Any = None, safety_identifier: Any = None
) -> tuple[str, str, bool]:
    """``(session_id, user_id, anonymous)`` from the X-Muse headers, else the body (see module
    docstring). ``anonymous``: neither was given, so both are a unit id made for this call.

    The user comes from, in order: the header, the body's ``user``, ``safety_identifier``
    (OpenAI's successor of ``user``), ``metadata.user_id``. Raises :class:`DropinError` (400)
    naming where a bad id came from; any of them that is not a string, or ``metadata`` that is not
    an object, is refused rather than ignored (ignoring it made the call an anonymous unit of its
    own).
    """
    require(metadata is None or isinstance(metadata, dict), "'metadata' must be an object.", "metadata")
    meta = metadata or {}

    def first(*sources: tuple[Any, str]) -> tuple[str, str]:
        for value, param in sources:  # every source is checked, used or not
            require(value is None or isinstance(value, str), f"'{param}' must be a string.", param)
        return next(((value, param) for value, param in sources if value), ("", ""))

    user_id, user_param = first(
        (header_text(request, "X-Muse-User-Id"), "X-Muse-User-Id"),
        (user, "user"),
        (safety_identifier, "safety_identifier"),
        (meta.get("user_id"), "metadata.user_id"),
    )
    session_id, session_param = first(
        (header_text(request, "X-Muse-Session-Id"), "X-Muse-Session-Id"),
        (meta.get("session_id"), "metadata.session_id"),
    )
    for value, param in ((session_id, session_param), (user_id, user_param)):
        problem = unit_id_problem(value) if value else None
        require(problem is None, f"'{param}': {problem}", param)
    anonymous = not (session_id or user_id)
    session_id = session_id or user_id or f"anon-{uuid.uuid4().hex}"
    user_id = user_id or session_id
    return session_id, user_id, anonymous


def submit(
    request,
    *,
    messages: list[dict],
    tools: list[dict],
    model: str | None,
    stream: bool,
    user=None,
    metadata=None,
    safety_identifier=None,
) -> tuple[CompletionJob, bool]:
    """Create and dispatch the job for a drop-in call. Returns ``(job, created)``."""
    require(bool(messages), "At least one message is required.", "messages")
    if stream:
        refuse_unavailable_pinned_stream(model)
    session_id, user_id, anonymous = identity(
        request, user=user, metadata=metadata, safety_identifier=safety_identifier
    )
    # "cancellable": a caller that gives up has its upstream call closed at once (routing.tasks)
    body: dict[str, Any] = {"messages": messages, "tools": tools, "cancellable": True}
    if anonymous:
        # a unit of its own: no sticky lookup, no reasoning kept (routing.planning.is_anonymous)
        body["anonymous"] = True
    if model:
        body["model"] = model
    settle(request)
    return submit_completion(
        api_key=request.user.key if isinstance(request.user, ApiClient) else None,
        session_id=session_id,
        user_id=user_id,
        subagent=header_text(request, "X-Muse-Subagent"),
        attributes={},
        request=body,
        idempotency_key=header_text(request, "Idempotency-Key"),
        stream=stream,
        durable=False,  # the caller waits for the answer on this request
    )


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
        raise DropinError(f"The completion failed: {job.error}", kind="upstream")
    raise DropinError(f"The completion is still running (job {job.id}).", kind="timeout")


def muse_headers(job: CompletionJob) -> dict[str, str]:
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


def stream_frames(
    job: CompletionJob, formatter: Callable[[Iterator[dict]], Iterator[bytes]]
) -> Iterator[bytes]:
    """SSE frames: the job's events through a provider formatter; keepalives become comments."""
    keepalive_pending = False

    def events() -> Iterator[dict]:
        nonlocal keepalive_pending
        for event in job_events(job_id=str(job.id), start_timeout_s=settings.DROPIN_WAIT_S):
            if event["type"] == "keepalive":
                keepalive_pending = True
                continue
            yield event

    for frame in formatter(events()):
        if keepalive_pending:
            keepalive_pending = False
            yield KEEPALIVE_FRAME
        yield frame


def contiguous_tool_calls(events: Iterator[dict]) -> Iterator[dict]:
    """Our events with every tool call's fragments made contiguous, for formats that stream one
    output item (Responses) or content block (Messages) at a time.

    Upstreams may interleave parallel tool calls (Chat Completions fragments carry an ``index``:
    ``{"city":`` for 0, ``{"city":`` for 1, ``"Paris"}`` for 0 …). The first tool call seen streams
    live; fragments of any other call — and text that arrives once a tool call has begun — are
    held back and released when the stream finishes, each call as one ``tool_call_delta`` that
    carries its id, name and whole arguments, in ``index`` order (calls are introduced in index
    order first: :func:`tool_calls_in_index_order`). Calls are keyed by ``index``; a call's ``id`` and
    ``name`` are the first non-empty ones seen. A stream that fails (``error``) drops what was
    held back: those calls were never complete.
    """
    live: int | None = None
    held: dict[int, dict[str, Any]] = {}
    held_text: list[str] = []
    for event in tool_calls_in_index_order(events):
        kind = event.get("type")
        if kind == "tool_call_delta":
            index = event["index"]
            if live is None:
                live = index
            if index == live:
                yield event
                continue
            call = held.setdefault(index, {"id": None, "name": None, "arguments": []})
            call["id"] = call["id"] or event.get("id")
            call["name"] = call["name"] or event.get("name")
            call["arguments"].append(event.get("arguments_delta") or "")
        elif kind == "text_delta" and live is not None:
            held_text.append(event["text"])
        elif kind == "done":
            for index, call in sorted(held.items()):
                yield {
                    "type": "tool_call_delta",
                    "index": index,
                    "id": call["id"],
                    "name": call["name"],
                    "arguments_delta": "".join(call["arguments"]),
                }
            if held_text:
                yield {"type": "text_delta", "text": "".join(held_text)}
            yield event
            return
        else:
            yield event
            if kind == "error":
                return


def tool_calls_in_index_order(events: Iterator[dict]) -> Iterator[dict]:
    """Our events with tool calls *introduced* in ``index`` order, for Chat Completions chunks.

    Chat clients (the ``openai`` SDK's stream accumulator among them) expect call ``n`` to be
    announced before call ``n + 1`` and fail on an index they have not seen the previous ones of.
    Fragments of a call whose lower-numbered calls have not appeared yet are held back until they
    have (or until the stream finishes); everything else passes through at once, interleaving
    included, since chat chunks say which call each fragment belongs to.
    """
    introduced: set[int] = set()
    held: dict[int, list[dict]] = {}

    def ready(index: int) -> bool:
        return index in introduced or all(i in introduced for i in range(index))

    for event in events:
        if event.get("type") == "tool_call_delta":
            index = event["index"]
            if not ready(index):
                held.setdefault(index, []).append(event)
                continue
            introduced.add(index)
            yield event
            while (nxt := min((i for i in held if ready(i)), default=None)) is not None:
                introduced.add(nxt)
                yield from held.pop(nxt)
            continue
        if event.get("type") == "done":
            for index in sorted(held):
                yield from held.pop(index)
        yield event


def usage_numbers(result: Mapping[str, Any] | None) -> dict[str, int]:
    """Token counts of a job result (normalised: input includes cache reads and writes)."""
    u = (result or {}).get("usage") or {}
    return {
        k: int(u.get(k) or 0)
        for k in (
            "input_tokens",
            "cached_input_tokens",
            "cache_write_tokens",
            "output_tokens",
            "reasoning_tokens",
        )
    }


class VendorJsonNegotiation(DefaultContentNegotiation):
    """The vendors' APIs answer JSON whatever the request's ``Accept`` header says (a stream is an
    ``text/event-stream`` response of its own, not rendered), so the drop-ins do too: no ``406``,
    no HTML page for a browser's ``Accept``. DRF's negotiation parses ``Accept`` against each
    renderer on every request: 6% of the web process's CPU for a drop-in call (48 of 783 py-spy
    GIL samples, ``bench/bench_stages.py --profile``, 2026-12-02). Parsers are chosen as DRF
    chooses them."""

    def select_renderer(self, request, renderers, format_suffix=None):
        renderer = renderers[0]
        return renderer, renderer.media_type


class DropinView(DeferredThrottleMixin, APIView):
    """Base view: completions scope, provider-shaped errors, left out of our OpenAPI schema. Its
    rate-limit check is settled by :func:`submit`, after parsing and validation. Answers are
    JSON whatever ``Accept`` says (:class:`VendorJsonNegotiation`)."""

    permission_classes = [HasScope]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = VendorJsonNegotiation
    required_scope = "completions"
    schema = None  # vendor wire formats, documented by the vendors

    def error_body(self, *, status: int, kind: str, message: str, param: str | None) -> dict:
        raise NotImplementedError

    def error_response(self, *, status: int, kind: str, message: str, param: str | None = None) -> Response:
        response = Response(
            self.error_body(status=status, kind=kind, message=message, param=param), status=status
        )
        if status >= 500:
            response["x-should-retry"] = "false"
        return response

    def handle_exception(self, exc):
        if isinstance(exc, DropinError):
            return self.error_response(status=exc.status, kind=exc.kind, message=exc.message, param=exc.param)
        if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
            return self.error_response(status=401, kind="authentication", message=str(exc.detail))
        if isinstance(exc, exceptions.PermissionDenied):
            return self.error_response(status=403, kind="permission", message=str(exc.detail))
        if isinstance(exc, exceptions.Throttled):
            response = self.error_response(status=429, kind="rate_limit", message=str(exc.detail))
            if exc.wait is not None:
                response["retry-after"] = str(int(exc.wait))
            return response
        if isinstance(exc, (RequestTooLarge, RequestDataTooBig)):
            return self.error_response(
                status=413, kind="request_too_large", message="Request body too large."
            )
        if isinstance(exc, IdempotencyConflict):
            return self.error_response(
                status=422, kind="invalid_request", message=str(exc.detail), param="Idempotency-Key"
            )
        if isinstance(exc, exceptions.ValidationError) and isinstance(exc.detail, dict) and exc.detail:
            param, messages = next(iter(exc.detail.items()))
            message = messages[0] if isinstance(messages, list) and messages else messages
            return self.error_response(
                status=400, kind="invalid_request", message=f"'{param}': {message}", param=param
            )
        if isinstance(exc, (exceptions.ParseError, exceptions.UnsupportedMediaType)):
            return self.error_response(status=400, kind="invalid_request", message=str(exc.detail))
        if isinstance(exc, exceptions.MethodNotAllowed):
            return self.error_response(status=405, kind="invalid_request", message=str(exc.detail))
        return super().handle_exception(exc)

    def body(self, request) -> dict[str, Any]:
        data = request.data
        if not isinstance(data, dict):
            raise DropinError("The request body must be a JSON object.")
        return data
