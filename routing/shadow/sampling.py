"""Which running shadow tests mirror a finished primary call, and the hand-off to their queue.

Sampling is by session: a session is shadowed by a test when
``hash("shadow:" + key, session_id, 2) * 100 < sample_percent`` -- GrowthBook's v2 hash, the
assignment engine's (:func:`muse_experiments.experiments.assignment.growthbook.hashing.hash`) --
so a shadowed session is shadowed on every turn and the share of shadowed sessions matches the
percent. The running tests come from an in-process snapshot rebuilt when the configuration
version moves (starting or stopping a test bumps it), so a call with no test to mirror costs no
I/O at all.

:func:`shadow_offer` runs once a primary call's records are written, from what was written (its
:func:`~routing.pipeline.records.call_payload`): it listens to :mod:`routing.pipeline.recorded`
(registered by :meth:`routing.apps.RoutingConfig.ready`), which the records drainer calls after
each batch it wrote -- after the callers had their answers, in a process of its own -- so the
primaries' workers do nothing for shadow tests. It never raises. Each shadow call it offers costs
the drainer one message built (none when the backlog is full: the queue's room is read first);
a drained batch's offers go out in one Lua script that checks the room again and pushes
(:meth:`muse_experiments.infra.broker.DirectPublisher.push_bounded`: the backlog is the queue's
own length), where the broker is this Redis and publishes directly (else a place in the backlog
counter is taken, then the task published as any task, one by one).
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from muse_experiments.experiments.assignment.growthbook.hashing import hash as gb_hash
from muse_experiments.experiments.models import ShadowStatus, ShadowTest
from muse_experiments.infra.broker import direct_publisher
from muse_experiments.infra.config_version import VersionedSnapshot
from muse_experiments.infra.queues import Queue
from muse_experiments.infra.redis_client import redis_client

from ..messages import RUN_SHADOW
from .budget import backlog_release, backlog_room, backlog_take, dropped_count

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShadowSpec:
    """A running test as the hot path needs it: its key, sample percent, and the traffic it
    mirrors (calls served by ``source_model``, or by ``source_endpoint`` as the assigned variant
    ``source_variant`` of ``source_experiment``)."""

    key: str
    sample_percent: float
    source_model: str | None
    source_experiment: str | None
    source_variant: str
    source_endpoint: str | None

    def mirrors(self, *, served: str, experiment: str | None, variant: str | None) -> bool:
        """Whether a call served by ``served`` for ``experiment``/``variant`` is this test's traffic."""
        if self.source_model is not None:
            return served == self.source_model
        return (
            experiment == self.source_experiment
            and variant == self.source_variant
            and (served == self.source_endpoint)
        )


def session_shadowed(*, test_key: str, session_id: str, sample_percent: float) -> bool:
    """Whether ``session_id`` is in the test's sample (deterministic; see the module docstring)."""
    if not session_id or sample_percent <= 0:
        return False
    n = gb_hash(f"shadow:{test_key}", session_id, 2)
    return n is not None and n * 100.0 < sample_percent


def _build() -> tuple[ShadowSpec, ...]:
    specs = []
    running = ShadowTest.objects.filter(status=ShadowStatus.RUNNING).select_related(
        "source_model", "source_experiment"
    )
    for t in running:
        endpoint = None
        if t.source_experiment_id:
            v = t.source_experiment.variants.select_related("endpoint").filter(key=t.source_variant).first()
            endpoint = v.endpoint.public_id if v else None
        specs.append(
            ShadowSpec(
                key=t.key,
                sample_percent=t.sample_percent,
                source_model=t.source_model.public_id if t.source_model_id else None,
                source_experiment=t.source_experiment.key if t.source_experiment_id else None,
                source_variant=t.source_variant,
                source_endpoint=endpoint,
            )
        )
    return tuple(specs)


_running = VersionedSnapshot(_build)


def running_shadow_tests() -> tuple[ShadowSpec, ...]:
    """The running shadow tests (no I/O between configuration-version checks)."""
    return _running.get()


def primary_summary(payload: Mapping[str, Any]) -> dict[str, Any]:
    """What a shadow task needs of the primary's answer (JSON), from its written records
    (:func:`~routing.pipeline.records.call_payload`): ``model``, ``latency_ms`` (ms), ``cost_usd``
    (USD, string: every attempt's, as billed), ``output_tokens``, ``text``, ``tool_calls``
    ``[{"name", "arguments"}]``. Reasoning never (the records hold none)."""
    result = payload["turn"]["result_public"]
    return {
        "model": result["endpoint_id"],
        "latency_ms": float(result["latency_ms"]),
        "cost_usd": str(payload["call"]["cost_usd"]),
        "output_tokens": int(result["usage"]["output_tokens"]),
        "text": result["text"],
        "tool_calls": [{"name": c["name"], "arguments": dict(c["arguments"])} for c in result["tool_calls"]],
    }


