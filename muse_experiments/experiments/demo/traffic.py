"""The demo's simulated agents: sessions through ``POST /api/v1/completions`` and their outcomes
through ``POST /api/v1/events``, over HTTP like any client.

A session's outcome is drawn from the served model's true success rate (:data:`.config.TRUE_SUCCESS`)
with a generator seeded by the session id, so a re-run of the same sessions draws the same outcomes.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
from django.core.management.base import CommandError

from routing.worker import drainer

from . import config


def drive(
    base: str,
    key: str,
    sessions: int,
    concurrency: int,
    *,
    stream: str = "",
    prefix: str = "sess",
) -> list[dict | None]:
    """Send ``sessions`` one-call sessions, ``concurrency`` at a time. Each answered one becomes
    ``{"session_id", "user_id", **result}`` (``result``: the API's ``served_model``, ``experiment``,
    ``variant`` …); a failed one ``None``. ``stream`` (when set) is sent as the ``stream``
    attribute, which the adaptive experiments target."""
    client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    run = uuid.uuid4().hex[:8]
    attributes = {"stream": stream} if stream else {}

    def one(i: int) -> dict | None:
        session_id, user_id = f"{prefix}-{run}-{i:05d}", f"user-{i % 700:04d}"
        body = {
            "session_id": session_id,
            "user_id": user_id,
            "subagent": config.SUBAGENTS[i % len(config.SUBAGENTS)],
            "attributes": {"tier": "pro" if i % 5 == 0 else "free", "locale": "en-US", **attributes},
            "messages": [{"role": "user", "content": f"Task {i}: summarise the release notes."}],
            "tools": config.TOOLS if i % 4 == 0 else [],
        }
        try:
            response = client.post("/api/v1/completions", json=body)
        except httpx.HTTPError:
            return None
        if response.status_code != 200 or response.json()["status"] != "succeeded":
            return None
        return {"session_id": session_id, "user_id": user_id, **response.json()["result"]}

    with client, ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, range(sessions)))


def wait_records_written(alive: Callable[[], None], timeout_s: float = 300) -> None:
    """Wait until the drainer has written every buffered call record (exposures, call records,
    jobs) to the database, so the analysis counts every session. ``alive()`` raises when a
    platform process died. Raises CommandError past ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while drainer.pending():
        alive()
        if time.monotonic() > deadline:
            raise CommandError(f"Call records still buffered after {timeout_s:.0f}s; see var/logs/.")
        time.sleep(0.1)


def outcome(session: dict, labels: dict[str, str]) -> bool:
    """Whether ``session`` succeeded: a draw at its served model's true rate, seeded by its id.
    ``labels``: endpoint public id → version label (the key of TRUE_SUCCESS)."""
    truth = config.TRUE_SUCCESS.get(labels.get(session["served_model"], ""), config.DEFAULT_SUCCESS)
    return random.Random(session["session_id"]).random() < truth


def model_labels() -> dict[str, str]:
    """Endpoint public id → version label (the keys of TRUE_SUCCESS)."""
    from routing.models import ModelEndpoint

    return dict(ModelEndpoint.objects.values_list("public_id", "version_label"))


def event(session: dict, labels: dict[str, str]) -> dict:
    """The ``task_success`` event (value 1 or 0, :func:`outcome`) of an answered session."""
    return {
        "event_id": f"{session['session_id']}:task_success",
        "name": "task_success",
        "session_id": session["session_id"],
        "user_id": session["user_id"],
        "value": 1.0 if outcome(session, labels) else 0.0,
    }


def post_events(base: str, key: str, sessions: list[dict]) -> int:
    """Post one ``task_success`` event (1 or 0) per answered session, 1,000 per request; returns
    how many. Post them once the sessions' records are written (:func:`wait_records_written`):
    the analysis counts an event from its unit's first exposure on, and an exposure's time is
    when the drainer wrote it. Raises ``httpx.HTTPStatusError`` if the API refuses a batch."""
    labels = model_labels()
    events = [event(s, labels) for s in sessions]
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
        for start in range(0, len(events), 1000):
            client.post("/api/v1/events", json={"events": events[start : start + 1000]}).raise_for_status()
    return len(events)
