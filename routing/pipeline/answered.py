"""What runs once a call's caller has its answer: listeners the apps register.

The pipeline knows nothing of what listens: :func:`routing.pipeline.router.execute_job` calls
:func:`call_answered` after the job's final state was handed back to its caller, and
:func:`routing.pipeline.streaming.stream_job_events` after its consumer took the terminal event
(for :func:`~routing.pipeline.streaming.publish_job_events`: after it was published to the
client's stream). The shadow tests register their offer here
(:meth:`routing.apps.RoutingConfig.ready` -> :func:`routing.shadow.sampling.shadow_offer`), so the
pipeline does not import them while a shadow call is one of the pipeline's attempts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

#: ``listener(job=, decision=, outcome=)``: the job, its plan's decision and its ``ServeOutcome``.
Listener = Callable[..., Any]

_listeners: list[Listener] = []


def on_answered(listener: Listener) -> Callable[[], None]:
    """Register ``listener`` (once: registering it again does nothing); returns a function that
    unregisters it. Listeners run in the worker's thread, in registration order."""
    if listener not in _listeners:
        _listeners.append(listener)

    def remove() -> None:
        if listener in _listeners:
            _listeners.remove(listener)

    return remove


def call_answered(*, job: Any, decision: Any, outcome: Any) -> None:
    """Run every listener for a call whose caller has its answer. Never raises: a listener's
    error is logged (the job is done whatever a listener does)."""
    for listener in tuple(_listeners):
        try:
            listener(job=job, decision=decision, outcome=outcome)
        except Exception:  # noqa: BLE001 - the answer is out; a listener must not fail the job
            log.exception(
                "a listener of answered calls failed (%s)", getattr(listener, "__qualname__", listener)
            )
