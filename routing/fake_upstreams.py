"""Simulated LLM upstreams speaking the real provider wire formats (stdlib only).

One :class:`FakeUpstreams` HTTP server impersonates, at the same time:

* OpenAI-compatible Chat Completions -- ``POST /v1/chat/completions`` (OpenAI and our in-house
  "Avocado" native inference service), plus the Azure deployments form
  ``POST /openai/deployments/{deployment}/chat/completions?api-version=...``.
  Source: https://platform.openai.com/docs/api-reference/chat
* OpenAI Responses API -- ``POST /v1/responses``; Azure OpenAI Responses with a dated
  api-version -- ``POST /openai/responses?api-version=2025-04-01-preview`` (what
  ``AzureOpenAI(azure_endpoint=host, api_version=...).responses.create`` sends, with the
  ``api-key`` header) -- and the Azure v1 GA base URL ``POST /openai/v1/responses`` (what
  ``OpenAI(base_url=f"{host}/openai/v1/")`` sends, with ``Authorization: Bearer``).
  Source: https://platform.openai.com/docs/api-reference/responses and
  https://learn.microsoft.com/azure/ai-foundry/openai/api-version-lifecycle
* Anthropic Messages -- ``POST /v1/messages`` (key in ``x-api-key`` or -- as anthropic>=2 sends
  it -- ``Authorization: Bearer``; ``anthropic-version`` header required).
  Source: https://docs.anthropic.com/en/api/messages and .../messages-streaming

Non-streaming bodies are sent with ``Content-Length``; streams (SSE) use HTTP/1.1 chunked
transfer encoding, so SDK connection pools can keep connections alive.

Output contracts are refused as the real APIs refuse them (:func:`_contract_problem`: e.g. a JSON
Schema format without its name, a forced tool call with Anthropic thinking) and honoured: the
text follows the JSON Schema (``response_format`` / ``text.format`` / ``output_config.format``)
or is a JSON object (JSON mode); a forced tool choice makes the call whatever the scenario says
(a named tool: that one), ``none`` makes none, and without parallel calls (``parallel_tool_calls:
false``, ``disable_parallel_tool_use``) at most one is made. Responses objects echo ``text``,
``tool_choice`` and ``parallel_tool_calls``. Conversations the real APIs refuse (an empty
Anthropic text block, a null assistant content without tool calls …) get their 400 in the API's
own error shape (:func:`routing.fake_request_rules.conversation_problem`).

Behaviour is configured per model with a :class:`Scenario` (at construction, with
:meth:`FakeUpstreams.set_scenario`, or at runtime over HTTP)::

    POST /_fake/scenarios   {"model": "gpt-x", "failure": "rate_limit", "fail_first_n": 2}
                            or {"scenarios": {"gpt-x": {...}, "claude-y": {...}}}
    GET  /_fake/scenarios   -> {"scenarios": {model: {...}}, "default": {...}}
    GET  /_fake/calls?model=...&path=...   -> {"calls": [recorded request, ...]}
    POST /_fake/reset       -> clears recorded calls and attempt counters (scenarios kept;
                               body {"scenarios": true} also clears scenarios)
    GET  /_fake/health      -> {"ok": true}

Run for a demo::

    python -m routing.fake_upstreams --port 8900 [--scenarios scenarios.json]

Default credentials (override with ``api_keys=`` or ``--keys-json``): see :data:`DEFAULT_API_KEYS`.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import dataclasses
import hashlib
import itertools
import json
import logging
import os
import re
import select
import socket
import struct
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from routing.fake_request_rules import conversation_problem

log = logging.getLogger(__name__)

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

#: What Anthropic accepts as a ``tool_use`` id.
_ANTHROPIC_TOOL_ID = re.compile(r"[a-zA-Z0-9_-]+")

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
        return dataclasses.asdict(self)


_SCENARIO_FIELDS = frozenset(f.name for f in dataclasses.fields(Scenario))


def _make_scenario(base: Scenario | None = None, **behaviour: Any) -> Scenario:
    unknown = set(behaviour) - _SCENARIO_FIELDS
    if unknown:
        raise ValueError(f"unknown scenario keys: {sorted(unknown)}")
    data = base.to_dict() if base is not None else {}
    data.update(behaviour)
    return Scenario(**data)


# --------------------------------------------------------------------------------------------
# Helpers shared by the protocol renderers
# --------------------------------------------------------------------------------------------


class _Abort(Exception):
    """Raised inside a handler to stop processing (connection already dealt with)."""


def _words(text: str) -> list[str]:
    """Split ``text`` into delta pieces that concatenate back to ``text`` exactly."""
    pieces: list[str] = []
    current = ""
    for ch in text:
        current += ch
        if ch == " ":
            pieces.append(current)
            current = ""
    if current:
        pieces.append(current)
    return pieces or [""]


def _split_n(text: str, n: int = 3) -> list[str]:
    if not text:
        return [""]
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _content_to_text(content: Any) -> str:
    """Text of an OpenAI/Anthropic content value (string or list of parts/blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    out.append(part["text"])
                elif part.get("type") == "tool_result":
                    out.append(_content_to_text(part.get("content")))
        return " ".join(p for p in out if p)
    return ""


def _tool_arguments(tool_schema: Mapping[str, Any] | None, user_text: str) -> dict[str, Any]:
    """Arguments fitting a tool's schema; a malformed schema gets string arguments (never a crash
    of the simulated upstream)."""
    schema = tool_schema if isinstance(tool_schema, Mapping) else {}
    props = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
    required = schema.get("required") if isinstance(schema.get("required"), list) else list(props)[:1]
    args: dict[str, Any] = {}
    for name in (r for r in required if isinstance(r, str)):
        prop = props.get(name)
        kind = prop.get("type", "string") if isinstance(prop, Mapping) else "string"
        if kind in ("integer", "number"):
            args[name] = 1
        elif kind == "boolean":
            args[name] = True
        elif kind == "array":
            args[name] = []
        elif kind == "object":
            args[name] = {}
        else:
            args[name] = user_text[:80]
    return args


# --------------------------------------------------------------------------------------------
# Output contracts: what the caller requires of the answer, as each API words it
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Contract:
    """A request's output contracts, whatever its API: ``fmt`` the answer's format (``None``,
    ``{"type": "json_object"}`` or ``{"type": "json_schema", "schema": ...}``); ``choice``
    ``auto`` / ``none`` / ``required``; ``name`` the tool a ``required`` choice names;
    ``parallel`` whether more than one tool call is allowed."""

    fmt: dict[str, Any] | None = None
    choice: str = "auto"
    name: str | None = None
    parallel: bool = True


def _contract(api: str, body: dict[str, Any]) -> _Contract:
    """The contracts of a request that passed :func:`_contract_problem`."""
    choice = body.get("tool_choice")
    if api == "messages":
        fmt = (body.get("output_config") or {}).get("format")
        kind = (choice or {}).get("type", "auto")
        return _Contract(
            fmt=fmt,
            choice={"any": "required", "tool": "required"}.get(kind, kind),
            name=(choice or {}).get("name") if kind == "tool" else None,
            parallel=not (choice or {}).get("disable_parallel_tool_use", False),
        )
    fmt = body.get("response_format") if api == "chat_completions" else (body.get("text") or {}).get("format")
    if fmt is not None and fmt.get("type") == "text":
        fmt = None
    if fmt is not None and fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema") if api == "chat_completions" else fmt
        fmt = {"type": "json_schema", "schema": spec.get("schema") or {}}
    name, mode = None, choice or "auto"
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        mode = (choice.get("allowed_tools") or choice).get("mode", "auto")
    elif isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name") if api == "chat_completions" else choice.get("name")
        mode = "required"
    return _Contract(
        fmt=fmt, choice=mode, name=name, parallel=body.get("parallel_tool_calls", True) is not False
    )


def _tool_names(api: str, body: dict[str, Any]) -> list[str]:
    tools = body.get("tools") or []
    if api == "chat_completions":
        return [(t.get("function") or {}).get("name") for t in tools if isinstance(t, dict)]
    return [t.get("name") for t in tools if isinstance(t, dict)]


def _contract_problem(api: str, body: dict[str, Any]) -> str | None:
    """The 400 message the real API gives for output contracts it refuses (wording after theirs):
    an unknown format type, a JSON Schema format without its name (OpenAI) or with fields
    Anthropic does not take, a schema a strict format cannot enforce, JSON mode without the word
    "json" in the messages (OpenAI), a tool choice without tools or naming a tool not offered,
    and (Anthropic) thinking with a forced tool call."""
    names = _tool_names(api, body)
    choice = body.get("tool_choice")
    if api == "messages":
        fmt = (body.get("output_config") or {}).get("format")
        if fmt is not None:
            extra = sorted(set(fmt) - {"type", "schema"})
            if extra:
                return f"output_config.format.{extra[0]}: Extra inputs are not permitted"
            if fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
                return "output_config.format: Input should be a valid JSON schema output format"
            if not _strict_schema(fmt["schema"], all_required=False):
                return "output_config.format.schema: For 'object' type, 'additionalProperties' must be explicitly set to false"
        if choice is not None:
            if not names:
                return "tool_choice: tool_choice may only be specified while providing tools."
            kind = choice.get("type")
            if kind not in ("auto", "any", "tool", "none"):
                return f"tool_choice.type: Input tag '{kind}' found using 'type' does not match any of the expected tags"
            if kind == "tool" and choice.get("name") not in names:
                return f"tool_choice: Tool '{choice.get('name')}' not found in provided tools"
            if kind == "none" and "disable_parallel_tool_use" in choice:
                return "tool_choice.none.disable_parallel_tool_use: Extra inputs are not permitted"
            if kind in ("any", "tool") and (body.get("thinking") or {}).get("type") in (
                "enabled",
                "adaptive",
            ):
                return "Thinking may not be enabled when tool_choice forces tool use."
        return None
    field = "response_format" if api == "chat_completions" else "text.format"
    fmt = body.get("response_format") if api == "chat_completions" else (body.get("text") or {}).get("format")
    if fmt is not None:
        kind = fmt.get("type")
        if kind not in ("text", "json_object", "json_schema"):
            return f"Invalid value: '{kind}'. Supported values are: 'text', 'json_object', and 'json_schema'."
        spec = (fmt.get("json_schema") or {}) if api == "chat_completions" else fmt
        prefix = f"{field}.json_schema" if api == "chat_completions" else field
        if kind == "json_schema" and not spec.get("name"):
            return f"Missing required parameter: '{prefix}.name'."
        if kind == "json_schema" and spec.get("strict") and not _strict_schema(spec.get("schema") or {}):
            return (
                f"Invalid schema for response_format '{spec.get('name')}': In context=(), 'required' is required "
                "to be supplied and to be an array including every key in properties, and "
                "'additionalProperties' is required to be supplied and to be false."
            )
        if (
            kind == "json_object"
            and "json"
            not in json.dumps(body.get("messages") or body.get("input") or "").lower()
            + (body.get("instructions") or "").lower()
        ):
            return f"'messages' must contain the word 'json' in some form, to use '{field}' of type 'json_object'."
    if choice is not None and not names:
        return "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified."
    if isinstance(choice, str) and choice not in ("none", "auto", "required"):
        return f"Invalid value: '{choice}'. Supported values are: 'none', 'auto', and 'required'."
    if isinstance(choice, dict) and choice.get("type") != "allowed_tools":
        named = (
            (choice.get("function") or {}).get("name") if api == "chat_completions" else choice.get("name")
        )
        if choice.get("type") != "function" or named not in names:
            return f"Invalid value for 'tool_choice': function '{named}' not found in 'tools'."
    if api == "chat_completions" and "parallel_tool_calls" in body and not names:
        return "Invalid value for 'parallel_tool_calls': 'parallel_tool_calls' is only allowed when 'tools' are specified."
    return None


def _strict_schema(schema: Any, *, all_required: bool = True) -> bool:
    """Whether every object schema in ``schema`` sets ``additionalProperties: false`` (and, for
    OpenAI's strict mode, ``all_required``: lists every property in ``required``)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            props = node.get("properties")
            if node.get("type") == "object" or isinstance(props, dict):
                if node.get("additionalProperties") is not False:
                    return False
                if all_required and set(node.get("required") or ()) != set(props or {}):
                    return False
            stack.extend(v for k, v in node.items() if k != "properties" and isinstance(v, dict | list))
            stack.extend((props or {}).values() if isinstance(props, dict) else ())
    return True


def _example(schema: Any, text: str, root: Any = None, depth: int = 0) -> Any:
    """A JSON value valid against ``schema`` (every property filled; strings are ``text``),
    following ``$ref`` into the root's ``$defs``."""
    root = schema if root is None else root
    if not isinstance(schema, Mapping) or depth > 16:
        return text
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, Mapping) else {}
        return _example(target, text, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return _example(schema[key][0], text, root, depth + 1)
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), "null") if isinstance(kind, list) else kind
    if kind == "object" or isinstance(schema.get("properties"), Mapping):
        props = schema.get("properties") or {}
        return {name: _example(sub, text, root, depth + 1) for name, sub in props.items()}
    if kind == "array":
        return (
            [_example(schema["items"], text, root, depth + 1)]
            if isinstance(schema.get("items"), Mapping)
            else []
        )
    return {"integer": 1, "number": 1.5, "boolean": True, "null": None}.get(kind, text)