def shadow_offer(payloads: Sequence[Mapping[str, Any]]) -> int:
    """Enqueue a shadow call for every running test that mirrors one of these written calls and
    samples its session; returns how many were enqueued. Failed or cancelled primaries are not
    mirrored. Beyond ``SHADOW_MAX_BACKLOG`` waiting shadow calls, a call is dropped and counted
    (``backlog``; ``error`` when the publish failed). Never raises: a shadow test must not fail
    its primary's records.

    ``payloads``: the calls' :func:`~routing.pipeline.records.call_payload` dicts (what
    :mod:`routing.pipeline.recorded` hands its listeners: a drained batch); their offers go out
    together (one round trip)."""
    specs = running_shadow_tests()
    if not specs:
        return 0
    offers: list[dict[str, Any]] = []
    for payload in payloads:
        try:
            offers += _offers(specs, payload)
        except Exception:  # noqa: BLE001 - the primary is answered; the shadow call is lost, not the job
            log.exception("could not offer job %s to its shadow tests", payload.get("job", {}).get("id"))
    if not offers:
        return 0
    reason = "backlog"
    try:
        sent = _publish(offers)
    except Exception:  # noqa: BLE001 - as above: lost shadow calls, counted
        log.exception("could not publish %d shadow calls", len(offers))
        sent, reason = 0, "error"
    try:
        for test_key, n in Counter(kwargs["test_key"] for kwargs in offers[sent:]).items():
            dropped_count(test_key, reason, n)  # one count per test and batch
    except Exception:  # noqa: BLE001 - Redis is failing: the log line above is what is left
        log.exception("could not count %d dropped shadow calls", len(offers) - sent)
    return sent


def _offers(specs: tuple[ShadowSpec, ...], payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``run_shadow`` keyword arguments of every test that shadows this written call."""
    call, turn = payload["call"], payload.get("turn")
    if turn is None or call["status"] != "succeeded" or not call["served_endpoint"]:
        return []
    experiment = call["experiment_key"] if payload.get("exposure") else None
    wanted = [
        s
        for s in specs
        if s.mirrors(served=call["served_endpoint"], experiment=experiment, variant=call["variant_key"])
        and session_shadowed(test_key=s.key, session_id=call["session_id"], sample_percent=s.sample_percent)
    ]
    if not wanted:
        return []
    primary = primary_summary(payload)
    request = {k: v for k, v in turn["request"].items() if k != "model"}
    job_id = str(payload["job"]["id"])
    return [
        {
            "test_key": spec.key,
            "job_id": job_id,
            "session_id": call["session_id"],
            "user_id": call["user_id"],
            "request": request,
            "primary": primary,
        }
        for spec in wanted
    ]


def _publish(offers: list[dict[str, Any]]) -> int:
    """Publish ``run_shadow`` messages for ``offers`` (in order) while the backlog has room;
    returns how many were published (the first ones). The backlog's room is read first, so no
    message is built for a call it cannot take (it is full while the host is too busy for shadow
    calls: :mod:`muse_experiments.infra.idle_cpu`)."""
    from celery import current_app

    app = current_app._get_current_object()
    limit = settings.SHADOW_MAX_BACKLOG
    publisher = None if app.conf.task_always_eager else direct_publisher(app)
    if publisher is not None and publisher.client is redis_client():
        offers = offers[: backlog_room(limit, publisher.client)]  # no message for a call it cannot take
        messages = [
            app.amqp.as_task_v2(
                str(uuid.uuid4()),
                RUN_SHADOW.name,
                kwargs=kwargs,
                ignore_result=True,
                kwargsrepr=_kwargsrepr(kwargs),
                soft_time_limit=RUN_SHADOW.soft_time_limit,
                time_limit=RUN_SHADOW.time_limit,
            )  # fmt: skip
            for kwargs in offers
        ]
        return publisher.push_bounded(messages, name=RUN_SHADOW.name, queue=Queue.SHADOW, limit=limit)
    if RUN_SHADOW.name not in app.tasks:  # eager mode (tests): loaded as a worker loads it
        app.loader.import_default_modules()
    sent = 0
    for kwargs in offers:
        if not backlog_take(limit):
            break
        try:
            app.tasks[RUN_SHADOW.name].apply_async(
                kwargs={**kwargs, "counted": True}, kwargsrepr=_kwargsrepr(kwargs), queue=Queue.SHADOW
            )
        except Exception:
            backlog_release()  # not published: its place is free again
            raise
        sent += 1
    return sent


def _kwargsrepr(kwargs: Mapping[str, Any]) -> str:
    """What the worker logs of a shadow task's arguments (never the conversation)."""
    return repr({"test_key": kwargs["test_key"], "job_id": kwargs["job_id"]})
