"""The simulated upstreams' server: :class:`FakeUpstreams` holds the scenarios, the recorded
calls and the reasoning blobs it issued, and serves :class:`routing.simulated.handler.Handler` on
a thread (see :mod:`routing.simulated` for what it impersonates and its control API)."""

from __future__ import annotations

import base64
import copy
import hashlib
import itertools
import json
import logging
import sys
import threading
import uuid
from collections.abc import Iterable, Mapping
from http.server import ThreadingHTTPServer
from typing import Any

from .handler import Handler
from .scenario import DEFAULT_API_KEYS, DEFAULT_MODELS, Scenario, make_scenario

log = logging.getLogger(__name__)


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
        # What each reasoning blob was issued with (see reasoning.misplaced_reasoning).
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
        handler = type("_BoundHandler", (Handler,), {"fake": self})
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
        return sc if isinstance(sc, Scenario) else make_scenario(**dict(sc))

    def set_scenario(self, model: str, scenario: Scenario | None = None, **behaviour: Any) -> Scenario:
        """Set (replace) the scenario of ``model`` and reset its attempt counter.

        ``set_scenario("m", latency_ms=50, failure="rate_limit", fail_first_n=1)``. The model
        becomes accepted. Raises ``ValueError`` for unknown keys/values.
        """
        sc = make_scenario(scenario, **behaviour)
        with self._lock:
            self._scenarios[model] = sc
            self._attempts.pop(model, None)
        return sc

    def update_scenario(self, model: str, **behaviour: Any) -> Scenario:
        """Change some knobs of ``model``'s scenario, keeping the others."""
        with self._lock:
            return self.set_scenario(model, self._scenarios.get(model, self._default), **behaviour)

    def scenario(self, model: str) -> Scenario:
        """``model``'s scenario (the default scenario when it has none)."""
        with self._lock:
            return self._scenarios.get(model, self._default)

    def scenarios(self) -> dict[str, dict[str, Any]]:
        """``{model: knobs}`` of the models that have a scenario of their own."""
        with self._lock:
            return {m: s.to_dict() for m, s in self._scenarios.items()}

    def add_models(self, *models: str) -> None:
        """Serve ``models`` too (with the default scenario)."""
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
        """How many :meth:`calls` match."""
        return len(self.calls(model=model, path=path))

    # ---- used by the handler and the renderers ----------------------------------------------

    def record_call(self, call: dict[str, Any]) -> dict[str, Any]:
        """Number ``call`` (``seq``) and keep it for :meth:`calls`; returns it."""
        with self._lock:
            call["seq"] = next(self._seq)
            self._calls.append(call)
        return call

    def update_call(self, call: dict[str, Any], **fields: Any) -> None:
        """Set ``fields`` on a recorded call (under the lock :meth:`calls` copies under)."""
        with self._lock:
            call.update(fields)

    def add_stream_event(self, call: dict[str, Any], event: str) -> None:
        """Append one sent SSE payload to a recorded call's ``stream_events``."""
        with self._lock:
            call.setdefault("stream_events", []).append(event)

    def default_scenario(self) -> Scenario:
        """The scenario of models without one of their own."""
        return self._default

    def keys(self, family: str) -> set[str]:
        """The keys accepted for ``family`` (see :data:`DEFAULT_API_KEYS`)."""
        return set(self._keys.get(family, set()))

    def next_attempt(self, model: str) -> int:
        """Count one more call of ``model`` (since its scenario was set); returns the count."""
        with self._lock:
            n = self._attempts.get(model, 0) + 1
            self._attempts[model] = n
            return n

    def model_known(self, model: str) -> bool:
        """Whether ``model`` is served (a default or configured model, or one with a scenario)."""
        with self._lock:
            return model in self._models or model in self._scenarios

    def key_ok(self, families: Iterable[str], presented: str | None) -> bool:
        """Whether ``presented`` is a key of one of ``families``."""
        if not presented:
            return False
        return any(presented in self._keys.get(f, set()) for f in families)

    def issue_blob(self, prefix: str, seed: str) -> str:
        """A new opaque reasoning blob (``prefix`` + base64url of 96 bytes) this server will
        recognise when it is passed back (:meth:`blob_known`)."""
        digest = hashlib.sha256(f"{seed}|{next(self._seq)}|{uuid.uuid4()}".encode()).digest()
        blob = prefix + base64.urlsafe_b64encode(digest * 3).decode().rstrip("=")
        with self._lock:
            self._issued_reasoning.add(blob)
        return blob

    def blob_known(self, blob: str) -> bool:
        """Whether this server issued ``blob``."""
        with self._lock:
            return blob in self._issued_reasoning

    def bind_issued(self, blob: str, record: dict[str, Any]) -> None:
        """Remember what a reasoning blob was issued with (its response's items/blocks)."""
        with self._lock:
            self._issued_with[blob] = record

    def issued(self, blob: str) -> dict[str, Any] | None:
        """What :meth:`bind_issued` remembered for ``blob``, else ``None``."""
        with self._lock:
            return self._issued_with.get(blob)

    def prompt_cache(self, model: str, body: dict[str, Any], input_tokens: int) -> tuple[int, int]:
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

    def sleep(self, ms: float) -> bool:
        """Sleep ``ms`` milliseconds; returns False if the server is stopping."""
        if ms <= 0:
            return True
        return not self._stop.wait(ms / 1000.0)

    def stopping(self, wait_s: float = 0.0) -> bool:
        """Whether the server is stopping, waiting up to ``wait_s`` seconds for it."""
        return self._stop.wait(wait_s) if wait_s > 0 else self._stop.is_set()


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """Client disconnects/resets are normal here (timeouts, reset scenarios): log quietly."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
            log.debug("connection from %s ended: %r", client_address, exc)
            return
        log.exception("fake upstream handler failed for %s", client_address)
