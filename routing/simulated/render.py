"""What every protocol renderer of the simulated upstreams shares: the :class:`Renderer` base
(plain body or stream, injected stream failures, chunk delays) and the SSE/delta helpers.

A renderer turns a :class:`routing.simulated.plan.Plan` into one API's wire format
(:mod:`routing.simulated.openai`, :mod:`routing.simulated.anthropic`)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .handler import Handler
    from .plan import Plan
    from .server import FakeUpstreams


class Abort(Exception):
    """Raised inside a handler to stop processing (connection already dealt with)."""


class StreamStop(Exception):
    """Ends a stream early (after an in-stream error was written)."""


def words(text: str) -> list[str]:
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


def split_n(text: str, n: int = 3) -> list[str]:
    """``text`` in ``n`` pieces (the last may be shorter) that concatenate back to it; ``[""]``
    for an empty text."""
    if not text:
        return [""]
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event: ``event: <event>`` (when given) and ``data: <data as JSON>`` (a
    string is sent as is)."""
    payload = data if isinstance(data, str) else json.dumps(data)
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {payload}\n\n".encode()


class Renderer:
    """Answers one planned request for ``handler`` in an API's shape; subclasses give the
    non-streamed body (:meth:`full`), the stream (:meth:`events`) and the in-stream error
    (:meth:`stream_error`). ``flavour`` picks the request-id header (``request-id`` for
    ``anthropic``, else ``x-request-id``)."""

    flavour = "openai"

    def __init__(self, handler: Handler, plan: Plan, body: dict[str, Any], failure: str | None) -> None:
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
        return self.h.request_id_headers(self.flavour)

    def respond(self, stream: bool) -> None:
        """Send the whole answer (a JSON body, or a chunked SSE stream when ``stream``)."""
        if not stream:
            if self.failure == "malformed":
                self.h.send_json(200, None, self.headers(), raw=b'{"id": "broken", "choices": [ {"truncated')
                return
            self.h.send_json(200, self.full(), self.headers())
            return
        self.h.start_stream(self.headers())
        for chunk in self.events():
            self.h.chunk(chunk)
        self.h.end_stream()

    def gate(self) -> Iterator[bytes]:
        """Called before each content delta; injects stream failures; sleeps chunk_delay_ms."""
        if self.failure in ("stream_error", "stream_reset", "malformed") and (
            self._deltas_sent >= self.plan.scenario.stream_error_after
        ):
            if self.failure == "stream_reset":
                self.h.reset_connection()
            if self.failure == "malformed":
                yield b"data: {this is not json\n\n"
                raise StreamStop
            yield from self.stream_error()
            raise StreamStop
        self._deltas_sent += 1
        if not self.fake.sleep(self.plan.scenario.chunk_delay_ms):
            raise Abort

    def full(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def events(self) -> Iterator[bytes]:  # pragma: no cover - abstract
        raise NotImplementedError

    def stream_error(self) -> Iterator[bytes]:  # pragma: no cover - abstract
        raise NotImplementedError
