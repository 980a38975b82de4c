"""What runs once calls' records are written: listeners the apps register.

The pipeline knows nothing of what listens. :func:`calls_recorded` runs after a batch of calls'
records (each :func:`routing.pipeline.records.call_payload`) was committed to the database: by the
records drainer (:func:`routing.worker.drainer.drain`, the production path, where the callers had
their answers before their records were even buffered: :func:`routing.pipeline.recording.buffer_call`),
or by :func:`routing.pipeline.recording.record_call` after it handed the final state back when it
writes the records itself. So a listener costs the calls' workers nothing. The shadow tests
register their offer here (:meth:`routing.apps.RoutingConfig.ready` ->
:func:`routing.shadow.sampling.shadow_offer`), so the pipeline does not import them while a shadow
call is one of the pipeline's attempts.

A drainer that dies before acknowledging a written batch has it written again by another (an
idempotent write), and the listeners called again: a listener must be idempotent too (a shadow
call is taken once per test and job).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)

#: ``listener(payloads)``: the written calls' :func:`~routing.pipeline.records.call_payload` dicts.
Listener = Callable[[Sequence[Mapping[str, Any]]], Any]

_listeners: list[Listener] = []


def on_recorded(listener: Listener) -> Callable[[], None]:
    """Register ``listener`` (once: registering it again does nothing); returns a function that
    unregisters it. Listeners run in the writer's thread, in registration order."""
    if listener not in _listeners:
        _listeners.append(listener)

    def remove() -> None:
        if listener in _listeners:
            _listeners.remove(listener)

    return remove


def calls_recorded(payloads: Sequence[Mapping[str, Any]]) -> None:
    """Run every listener for calls whose records were just written. Never raises: a listener's
    error is logged (the records are written whatever a listener does)."""
    if not payloads:
        return
    for listener in tuple(_listeners):
        try:
            listener(payloads)
        except Exception:  # noqa: BLE001 - the records are written; a listener must not undo that
            log.exception(
                "a listener of recorded calls failed (%s)", getattr(listener, "__qualname__", listener)
            )
