"""What the simulated upstreams accept and how they behave per model: credentials, models and the
:class:`Scenario` knobs (see the package docstring of :mod:`routing.simulated`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

#: Credentials accepted per upstream family. ``openai`` covers ``/v1/chat/completions`` and
#: ``/v1/responses`` (Bearer); ``native`` is also accepted there (the Avocado service speaks the
#: same protocol); ``azure`` covers everything under ``/openai/`` (``api-key`` header or Bearer);
#: ``anthropic`` covers ``/v1/messages`` (``x-api-key``).
DEFAULT_API_KEYS: dict[str, str] = {
    "openai": "sk-fake-openai-key",
    "native": "sk-fake-native-key",
    "azure": "fake-azure-key",
    "anthropic": "sk-ant-fake-key",
}

#: Models accepted without an explicit scenario.
DEFAULT_MODELS: tuple[str, ...] = (
    "avocado-large",
    "avocado-small",
    "gpt-4.1-mini",
    "gpt-5-mini",
    "o4-mini",
    "claude-sonnet-4-6",
    "claude-haiku-4-5",
)

#: Headers never recorded verbatim (values replaced by ``"<redacted>"``).
SECRET_HEADERS = frozenset({"authorization", "api-key", "x-api-key", "cookie", "proxy-authorization"})

#: Valid values for :attr:`Scenario.failure`.
FAILURES = frozenset(
    {
        "rate_limit",  # 429 + retry-after
        "server_error",  # 500
        "unavailable",  # 503
        "overloaded",  # 529 (Anthropic overloaded_error; same status on the OpenAI shapes)
        "bad_request",  # 400 invalid_request_error
        "auth",  # 401 even with the right key
        "timeout",  # sleep hang_ms before answering (client read timeout fires first)
        "reset",  # close the socket (TCP RST) without any response
        "malformed",  # 200 with a body that is not JSON (stream: a non-JSON data line)
        "stream_error",  # 200 stream, some content, then an in-stream error event (non-stream: success)
        "stream_reset",  # 200 stream, some content, then the socket is closed mid-stream (non-stream: success)
    }
)


#: ``Scenario.tool_calls`` values; the ``chain`` modes call tools after a tool result too.
TOOL_CALL_MODES = ("auto", "parallel", "never", "chain", "chain_parallel")


@dataclass
class Scenario:
    """Behaviour of the fake for one model. All fields are optional knobs.

    Timing: ``latency_ms`` is slept before the response headers (a client that closes the
    connection meanwhile is noted as ``client_closed_at``, see below); ``chunk_delay_ms`` between
    stream chunks; ``hang_ms`` is the sleep of the ``timeout`` failure.

    Reply: ``reply`` fixes the text; otherwise it is derived deterministically from the last
    user message: ``"{model} reply to: {last user text} [quality={quality:.2f}]"``.
    ``quality`` (0..1) is only echoed as a marker (and via ``GET /_fake/scenarios``) so a demo
    can tell models apart; the fake itself decides nothing with it.

    Tools: ``tool_calls`` is ``"auto"`` (call the first offered tool when tools are offered and
    the last message is not a tool result), ``"parallel"`` (call the first two offered tools, or
    the first one twice), ``"never"``, or ``"chain"`` / ``"chain_parallel"`` (as ``auto`` /
    ``parallel`` but also right after a tool result: a further tool round). ``tool_arguments`` overrides the generated arguments
    (otherwise required string properties get the last user text, numbers 1, booleans true).

    Reasoning: ``reasoning`` makes Responses emit a ``reasoning`` item (``summary`` +
    ``encrypted_content`` per ``encrypted_reasoning``: ``"include"`` = only when the request has
    ``include=["reasoning.encrypted_content"]``, ``"always"``, ``"never"``; ``None`` = server
    default) and Anthropic emit a ``thinking`` block (``thinking_text``, may be ``""``) with a
    ``signature``, plus a ``redacted_thinking`` block when ``redacted_thinking`` is true.
    ``verify_reasoning`` rejects (400) reasoning passed back that this server never issued.

    Usage (tokens, provider-neutral, *inclusive* input): ``input_tokens`` (total prompt tokens
    including cache reads/writes; default: ``len(request JSON) // 4``), ``cached_tokens``
    (cache reads), ``cache_write_tokens``, ``output_tokens`` (default: words of the output,
    plus ``reasoning_tokens``), ``reasoning_tokens`` (default 0, or 12 with ``reasoning``).
    Wire mapping: OpenAI ``prompt_tokens``/``input_tokens`` = ``input_tokens``; Anthropic
    ``input_tokens`` = ``input_tokens - cached_tokens - cache_write_tokens``.

    Failures: ``failure`` is one of :data:`FAILURES`; with ``fail_first_n > 0`` only the first
    N calls for the model fail, later ones succeed. ``retry_after_s`` is sent with 429/503/529 as
    ``retry_after_header``: ``"retry-after"`` (seconds, the default), ``"retry-after-ms"``
    (milliseconds, as Azure OpenAI sends), or ``"anthropic-reset"`` (no retry-after; Anthropic's
    ``anthropic-ratelimit-requests-remaining: 0`` + ``anthropic-ratelimit-requests-reset``, RFC 3339).
    ``stream_error_after`` is the number of content deltas sent before ``stream_error`` /
    ``stream_reset``; ``stream_error_kind`` selects ``"error"`` or ``"response.failed"`` for
    the Responses API.

    Scripted wire bytes: ``wire`` replaces the rendered answer of a *streamed* request with
    exact frames, each ``{"data": "<text sent verbatim>", "delay_ms": N}`` (N ms slept before
    the frame), or ``{"json": {...}, "event": "<name>"}`` (rendered as one SSE frame; ``event``
    optional). ``wire_body`` (a JSON value, or ``{"raw": "<text>"}``) replaces the body of a
    non-streamed answer, sent with status ``wire_status`` after ``latency_ms``. With
    ``wire_first_n > 0`` only the first N calls are scripted, later ones render normally.
    Authentication, model checks and ``failure`` still apply first. The recorded call notes
    ``frames_sent`` and, when the client closed the connection before the end,
    ``client_closed_at`` (``time.time()``, checked every 20 ms while a frame's delay runs).

    Judge: a request whose text holds :data:`JUDGE_MARKER` (a shadow test's judge prompt,
    ``routing.shadow.judge``) is answered with a verdict (:func:`judge_verdict`): malformed for a
    share ``judge_malformed`` of prompts, else ``VERDICT: A|B|TIE`` favouring the answer with the
    higher ``[quality=…]`` marker.
    """

    latency_ms: int = 0
    chunk_delay_ms: int = 0
    hang_ms: int = 10_000
    reply: str | None = None
    quality: float = 0.5
    tool_calls: str = "auto"
    tool_arguments: dict[str, Any] | None = None
    reasoning: bool = False
    encrypted_reasoning: str | None = None
    thinking_text: str = "Let me think about this step by step."
    redacted_thinking: bool = False
    verify_reasoning: bool = True
    input_tokens: int | None = None
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    failure: str | None = None
    fail_first_n: int = 0
    retry_after_s: float = 1.0
    retry_after_header: str = "retry-after"
    stream_error_after: int = 2
    stream_error_kind: str = "error"
    wire: list[dict[str, Any]] | None = None
    wire_body: Any = None
    wire_status: int = 200
    wire_first_n: int = 0
    judge_malformed: float = 0.1

    def __post_init__(self) -> None:
        """Raises ``ValueError`` for a wire frame without exactly one of ``data``/``json`` or an
        unknown ``failure`` / ``retry_after_header`` / ``tool_calls`` / ``encrypted_reasoning``."""
        for frame in self.wire or ():
            if not isinstance(frame, dict) or ("data" in frame) == ("json" in frame):
                raise ValueError("each wire frame needs exactly one of 'data' or 'json'")
        if self.failure is not None and self.failure not in FAILURES:
            raise ValueError(f"unknown failure {self.failure!r}; expected one of {sorted(FAILURES)}")
        if self.retry_after_header not in ("retry-after", "retry-after-ms", "anthropic-reset"):
            raise ValueError(
                "retry_after_header must be 'retry-after', 'retry-after-ms' or 'anthropic-reset'"
            )
        if self.tool_calls not in TOOL_CALL_MODES:
            raise ValueError(f"tool_calls must be one of {', '.join(TOOL_CALL_MODES)}")
        if self.encrypted_reasoning not in (None, "include", "always", "never"):
            raise ValueError("encrypted_reasoning must be 'include', 'always', 'never' or None")

    def to_dict(self) -> dict[str, Any]:
        """The knobs as a JSON-able ``{field: value}`` dict."""
        return dataclasses.asdict(self)


_SCENARIO_FIELDS = frozenset(f.name for f in dataclasses.fields(Scenario))


def make_scenario(base: Scenario | None = None, **behaviour: Any) -> Scenario:
    """``base``'s knobs (defaults without one) with ``behaviour`` over them; raises ``ValueError``
    for an unknown knob or value."""
    unknown = set(behaviour) - _SCENARIO_FIELDS
    if unknown:
        raise ValueError(f"unknown scenario keys: {sorted(unknown)}")
    data = base.to_dict() if base is not None else {}
    data.update(behaviour)
    return Scenario(**data)