@dataclass
class _Plan:
    """What one successful response contains, independent of the wire format."""

    model: str
    text: str
    tool_calls: list[tuple[str, str, dict[str, Any]]]  # (call id, name, arguments)
    reasoning: bool
    encrypted: bool
    thinking_text: str
    redacted: bool
    input_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    output_tokens: int
    reasoning_tokens: int
    request_id: str
    scenario: Scenario


# --------------------------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------------------------


class FakeUpstreams:
    """In-process fake for OpenAI / Azure OpenAI / Anthropic / Avocado endpoints.

    ``FakeUpstreams(host="127.0.0.1", port=0, api_keys=None, models=None, scenarios=None,
    default_scenario=None, encrypted_reasoning="include")``

    * ``port=0`` picks an ephemeral port; :meth:`start` returns ``"http://host:port"``.
    * ``api_keys``: mapping family -> key (or iterable of keys); merged over
      :data:`DEFAULT_API_KEYS`.
    * ``models``: models accepted (plus any model with a scenario). ``None`` ->
      :data:`DEFAULT_MODELS`. Unknown models get a 404 in the provider's error shape.
    * ``scenarios``: ``{model: Scenario | dict}``; ``default_scenario`` applies to models
      without one.
    * ``encrypted_reasoning``: server default for :attr:`Scenario.encrypted_reasoning`.

    Thread-safe; usable as a context manager (``with FakeUpstreams() as fake: fake.url``).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_keys: Mapping[str, str | Iterable[str]] | None = None,
        models: Iterable[str] | None = None,
        scenarios: Mapping[str, Scenario | Mapping[str, Any]] | None = None,
        default_scenario: Scenario | Mapping[str, Any] | None = None,
        encrypted_reasoning: str = "include",
    ) -> None:
        if encrypted_reasoning not in ("include", "always", "never"):
            raise ValueError("encrypted_reasoning must be 'include', 'always' or 'never'")
        self.host = host
        self.port = port
        self.encrypted_reasoning = encrypted_reasoning
        keys: dict[str, set[str]] = {k: {v} for k, v in DEFAULT_API_KEYS.items()}
        for family, value in (api_keys or {}).items():
            keys[family] = {value} if isinstance(value, str) else set(value)
        self._keys = keys
        self._models = set(DEFAULT_MODELS if models is None else models)
        self._lock = threading.RLock()
        self._scenarios: dict[str, Scenario] = {}
        self._default = self._coerce(default_scenario) if default_scenario is not None else Scenario()
        for model, sc in (scenarios or {}).items():
            self._scenarios[model] = self._coerce(sc)
        self._calls: list[dict[str, Any]] = []
        self._attempts: dict[str, int] = {}
        self._cached_prefixes: set[str] = set()
        self._issued_reasoning: set[str] = set()
        # What each reasoning blob was issued with (see _Handler._misplaced_reasoning).
        self._issued_with: dict[str, dict[str, Any]] = {}
        self._seq = itertools.count(1)
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url: str | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> str:
        """Bind and serve in a daemon thread; returns the base URL ``http://host:port``."""
        if self._server is not None:
            assert self.url is not None
            return self.url
        self._stop.clear()
        handler = type("_BoundHandler", (_Handler,), {"fake": self})
        server = _Server((self.host, self.port), handler)
        server.daemon_threads = True
        server.block_on_close = False  # idle keep-alive connections must not block stop()
        self._server = server
        self.port = server.server_address[1]
        self.url = f"http://{self.host}:{self.port}"
        self._thread = threading.Thread(target=server.serve_forever, name="fake-upstreams", daemon=True)
        self._thread.start()
        log.info("fake upstreams listening on %s", self.url)
        return self.url

    def stop(self) -> None:
        """Stop serving; wakes up handlers sleeping in latency/hang so threads exit quickly."""
        self._stop.set()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeUpstreams:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- configuration -----------------------------------------------------------------------

    @staticmethod
    def _coerce(sc: Scenario | Mapping[str, Any]) -> Scenario:
        return sc if isinstance(sc, Scenario) else _make_scenario(**dict(sc))

    def set_scenario(self, model: str, scenario: Scenario | None = None, **behaviour: Any) -> Scenario:
        """Set (replace) the scenario of ``model`` and reset its attempt counter.

        ``set_scenario("m", latency_ms=50, failure="rate_limit", fail_first_n=1)``. The model
        becomes accepted. Raises ``ValueError`` for unknown keys/values.
        """
        sc = _make_scenario(scenario, **behaviour)
        with self._lock:
            self._scenarios[model] = sc
            self._attempts.pop(model, None)
        return sc

    def update_scenario(self, model: str, **behaviour: Any) -> Scenario:
        """Change some knobs of ``model``'s scenario, keeping the others."""
        with self._lock:
            return self.set_scenario(model, self._scenarios.get(model, self._default), **behaviour)

    def scenario(self, model: str) -> Scenario:
        with self._lock:
            return self._scenarios.get(model, self._default)

    def scenarios(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {m: s.to_dict() for m, s in self._scenarios.items()}

    def add_models(self, *models: str) -> None:
        with self._lock:
            self._models.update(models)

    def reset(self, *, scenarios: bool = False) -> None:
        """Forget recorded calls and attempt counters (and scenarios if ``scenarios=True``)."""
        with self._lock:
            self._calls.clear()
            self._attempts.clear()
            self._cached_prefixes.clear()
            if scenarios:
                self._scenarios.clear()

    # ---- inspection --------------------------------------------------------------------------

    def calls(self, model: str | None = None, path: str | None = None) -> list[dict[str, Any]]:
        """Recorded provider requests, oldest first (deep copies).

        Each: ``{"seq", "time", "method", "path", "query", "headers" (secrets redacted),
        "api": "chat_completions"|"responses"|"messages"|None, "flavour": "openai"|
        "azure"|"azure_v1"|"anthropic"|None, "model", "stream", "body" (parsed JSON or None),
        "raw_body" (str), "auth_ok", "status", "outcome", "attempt", "request_id",
        "response_body" (str, non-streaming responses only), "stream_events" (list of SSE
        payload strings sent, streaming only)}``.
        ``path`` matches the URL path without query string.
        """
        with self._lock:
            out = [
                c
                for c in self._calls
                if (model is None or c["model"] == model) and (path is None or c["path"] == path)
            ]
            return copy.deepcopy(out)

    def call_count(self, model: str | None = None, path: str | None = None) -> int:
        return len(self.calls(model=model, path=path))

    # ---- internals used by the handler ----------------------------------------------------

    def _record(self, call: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            call["seq"] = next(self._seq)
            self._calls.append(call)
        return call

    def _next_attempt(self, model: str) -> int:
        with self._lock:
            n = self._attempts.get(model, 0) + 1
            self._attempts[model] = n
            return n

    def _model_known(self, model: str) -> bool:
        with self._lock:
            return model in self._models or model in self._scenarios

    def _key_ok(self, families: Iterable[str], presented: str | None) -> bool:
        if not presented:
            return False
        return any(presented in self._keys.get(f, set()) for f in families)

    def _issue_blob(self, prefix: str, seed: str) -> str:
        digest = hashlib.sha256(f"{seed}|{next(self._seq)}|{uuid.uuid4()}".encode()).digest()
        blob = prefix + base64.urlsafe_b64encode(digest * 3).decode().rstrip("=")
        with self._lock:
            self._issued_reasoning.add(blob)
        return blob

    def _blob_known(self, blob: str) -> bool:
        with self._lock:
            return blob in self._issued_reasoning

    def _bind_issued(self, blob: str, record: dict[str, Any]) -> None:
        """Remember what a reasoning blob was issued with (its response's items/blocks)."""
        with self._lock:
            self._issued_with[blob] = record

    def _issued(self, blob: str) -> dict[str, Any] | None:
        with self._lock:
            return self._issued_with.get(blob)

    def _prompt_cache(self, model: str, body: dict[str, Any], input_tokens: int) -> tuple[int, int]:
        """Anthropic prompt caching: ``(cache read, cache write)`` tokens for a Messages request.

        The prefix up to the request's last ``cache_control`` breakpoint (order: tools, system,
        messages) is written on first sight and read afterwards (per model); ~4 characters a
        token, capped at ``input_tokens``. No breakpoint: nothing is cached.
        """
        prefix: list[Any] = []
        cached: list[Any] | None = None
        system = body.get("system")
        sections = [body.get("tools") or [], system if isinstance(system, list) else []]
        for message in body.get("messages") or []:
            content = message.get("content") if isinstance(message, dict) else None
            sections.append(content if isinstance(content, list) else [content])
        for section in sections:
            for block in section:
                prefix.append(block)
                if isinstance(block, dict) and block.get("cache_control"):
                    cached = list(prefix)
        if cached is None:
            return 0, 0
        text = json.dumps(cached, sort_keys=True)
        tokens = min(input_tokens, max(1, len(text) // 4))
        key = f"{model}:{hashlib.sha256(text.encode()).hexdigest()}"
        with self._lock:
            seen = key in self._cached_prefixes
            self._cached_prefixes.add(key)
        return (tokens, 0) if seen else (0, tokens)

    def _sleep(self, ms: float) -> bool:
        """Sleep ``ms`` milliseconds; returns False if the server is stopping."""
        if ms <= 0:
            return True
        return not self._stop.wait(ms / 1000.0)


# --------------------------------------------------------------------------------------------
# Request handler
# --------------------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """Client disconnects/resets are normal here (timeouts, reset scenarios): log quietly."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
            log.debug("connection from %s ended: %r", client_address, exc)
            return
        log.exception("fake upstream handler failed for %s", client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeUpstreams/1.0"
    timeout = 30  # idle keep-alive connections are dropped after this many seconds
    fake: FakeUpstreams  # set on the bound subclass

    # -- plumbing --------------------------------------------------------------------------

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without TCP_NODELAY, Nagle's algorithm and
        # the client's delayed ACK add ~40 ms to every response on a kept-alive connection.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s - %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    _call: dict[str, Any] | None = None

    def _upd(self, **fields: Any) -> None:
        """Update the recorded call of the current request (under the fake's lock)."""
        if self._call is not None:
            with self.fake._lock:
                self._call.update(fields)

    def _dispatch(self, method: str) -> None:
        self._call = None
        split = urlsplit(self.path)
        path = split.path
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            if path.startswith("/_fake/"):
                self._control(method, path, query, raw)
            else:
                self._provider(method, path, query, raw)
        except _Abort:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError):
            # The client went away (e.g. its read timeout fired while we slept).
            self.close_connection = True
            if self._call is not None and "client_closed_at" not in self._call:
                self._upd(client_closed_at=time.time())

    def _send_json(
        self, status: int, payload: Any, headers: Mapping[str, str] | None = None, raw: bytes | None = None
    ) -> None:
        body = raw if raw is not None else json.dumps(payload).encode()
        self._upd(response_status=status, response_body=body.decode("utf-8", "replace"))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _start_stream(self, headers: Mapping[str, str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        if not data:
            return
        if self._call is not None:
            with self.fake._lock:
                self._call.setdefault("stream_events", []).append(data.decode("utf-8", "replace"))
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _reset_connection(self) -> None:
        """Abort the TCP connection (RST) without a (complete) response."""
        with contextlib.suppress(OSError):
            self.wfile.flush()
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        with contextlib.suppress(OSError):
            self.connection.close()
        raise _Abort

    # -- control API -------------------------------------------------------------------------

    def _control(self, method: str, path: str, query: dict[str, str], raw: bytes) -> None:
        fake = self.fake
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            self._send_json(400, {"error": "body is not JSON"})
            return
        try:
            if path == "/_fake/health":
                self._send_json(200, {"ok": True})
            elif path == "/_fake/scenarios" and method == "GET":
                self._send_json(200, {"scenarios": fake.scenarios(), "default": fake._default.to_dict()})
            elif path == "/_fake/scenarios" and method == "POST":
                if "scenarios" in body:
                    for model, sc in body["scenarios"].items():
                        fake.set_scenario(model, **sc)
                else:
                    body = dict(body)
                    model = body.pop("model")
                    fake.set_scenario(model, **body)
                self._send_json(200, {"scenarios": fake.scenarios()})
            elif path == "/_fake/calls" and method == "GET":
                self._send_json(200, {"calls": fake.calls(model=query.get("model"), path=query.get("path"))})
            elif path == "/_fake/reset" and method == "POST":
                fake.reset(scenarios=bool(body.get("scenarios")))
                self._send_json(200, {"ok": True})
            else:
                self._send_json(404, {"error": f"no control route {method} {path}"})
        except (KeyError, TypeError, ValueError) as exc:
            self._send_json(400, {"error": f"bad scenario: {exc}"})

    # -- provider routing --------------------------------------------------------------------

    def _route(self, path: str) -> tuple[str | None, str | None, str | None]:
        """-> (api, flavour, deployment) for a provider path, or (None, None, None)."""
        if path == "/v1/chat/completions":
            return "chat_completions", "openai", None
        if path == "/v1/responses":
            return "responses", "openai", None
        if path == "/v1/messages":
            return "messages", "anthropic", None
        if path == "/openai/responses":
            return "responses", "azure", None
        if path in ("/openai/v1/responses",):
            return "responses", "azure_v1", None
        if path == "/openai/v1/chat/completions":
            return "chat_completions", "azure_v1", None
        parts = path.split("/")
        # /openai/deployments/{deployment}/chat/completions
        if (
            len(parts) == 6
            and parts[1:3] == ["openai", "deployments"]
            and parts[4:] == ["chat", "completions"]
        ):
            return "chat_completions", "azure", parts[3]
        if path.startswith("/openai/"):
            return None, "azure", None
        if path.startswith("/v1/"):
            return None, "anthropic" if "anthropic-version" in self.headers else "openai", None
        return None, None, None

    def _error_body(
        self, flavour: str | None, status: int, etype: str, message: str, code: str | None = None
    ):
        if flavour == "anthropic":
            return {
                "type": "error",
                "error": {"type": etype, "message": message},
                "request_id": self._request_id,
            }
        if flavour == "azure" and status == 401:
            return {"error": {"code": "401", "message": message}}
        return {"error": {"message": message, "type": etype, "param": None, "code": code}}

    def _request_id_headers(self, flavour: str | None) -> dict[str, str]:
        if flavour == "anthropic":
            return {"request-id": self._request_id}
        return {"x-request-id": self._request_id}

    def _error(
        self,
        flavour: str | None,
        status: int,
        etype: str,
        message: str,
        code: str | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        headers = self._request_id_headers(flavour)
        headers.update(extra_headers or {})
        self._upd(status=status)
        self._send_json(status, self._error_body(flavour, status, etype, message, code), headers)

    def _provider(self, method: str, path: str, query: dict[str, str], raw: bytes) -> None:
        fake = self.fake
        api, flavour, deployment = self._route(path)
        self._request_id = ("req_" if flavour == "anthropic" else "") + uuid.uuid4().hex
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        model = deployment or (body.get("model") if isinstance(body, dict) else None)
        headers = {
            k.lower(): ("<redacted>" if k.lower() in SECRET_HEADERS else v) for k, v in self.headers.items()
        }
        self._call = fake._record(
            {
                "time": time.time(),
                "method": method,
                "path": path,
                "query": query,
                "headers": headers,
                "api": api,
                "flavour": flavour,
                "model": model,
                "stream": bool(isinstance(body, dict) and body.get("stream")),
                "body": body,
                "raw_body": raw.decode("utf-8", "replace"),
                "auth_ok": False,
                "status": None,
                "outcome": None,
                "request_id": self._request_id,
            }
        )

        # Authentication first, as the real services do.
        if flavour == "anthropic":
            # anthropic>=2 sends the API key as a Bearer token; older SDKs/curl use x-api-key.
            presented = self.headers.get("x-api-key") or _bearer(self.headers.get("authorization"))
            families: tuple[str, ...] = ("anthropic",)
        elif flavour in ("azure", "azure_v1"):
            presented = self.headers.get("api-key") or _bearer(self.headers.get("authorization"))
            families = ("azure",)
        else:
            presented = _bearer(self.headers.get("authorization"))
            families = ("openai", "native")
        if flavour is not None and not fake._key_ok(families, presented):
            self._upd(outcome="auth_failed")
            if flavour == "anthropic":
                self._error(flavour, 401, "authentication_error", "invalid x-api-key")
            elif flavour in ("azure", "azure_v1"):
                self._error(
                    flavour,
                    401,
                    "invalid_request_error",
                    "Access denied due to invalid subscription key or wrong API endpoint. Make sure to "
                    "provide a valid key for an active subscription and use a correct regional API "
                    "endpoint for your resource.",
                )
            else:
                self._error(
                    flavour,
                    401,
                    "invalid_request_error",
                    f"Incorrect API key provided: {_mask_key(presented or '')}. You can find your API key at "
                    "https://platform.openai.com/account/api-keys.",
                    "invalid_api_key",
                )
            return
        self._upd(auth_ok=flavour is not None)

        if api is None or method != "POST":
            self._upd(outcome="not_found")
            if flavour == "anthropic":
                self._error(flavour, 404, "not_found_error", f"Not found: {method} {path}")
            else:
                self._error(flavour, 404, "invalid_request_error", f"Unknown request URL: {method} {path}.")
            return
        if flavour == "azure" and "api-version" not in query:
            self._upd(outcome="bad_request")
            self._error(
                flavour, 404, "invalid_request_error", "Resource not found (missing api-version)", "404"
            )
            return
        if flavour == "anthropic" and "anthropic-version" not in self.headers:
            self._upd(outcome="bad_request")
            self._error(flavour, 400, "invalid_request_error", "anthropic-version: header is required")
            return
        if not isinstance(body, dict):
            self._upd(outcome="bad_request")
            etype = "invalid_request_error"
            self._error(flavour, 400, etype, "We could not parse the JSON body of your request.")
            return
        if not model or not fake._model_known(model):
            self._upd(outcome="model_not_found")
            if flavour == "anthropic":
                self._error(flavour, 404, "not_found_error", f"model: {model}")
            elif flavour == "azure":
                self._error(
                    flavour,
                    404,
                    "invalid_request_error",
                    f"The API deployment {model} does not exist.",
                    "DeploymentNotFound",
                )
            else:
                self._error(
                    flavour,
                    404,
                    "invalid_request_error",
                    f"The model `{model}` does not exist or you do not have access to it.",
                    "model_not_found",
                )
            return

        sc = fake.scenario(model)
        attempt = fake._next_attempt(model)
        failing = sc.failure is not None and (sc.fail_first_n <= 0 or attempt <= sc.fail_first_n)
        failure = sc.failure if failing else None
        self._upd(attempt=attempt)

        if not self._wait_or_closed(sc.latency_ms):
            if not fake._stop.is_set():
                self._upd(client_closed_at=time.time())
            raise _Abort
        if failure and self._fail_before_body(flavour, failure, sc):
            return

        if sc.verify_reasoning:
            bad = self._unknown_reasoning(api, body) or self._misplaced_reasoning(api, body)
            if bad:
                self._upd(outcome="invalid_reasoning")
                if flavour == "anthropic":
                    self._error(flavour, 400, "invalid_request_error", bad)
                else:
                    self._error(flavour, 400, "invalid_request_error", bad, "invalid_encrypted_content")
                return

        bad_turns = conversation_problem(api, body)
        if bad_turns is not None:
            self._upd(outcome="invalid_request")
            self._error(flavour, 400, "invalid_request_error", bad_turns)
            return
        bad_contract = _contract_problem(api, body)
        if bad_contract is not None:
            self._upd(outcome="invalid_contract")
            self._error(flavour, 400, "invalid_request_error", bad_contract)
            return
        bad_id = self._bad_tool_id(api, body)
        if bad_id is not None:
            self._upd(outcome="invalid_tool_id")
            etype = "invalid_request_error"
            if flavour == "anthropic":
                self._error(flavour, 400, etype, bad_id[1])
            else:
                self._error(flavour, 400, etype, bad_id[1], "string_above_max_length")
            return
        stream = bool(body.get("stream"))
        if self._scripted(sc, attempt, stream, flavour):
            return
        plan = self._plan(api, model, body, sc)
        self._upd(status=200)
        self._upd(outcome=failure or "ok")
        if api == "chat_completions":
            _ChatRenderer(self, plan, body, failure).respond(stream)
        elif api == "responses":
            _ResponsesRenderer(self, plan, body, failure).respond(stream)
        else:
            _MessagesRenderer(self, plan, body, failure).respond(stream)

    def _scripted(self, sc: Scenario, attempt: int, stream: bool, flavour: str | None) -> bool:
        """Send the scenario's scripted wire bytes; True if the request has been answered."""
        if sc.wire_first_n > 0 and attempt > sc.wire_first_n:
            return False
        if stream and sc.wire is not None:
            self._upd(status=200, outcome="scripted", frames_sent=0)
            self._start_stream(self._request_id_headers(flavour))
            for n, frame in enumerate(sc.wire, start=1):
                if not self._wait_or_closed(float(frame.get("delay_ms") or 0)):
                    self._upd(client_closed_at=time.time())
                    raise _Abort
                self._chunk(
                    frame["data"].encode() if "data" in frame else _sse(frame["json"], frame.get("event"))
                )
                self._upd(frames_sent=n)
            self._end_stream()
            self._upd(finished_at=time.time())
            return True
        if not stream and sc.wire_body is not None:
            self._upd(status=sc.wire_status, outcome="scripted")
            raw = sc.wire_body.get("raw") if isinstance(sc.wire_body, dict) else None
            body = raw.encode() if isinstance(raw, str) else json.dumps(sc.wire_body).encode()
            self._send_json(sc.wire_status, None, self._request_id_headers(flavour), raw=body)
            return True
        return False

    def _wait_or_closed(self, ms: float) -> bool:
        """Sleep ``ms`` ms, watching the client socket; False if the client closed it (or stopping)."""
        deadline = time.monotonic() + ms / 1000.0
        while True:
            if self._peer_closed():
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            if self.fake._stop.wait(min(left, 0.02)):
                return False

    def _peer_closed(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _fail_before_body(self, flavour: str | None, failure: str, sc: Scenario) -> bool:
        """Emit a pre-body failure; returns True if the request has been answered."""
        self._upd(outcome=failure)
        anth = flavour == "anthropic"
        retry_after = _retry_after_headers(sc)
        if failure == "rate_limit":
            if anth:
                self._error(
                    flavour,
                    429,
                    "rate_limit_error",
                    "Number of request tokens has exceeded your per-minute rate limit",
                    extra_headers=retry_after,
                )
            else:
                self._error(
                    flavour,
                    429,
                    "requests",
                    "Rate limit reached for requests. Please try again later.",
                    "rate_limit_exceeded",
                    extra_headers=retry_after,
                )
            return True
        if failure == "server_error":
            if anth:
                self._error(flavour, 500, "api_error", "Internal server error")
            else:
                self._error(
                    flavour, 500, "server_error", "The server had an error while processing your request."
                )
            return True
        if failure == "unavailable":
            if anth:
                self._error(flavour, 503, "api_error", "Service unavailable", extra_headers=retry_after)
            else:
                self._error(
                    flavour,
                    503,
                    "server_error",
                    "The engine is currently overloaded.",
                    extra_headers=retry_after,
                )
            return True
        if failure == "overloaded":
            if anth:
                self._error(flavour, 529, "overloaded_error", "Overloaded", extra_headers=retry_after)
            else:
                self._error(
                    flavour, 529, "server_error", "The server is overloaded.", extra_headers=retry_after
                )
            return True
        if failure == "bad_request":
            self._error(flavour, 400, "invalid_request_error", "Invalid request (simulated).")
            return True
        if failure == "auth":
            if anth:
                self._error(flavour, 401, "authentication_error", "invalid x-api-key")
            else:
                self._error(
                    flavour, 401, "invalid_request_error", "Incorrect API key provided.", "invalid_api_key"
                )
            return True
        if failure == "timeout":
            self.fake._sleep(sc.hang_ms)
            raise _Abort
        if failure == "reset":
            self._upd(status=None)
            self._reset_connection()
        return False

    def _unknown_reasoning(self, api: str, body: dict[str, Any]) -> str | None:
        """Validate reasoning blobs passed back (encrypted_content / signature / data)."""
        if api == "responses" and isinstance(body.get("input"), list):
            for item in body["input"]:
                if isinstance(item, dict) and item.get("type") == "reasoning":
                    blob = item.get("encrypted_content")
                    if blob is not None and not self.fake._blob_known(blob):
                        return "The encrypted content for item could not be verified."
        if api == "messages":
            for msg in body.get("messages") or []:
                content = msg.get("content") if isinstance(msg, dict) else None
                for block in content if isinstance(content, list) else []:
                    if not isinstance(block, dict):
                        continue
                    if block.get("type") == "thinking" and not self.fake._blob_known(
                        block.get("signature", "")
                    ):
                        return "messages: Invalid `signature` in `thinking` block"
                    if block.get("type") == "redacted_thinking" and not self.fake._blob_known(
                        block.get("data", "")
                    ):
                        return "messages: Invalid `data` in `redacted_thinking` block"
        return None

    def _misplaced_reasoning(self, api: str, body: dict[str, Any]) -> str | None:
        """Enforce where passed-back reasoning may stand, as the real APIs do.

        Responses (https://platform.openai.com/docs/guides/reasoning#keeping-reasoning-items-in-context):
        a ``reasoning`` item must be immediately followed by the output item it was issued with
        (same ``id``, or for an item sent without id: the same ``call_id`` / assistant text /
        blob), else 400 "Item 'rs_…' of type 'reasoning' was provided without its required
        following item."; a ``function_call`` sent with the ``fc_…`` id of an item that was issued
        after a reasoning item needs that reasoning item earlier in the input.

        Messages (https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking#preserving-thinking-blocks):
        the latest assistant message's ``thinking``/``redacted_thinking`` blocks must be first and
        exactly the blocks issued with that message's content; with thinking on and a tool loop
        in progress (the request ends with ``tool_result``), a message whose ``tool_use`` was issued
        after thinking must start with that thinking.
        """
        if api == "responses" and isinstance(body.get("input"), list):
            return self._misplaced_responses_reasoning([i for i in body["input"] if isinstance(i, dict)])
        if api == "messages":
            return self._misplaced_thinking(body)
        return None

    def _misplaced_responses_reasoning(self, items: list[dict[str, Any]]) -> str | None:
        seen_reasoning: set[str] = set()
        for pos, item in enumerate(items):
            if item.get("type") == "reasoning":
                seen_reasoning.add(str(item.get("id", "")))
                issued = self.fake._issued(str(item.get("encrypted_content", "")))
                if issued is None:
                    continue
                nxt = items[pos + 1] if pos + 1 < len(items) else None
                if nxt is None or not _same_output_item(nxt, issued["following"]):
                    return (
                        f"Item '{item.get('id', issued['id'])}' of type 'reasoning' was provided "
                        "without its required following item."
                    )
            elif item.get("type") == "function_call" and item.get("id"):
                required = self.fake._issued("fc:" + str(item["id"]))
                if required is not None and required["id"] not in seen_reasoning:
                    return (
                        f"Item '{item['id']}' of type 'function_call' was provided without its "
                        f"required 'reasoning' item: '{required['id']}'."
                    )
        return None

    def _misplaced_thinking(self, body: dict[str, Any]) -> str | None:
        msgs = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        last_idx = max((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), default=None)
        if last_idx is None or not isinstance(msgs[last_idx].get("content"), list):
            return None
        blocks = [b for b in msgs[last_idx]["content"] if isinstance(b, dict)]
        kinds = [b.get("type") for b in blocks]
        n_reasoning = sum(1 for k in kinds if k in ("thinking", "redacted_thinking"))
        modified = (
            f"messages.{last_idx}.content: `thinking` or `redacted_thinking` blocks in the latest assistant "
            "message cannot be modified. These blocks must remain as they were in the original response."
        )
        if n_reasoning:
            if any(k not in ("thinking", "redacted_thinking") for k in kinds[:n_reasoning]):
                return modified
            first = blocks[0]
            issued = self.fake._issued(str(first.get("signature") or first.get("data") or ""))
            if issued is None or blocks[:n_reasoning] != issued["reasoning"]:
                return modified
            rest = [(b.get("type"), b.get("id"), b.get("text")) for b in blocks[n_reasoning:]]
            if rest != issued["rest"]:
                return modified
            return None
        thinking_on = (body.get("thinking") or {}).get("type") in ("enabled", "adaptive")
        last = msgs[-1] if msgs else {}
        in_tool_loop = isinstance(last.get("content"), list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in last["content"]
        )
        issued_with_thinking = any(
            self.fake._issued("tool_use:" + str(b.get("id"))) for b in blocks if b.get("type") == "tool_use"
        )
        if thinking_on and in_tool_loop and issued_with_thinking:
            return (
                f"messages.{last_idx}.content.0.type: Expected `thinking` or `redacted_thinking`, but "
                f"found `{kinds[0]}`. When `thinking` is enabled, a final `assistant` message must start "
                "with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` "
                "blocks). We recommend you include thinking blocks from previous turns. To avoid this "
                "requirement, disable `thinking`."
            )
        return None

    def _bad_tool_id(self, api: str, body: dict[str, Any]) -> tuple[str, str] | None:
        """``(param, message)`` for the first tool-call id the real API would refuse, as it words it.

        Anthropic: ``tool_use.id`` / ``tool_result.tool_use_id`` must match ``^[a-zA-Z0-9_-]+$``;
        Chat Completions: ``tool_calls[].id`` at most 40 characters; Responses: ``call_id`` at most 64.
        """
        if api == "messages":
            for i, msg in enumerate(body.get("messages") or []):
                content = msg.get("content") if isinstance(msg, dict) else None
                for j, block in enumerate(content if isinstance(content, list) else []):
                    if not isinstance(block, dict) or block.get("type") not in ("tool_use", "tool_result"):
                        continue
                    key = "id" if block["type"] == "tool_use" else "tool_use_id"
                    if not _ANTHROPIC_TOOL_ID.fullmatch(str(block.get(key, ""))):
                        param = f"messages.{i}.content.{j}.{block['type']}.{key}"
                        return param, f"{param}: String should match pattern '^[a-zA-Z0-9_-]+$'"
        limit, items, where = (
            (40, body.get("messages"), "messages")
            if api == "chat_completions"
            else (64, body.get("input"), "input")
        )
        for i, item in enumerate(items if isinstance(items, list) else []):
            if not isinstance(item, dict):
                continue
            ids = [(f"{where}[{i}].call_id", item.get("call_id"))] if api == "responses" else [
                (f"{where}[{i}].tool_calls[{j}].id", c.get("id")) for j, c in enumerate(item.get("tool_calls") or [])
            ]  # fmt: skip
            for param, value in ids:
                if isinstance(value, str) and len(value) > limit:
                    return param, (
                        f"Invalid '{param}': string too long. Expected a string with maximum length {limit}, "
                        f"but got a string with length {len(value)} instead."
                    )
        return None

    def _plan(self, api: str, model: str, body: dict[str, Any], sc: Scenario) -> _Plan:
        # Last user text and whether the conversation ends with a tool result.
        user_text = ""
        ends_with_tool_result = False
        tools: list[tuple[str, dict[str, Any]]] = []
        if api == "responses":
            inp = body.get("input")
            if isinstance(inp, str):
                user_text = inp
            elif isinstance(inp, list):
                for item in inp:
                    if not isinstance(item, dict):
                        continue
                    if item.get("role") == "user":
                        user_text = _content_to_text(item.get("content"))
                if inp and isinstance(inp[-1], dict):
                    ends_with_tool_result = inp[-1].get("type") == "function_call_output"
            for tool in body.get("tools") or []:
                if tool.get("type") == "function":
                    tools.append((tool.get("name", ""), tool.get("parameters") or {}))
        else:
            msgs = body.get("messages") or []
            for msg in msgs:
                if isinstance(msg, dict) and msg.get("role") == "user":
                    content = msg.get("content")
                    if isinstance(content, list) and any(
                        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
                    ):
                        continue
                    user_text = _content_to_text(content)
            if msgs and isinstance(msgs[-1], dict):
                last = msgs[-1]
                ends_with_tool_result = last.get("role") == "tool" or (
                    isinstance(last.get("content"), list)
                    and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in last["content"])
                )
            for tool in body.get("tools") or []:
                if api == "chat_completions":
                    fn = tool.get("function") or {}
                    tools.append((fn.get("name", ""), fn.get("parameters") or {}))
                else:
                    tools.append((tool.get("name", ""), tool.get("input_schema") or {}))

        text = (
            sc.reply if sc.reply is not None else f"{model} reply to: {user_text} [quality={sc.quality:.2f}]"
        )
        if JUDGE_MARKER in json.dumps(body):
            text, tools = judge_verdict(user_text, sc.judge_malformed), []
        # the output contracts are honoured: a forced call is made whatever the scenario says,
        # "none" makes none, one call at most without parallel calls, the text in the format asked
        contract = _contract(api, body)
        calls: list[tuple[str, str, dict[str, Any]]] = []
        again = sc.tool_calls.startswith("chain") or contract.choice == "required"
        wanted = contract.choice == "required" or (sc.tool_calls != "never" and contract.choice != "none")
        if tools and (again or not ends_with_tool_result) and wanted:
            chosen = [tools[0]]
            if contract.name is not None:
                chosen = [t for t in tools if t[0] == contract.name][:1]
            elif sc.tool_calls in ("parallel", "chain_parallel"):
                chosen = tools[:2] if len(tools) > 1 else [tools[0], tools[0]]
            prefix = {"chat_completions": "call_", "responses": "call_", "messages": "toolu_"}[api]
            for name, schema in chosen[: None if contract.parallel else 1]:
                args = (
                    sc.tool_arguments if sc.tool_arguments is not None else _tool_arguments(schema, user_text)
                )
                calls.append((prefix + uuid.uuid4().hex[:24], name, args))
            text = "" if api != "messages" or contract.fmt else "I'll use a tool for that."
        elif contract.fmt is not None:
            value = (
                _example(contract.fmt.get("schema"), user_text)
                if contract.fmt["type"] == "json_schema"
                else None
            )
            text = json.dumps(value if value is not None else {"reply": text})

        mode = sc.encrypted_reasoning or self.fake.encrypted_reasoning
        include = body.get("include") or []
        encrypted = mode == "always" or (mode == "include" and "reasoning.encrypted_content" in include)
        reasoning_tokens = (
            sc.reasoning_tokens if sc.reasoning_tokens is not None else (12 if sc.reasoning else 0)
        )
        if sc.output_tokens is not None:
            output_tokens = sc.output_tokens
        else:
            output_tokens = (
                len(text.split()) + sum(len(json.dumps(a).split()) for _, _, a in calls) + reasoning_tokens
            )
        input_tokens = sc.input_tokens if sc.input_tokens is not None else max(1, len(json.dumps(body)) // 4)
        cache = (sc.cached_tokens, sc.cache_write_tokens)
        if api == "messages" and not any(cache):
            cache = self.fake._prompt_cache(model, body, input_tokens)
        return _Plan(
            model=model,
            text=text,
            tool_calls=calls,
            reasoning=sc.reasoning,
            encrypted=encrypted,
            thinking_text=sc.thinking_text,
            redacted=sc.redacted_thinking,
            input_tokens=input_tokens,
            cached_tokens=cache[0],
            cache_write_tokens=cache[1],
            output_tokens=output_tokens,
            reasoning_tokens=reasoning_tokens,
            request_id=self._request_id,
            scenario=sc,
        )


#: Marks a shadow test's judge prompt (``routing.shadow.judge.JUDGE_MARKER``).
JUDGE_MARKER = "[muse-shadow-judge]"
_QUALITY = re.compile(r"<answer_([ab])>.*?\[quality=([0-9.]+)\].*?</answer_\1>", re.S)
_MALFORMED_VERDICTS = ("I prefer the first answer.", "VERDICT: A or B", "verdict: a", "VERDICT: C", "")


def judge_verdict(prompt: str, malformed_share: float) -> str:
    """A judge's answer to ``prompt``, deterministic in it: malformed with probability
    ``malformed_share``; else a tie with probability 0.1, else ``A`` with probability
    ``0.45 + (quality_a - quality_b)`` (clipped to [0.05, 0.95]) of the non-ties."""
    u = int(hashlib.sha256(prompt.encode()).hexdigest()[:12], 16) / float(16**12)
    if u < malformed_share:
        return _MALFORMED_VERDICTS[int(u * 1000) % len(_MALFORMED_VERDICTS)]
    v = (u - malformed_share) / max(1.0 - malformed_share, 1e-9)
    if v < 0.1:
        return "VERDICT: TIE"
    q = {k: float(x) for k, x in _QUALITY.findall(prompt)}
    p_a = min(max(0.45 + q.get("a", 0.5) - q.get("b", 0.5), 0.05), 0.95)
    return "VERDICT: A" if (v - 0.1) / 0.9 < p_a else "VERDICT: B"


def _same_output_item(sent: Mapping[str, Any], issued: Mapping[str, Any] | None) -> bool:
    """Whether an input item is the output item ``issued`` (by id, else by what identifies it)."""
    if issued is None:
        return False
    if sent.get("id"):
        return sent["id"] == issued["id"]
    if issued["type"] == "function_call":
        return sent.get("type") == "function_call" and sent.get("call_id") == issued["call_id"]
    if issued["type"] == "reasoning":
        return sent.get("encrypted_content") == issued.get("encrypted_content")
    if issued["type"] == "message":
        return sent.get("role") == "assistant" and _content_to_text(sent.get("content")) == _content_to_text(
            issued["content"]
        )
    return False


def _bearer(value: str | None) -> str | None:
    if value and value.lower().startswith("bearer "):
        return value[7:].strip()
    return None


def _mask_key(key: str) -> str:
    """Mask like OpenAI does in its 401 message (``sk-abc***wxyz``)."""
    if len(key) <= 8:
        return "*" * len(key)
    return f"{key[:3]}{'*' * (len(key) - 7)}{key[-4:]}"


def _retry_after_headers(sc: Scenario) -> dict[str, str]:
    """The wait of ``sc.retry_after_s`` in the header style ``sc.retry_after_header`` asks for."""
    if sc.retry_after_header == "retry-after-ms":
        return {"retry-after-ms": _fmt_num(sc.retry_after_s * 1000)}
    if sc.retry_after_header == "anthropic-reset":
        reset = datetime.now(UTC) + timedelta(seconds=sc.retry_after_s)
        return {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": reset.isoformat(timespec="seconds").replace("+00:00", "Z"),
        }
    return {"retry-after": _fmt_num(sc.retry_after_s)}


def _fmt_num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


# --------------------------------------------------------------------------------------------
# Renderers
# --------------------------------------------------------------------------------------------


class _Renderer:
    def __init__(self, handler: _Handler, plan: _Plan, body: dict[str, Any], failure: str | None) -> None:
        self.h = handler
        self.plan = plan
        self.body = body
        self.failure = failure
        self.created = int(time.time())
        self._deltas_sent = 0

    @property
    def fake(self) -> FakeUpstreams:
        return self.h.fake

    def headers(self) -> dict[str, str]:
        return self.h._request_id_headers("anthropic" if isinstance(self, _MessagesRenderer) else "openai")

    def respond(self, stream: bool) -> None:
        if not stream:
            if self.failure == "malformed":
                self.h._send_json(200, None, self.headers(), raw=b'{"id": "broken", "choices": [ {"truncated')
                return
            self.h._send_json(200, self.full(), self.headers())
            return
        self.h._start_stream(self.headers())
        for chunk in self.events():
            self.h._chunk(chunk)
        self.h._end_stream()

    def gate(self) -> Iterator[bytes]:
        """Called before each content delta; injects stream failures; sleeps chunk_delay_ms."""
        if self.failure in ("stream_error", "stream_reset", "malformed") and (
            self._deltas_sent >= self.plan.scenario.stream_error_after
        ):
            if self.failure == "stream_reset":
                self.h._reset_connection()
            if self.failure == "malformed":
                yield b"data: {this is not json\n\n"
                raise _StreamStop
            yield from self.stream_error()
            raise _StreamStop
        self._deltas_sent += 1
        if not self.fake._sleep(self.plan.scenario.chunk_delay_ms):
            raise _Abort

    def full(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def events(self) -> Iterator[bytes]:  # pragma: no cover - abstract
        raise NotImplementedError

    def stream_error(self) -> Iterator[bytes]:  # pragma: no cover - abstract
        raise NotImplementedError


class _StreamStop(Exception):
    """Ends a stream early (after an in-stream error was written)."""


def _sse(data: Any, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {payload}\n\n".encode()


class _ChatRenderer(_Renderer):
    """OpenAI Chat Completions (https://platform.openai.com/docs/api-reference/chat)."""

    def usage(self) -> dict[str, Any]:
        p = self.plan
        return {
            "prompt_tokens": p.input_tokens,
            "completion_tokens": p.output_tokens,
            "total_tokens": p.input_tokens + p.output_tokens,
            "prompt_tokens_details": {"cached_tokens": p.cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": p.reasoning_tokens,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def full(self) -> dict[str, Any]:
        p = self.plan
        message: dict[str, Any] = {"role": "assistant", "content": p.text or None, "refusal": None}
        if p.tool_calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                for cid, name, args in p.tool_calls
            ]
        return {
            "id": f"chatcmpl-{p.request_id[:24]}",
            "object": "chat.completion",
            "created": self.created,
            "model": p.model,
            "system_fingerprint": "fp_fake",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": "tool_calls" if p.tool_calls else "stop",
                }
            ],
            "usage": self.usage(),
        }

    def chunk(
        self, delta: dict[str, Any], finish: str | None = None, usage: Any = None, choices=True
    ) -> bytes:
        p = self.plan
        data: dict[str, Any] = {
            "id": f"chatcmpl-{p.request_id[:24]}",
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": p.model,
            "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
            if choices
            else [],
        }
        if usage is not None or (self.body.get("stream_options") or {}).get("include_usage"):
            data["usage"] = usage
        return _sse(data)

    def events(self) -> Iterator[bytes]:
        p = self.plan
        try:
            yield self.chunk({"role": "assistant", "content": "", "refusal": None})
            if p.text:
                for piece in _words(p.text):
                    yield from self.gate()
                    yield self.chunk({"content": piece})
            for index, (cid, name, args) in enumerate(p.tool_calls):
                yield from self.gate()
                yield self.chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": cid,
                                "type": "function",
                                "function": {"name": name, "arguments": ""},
                            }
                        ]
                    }
                )
                for piece in _split_n(json.dumps(args)):
                    yield from self.gate()
                    yield self.chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            yield self.chunk({}, finish="tool_calls" if p.tool_calls else "stop")
            if (self.body.get("stream_options") or {}).get("include_usage"):
                yield self.chunk({}, usage=self.usage(), choices=False)
            yield b"data: [DONE]\n\n"
        except _StreamStop:
            return

    def stream_error(self) -> Iterator[bytes]:
        yield _sse(
            {
                "error": {
                    "message": "The server had an error while processing your request.",
                    "type": "server_error",
                    "param": None,
                    "code": None,
                }
            }
        )


class _ResponsesRenderer(_Renderer):
    """OpenAI / Azure OpenAI Responses API (https://platform.openai.com/docs/api-reference/responses)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seq = 0
        p = self.plan
        self.resp_id = f"resp_{p.request_id[:32]}"
        self.items: list[dict[str, Any]] = []
        if p.reasoning:
            item: dict[str, Any] = {
                "id": f"rs_{uuid.uuid4().hex}",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "**Planning** Considering the request."}],
            }
            if p.encrypted:
                item["encrypted_content"] = self.fake._issue_blob("gAAAAA", p.model)
            self.items.append(item)
        if p.text:
            self.items.append(
                {
                    "id": f"msg_{uuid.uuid4().hex}",
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": p.text, "annotations": [], "logprobs": []}],
                }
            )
        for cid, name, args in p.tool_calls:
            self.items.append(
                {
                    "id": f"fc_{uuid.uuid4().hex}",
                    "type": "function_call",
                    "status": "completed",
                    "call_id": cid,
                    "name": name,
                    "arguments": json.dumps(args),
                }
            )
        reasoning_id = None
        for pos, item in enumerate(self.items):
            if item["type"] == "reasoning":
                reasoning_id = item["id"]
                following = self.items[pos + 1] if pos + 1 < len(self.items) else None
                if "encrypted_content" in item:
                    self.fake._bind_issued(
                        item["encrypted_content"], {"id": item["id"], "following": following}
                    )
            elif item["type"] == "function_call" and reasoning_id is not None:
                self.fake._bind_issued("fc:" + item["id"], {"id": reasoning_id})

    def usage(self) -> dict[str, Any]:
        p = self.plan
        return {
            "input_tokens": p.input_tokens,
            "input_tokens_details": {
                "cached_tokens": p.cached_tokens,
                "cache_write_tokens": p.cache_write_tokens,
            },
            "output_tokens": p.output_tokens,
            "output_tokens_details": {"reasoning_tokens": p.reasoning_tokens},
            "total_tokens": p.input_tokens + p.output_tokens,
        }

    def response(
        self, status: str, output: list[dict[str, Any]], usage: Any, error: Any = None
    ) -> dict[str, Any]:
        b = self.body
        return {
            "id": self.resp_id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": error,
            "incomplete_details": None,
            "instructions": b.get("instructions"),
            "max_output_tokens": b.get("max_output_tokens"),
            "model": self.plan.model,
            "output": output,
            "parallel_tool_calls": b.get("parallel_tool_calls", True),
            "previous_response_id": None,
            "reasoning": b.get("reasoning") or {"effort": None, "summary": None},
            "store": b.get("store", True),
            "temperature": b.get("temperature", 1.0),
            "text": b.get("text") or {"format": {"type": "text"}},
            "tool_choice": b.get("tool_choice", "auto"),
            "tools": b.get("tools") or [],
            "top_p": b.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": usage,
            "metadata": {},
        }

    def full(self) -> dict[str, Any]:
        return self.response("completed", self.items, self.usage())

    def ev(self, etype: str, **fields: Any) -> bytes:
        data = {"type": etype, "sequence_number": self.seq, **fields}
        self.seq += 1
        return _sse(data, event=etype)

    def events(self) -> Iterator[bytes]:
        try:
            yield self.ev("response.created", response=self.response("in_progress", [], None))
            yield self.ev("response.in_progress", response=self.response("in_progress", [], None))
            for idx, item in enumerate(self.items):
                if item["type"] == "reasoning":
                    added = dict(item)
                    if "encrypted_content" in added:
                        # Real API: the blob in output_item.added "may be incomplete".
                        added["encrypted_content"] = added["encrypted_content"][:24]
                    yield self.ev("response.output_item.added", output_index=idx, item=added)
                    yield self.ev("response.output_item.done", output_index=idx, item=item)
                elif item["type"] == "message":
                    text = item["content"][0]["text"]
                    empty = {**item, "status": "in_progress", "content": []}
                    yield self.ev("response.output_item.added", output_index=idx, item=empty)
                    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                    yield self.ev(
                        "response.content_part.added",
                        item_id=item["id"],
                        output_index=idx,
                        content_index=0,
                        part=part,
                    )
                    for piece in _words(text):
                        yield from self.gate()
                        yield self.ev(
                            "response.output_text.delta",
                            item_id=item["id"],
                            output_index=idx,
                            content_index=0,
                            delta=piece,
                            logprobs=[],
                        )
                    yield self.ev(
                        "response.output_text.done",
                        item_id=item["id"],
                        output_index=idx,
                        content_index=0,
                        text=text,
                        logprobs=[],
                    )
                    yield self.ev(
                        "response.content_part.done",
                        item_id=item["id"],
                        output_index=idx,
                        content_index=0,
                        part={**part, "text": text},
                    )
                    yield self.ev("response.output_item.done", output_index=idx, item=item)
                else:
                    empty = {**item, "status": "in_progress", "arguments": ""}
                    yield self.ev("response.output_item.added", output_index=idx, item=empty)
                    for piece in _split_n(item["arguments"]):
                        yield from self.gate()
                        yield self.ev(
                            "response.function_call_arguments.delta",
                            item_id=item["id"],
                            output_index=idx,
                            delta=piece,
                        )
                    yield self.ev(
                        "response.function_call_arguments.done",
                        item_id=item["id"],
                        output_index=idx,
                        name=item["name"],
                        arguments=item["arguments"],
                    )
                    yield self.ev("response.output_item.done", output_index=idx, item=item)
            yield self.ev("response.completed", response=self.full())
        except _StreamStop:
            return

    def stream_error(self) -> Iterator[bytes]:
        if self.plan.scenario.stream_error_kind == "response.failed":
            err = {"code": "server_error", "message": "The model failed to generate a response."}
            yield self.ev("response.failed", response=self.response("failed", [], None, error=err))
        else:
            yield self.ev(
                "error",
                code="server_error",
                message="The server had an error while processing your request.",
                param=None,
            )


class _MessagesRenderer(_Renderer):
    """Anthropic Messages (https://docs.anthropic.com/en/api/messages, .../messages-streaming)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        p = self.plan
        self.msg_id = f"msg_{p.request_id[4:28]}"
        self.blocks: list[dict[str, Any]] = []
        if p.reasoning:
            self.blocks.append(
                {
                    "type": "thinking",
                    "thinking": p.thinking_text,
                    "signature": self.fake._issue_blob("EqQB", p.model),
                }
            )
            if p.redacted:
                self.blocks.append(
                    {"type": "redacted_thinking", "data": self.fake._issue_blob("EmwK", p.model)}
                )
        if p.text:
            self.blocks.append({"type": "text", "text": p.text})
        for cid, name, args in p.tool_calls:
            self.blocks.append({"type": "tool_use", "id": cid, "name": name, "input": args})
        reasoning = [b for b in self.blocks if b["type"] in ("thinking", "redacted_thinking")]
        if reasoning:
            rest = [(b["type"], b.get("id"), b.get("text")) for b in self.blocks[len(reasoning) :]]
            record = {"reasoning": [dict(b) for b in reasoning], "rest": rest}
            for block in reasoning:
                self.fake._bind_issued(block.get("signature") or block["data"], record)
            for cid, _, _ in p.tool_calls:
                self.fake._bind_issued("tool_use:" + cid, record)

    def usage(self, output_tokens: int | None = None) -> dict[str, Any]:
        p = self.plan
        return {
            "input_tokens": max(0, p.input_tokens - p.cached_tokens - p.cache_write_tokens),
            "cache_creation_input_tokens": p.cache_write_tokens,
            "cache_read_input_tokens": p.cached_tokens,
            "output_tokens": p.output_tokens if output_tokens is None else output_tokens,
            "service_tier": "standard",
        }

    def message(
        self, content: list[dict[str, Any]], stop_reason: str | None, usage: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "id": self.msg_id,
            "type": "message",
            "role": "assistant",
            "model": self.plan.model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }

    def stop_reason(self) -> str:
        return "tool_use" if self.plan.tool_calls else "end_turn"

    def full(self) -> dict[str, Any]:
        return self.message(self.blocks, self.stop_reason(), self.usage())

    def events(self) -> Iterator[bytes]:
        try:
            yield _sse(
                {"type": "message_start", "message": self.message([], None, self.usage(output_tokens=1))},
                "message_start",
            )
            yield _sse({"type": "ping"}, "ping")
            for idx, block in enumerate(self.blocks):
                btype = block["type"]
                if btype == "thinking":
                    yield self.block_start(idx, {"type": "thinking", "thinking": "", "signature": ""})
                    if block["thinking"]:
                        for piece in _words(block["thinking"]):
                            yield from self.gate()
                            yield self.delta(idx, {"type": "thinking_delta", "thinking": piece})
                    yield self.delta(idx, {"type": "signature_delta", "signature": block["signature"]})
                elif btype == "redacted_thinking":
                    yield self.block_start(idx, block)
                elif btype == "text":
                    yield self.block_start(idx, {"type": "text", "text": ""})
                    for piece in _words(block["text"]):
                        yield from self.gate()
                        yield self.delta(idx, {"type": "text_delta", "text": piece})
                else:
                    yield self.block_start(idx, {**block, "input": {}})
                    for piece in _split_n(json.dumps(block["input"])):
                        yield from self.gate()
                        yield self.delta(idx, {"type": "input_json_delta", "partial_json": piece})
                yield _sse({"type": "content_block_stop", "index": idx}, "content_block_stop")
            usage = self.usage()
            yield _sse(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": self.stop_reason(), "stop_sequence": None},
                    "usage": {
                        "output_tokens": usage["output_tokens"],
                        "input_tokens": usage["input_tokens"],
                        "cache_creation_input_tokens": usage["cache_creation_input_tokens"],
                        "cache_read_input_tokens": usage["cache_read_input_tokens"],
                    },
                },
                "message_delta",
            )
            yield _sse({"type": "message_stop"}, "message_stop")
        except _StreamStop:
            return

    def block_start(self, idx: int, block: dict[str, Any]) -> bytes:
        return _sse(
            {"type": "content_block_start", "index": idx, "content_block": block}, "content_block_start"
        )

    def delta(self, idx: int, delta: dict[str, Any]) -> bytes:
        return _sse({"type": "content_block_delta", "index": idx, "delta": delta}, "content_block_delta")

    def stream_error(self) -> Iterator[bytes]:
        yield _sse(
            {
                "type": "error",
                "error": {"type": "overloaded_error", "message": "Overloaded"},
                "request_id": self.plan.request_id,
            },
            "error",
        )


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """``python -m routing.fake_upstreams --port 8900 [--host 127.0.0.1] [--scenarios FILE]
    [--keys-json '{"openai": "sk-..."}'] [--encrypted-reasoning include|always|never]``.

    ``--scenarios`` is a JSON file ``{"model": {scenario knobs}, ...}``; without it every model of
    the seeded catalogue (:func:`routing.catalogue.endpoint_seeds`) answers with the default knobs.
    Blocks until Ctrl-C.
    """
    parser = argparse.ArgumentParser(
        prog="python -m routing.fake_upstreams", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8900)
    parser.add_argument("--scenarios", help="JSON file: {model: {knob: value}}")
    parser.add_argument(
        "--keys-json", help='JSON: {"openai": "...", "azure": "...", "anthropic": "...", "native": "..."}'
    )
    parser.add_argument("--encrypted-reasoning", default="include", choices=["include", "always", "never"])
    args = parser.parse_args(argv)
    from routing.catalogue import endpoint_seeds  # pure Python, no Django

    # without --scenarios: every model the seeded catalogue names (seed_catalogue
    # --simulated-base-url), with the default knobs
    scenarios = {seed.upstream_model: {} for seed in endpoint_seeds()}
    if args.scenarios:
        with open(args.scenarios, encoding="utf-8") as fh:
            scenarios = json.load(fh)
    # Keys from the environment keep them out of `ps`; --keys-json remains for quick manual runs.
    keys_json = args.keys_json or os.environ.get("FAKE_UPSTREAM_KEYS_JSON")
    keys = json.loads(keys_json) if keys_json else None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    fake = FakeUpstreams(
        host=args.host,
        port=args.port,
        api_keys=keys,
        scenarios=scenarios,
        encrypted_reasoning=args.encrypted_reasoning,
    )
    url = fake.start()
    print(f"Fake upstreams on {url}", file=sys.stderr)
    print(
        f"  OpenAI/Avocado chat:  {url}/v1/chat/completions   key {[_mask_key(k) for k in sorted(fake._keys['openai'])]}",
        file=sys.stderr,
    )
    print(f"  OpenAI responses:     {url}/v1/responses", file=sys.stderr)
    print(
        f"  Azure (api-version):  azure_endpoint={url}  key {[_mask_key(k) for k in sorted(fake._keys['azure'])]}",
        file=sys.stderr,
    )
    print(f"  Azure (v1):           base_url={url}/openai/v1/", file=sys.stderr)
    print(
        f"  Anthropic:            base_url={url}   key {[_mask_key(k) for k in sorted(fake._keys['anthropic'])]}",
        file=sys.stderr,
    )
    print(f"  Control:              {url}/_fake/scenarios | /_fake/calls | /_fake/reset", file=sys.stderr)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
