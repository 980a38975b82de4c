"""Routing metrics for Prometheus (see :mod:`muse_experiments.infra.metrics` for the multiprocess set-up).

Counted in the worker as each call is recorded (:func:`observe_outcome`, a few counter
increments, no I/O):

* ``muse_routed_calls_total{endpoint, experiment, variant, reason, status}`` — one per routed
  call; ``endpoint`` is the model that served it (``none`` when nothing could), ``reason`` the
  routing reason (``assigned``, ``default``, ``error_fallback``, ``variant_killed`` …);
* ``muse_upstream_attempts_total{endpoint, outcome}`` — every attempt, including refusals that
  made no upstream call (``killed``, ``circuit_open`` …);
* ``muse_upstream_retries_total{endpoint}`` — attempts after the first on the same endpoint;
* ``muse_fallbacks_total{from_endpoint, reason}`` — calls served by a later candidate than the
  assigned one;
* ``muse_attempts_cost_unknown_total{endpoint}`` — attempts that died with their worker
  (outcome ``lost``, :mod:`routing.worker.reaper`): they may have been billed, for an unknown cost.

Read at scrape time (:class:`RoutingStateCollector`): ``muse_circuit_state{endpoint, state}``
(1 for the endpoint's current state), ``muse_kill_switch_active{scope, target}``,
``muse_kill_state_unreadable`` and ``muse_job_oldest_age_seconds{status}`` (age of the oldest
queued / running completion job *row*: a waiting caller's job has no row until a worker claims it,
:func:`routing.jobs.completion_job_new`, so a broker backlog shows in
``muse_queue_depth`` and ``muse_job_queue_wait_seconds`` instead).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.db.models import Min
from django.utils import timezone
from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily

log = logging.getLogger(__name__)

ROUTED_CALLS = Counter(
    "muse_routed_calls",
    "Routed completion calls by serving endpoint, experiment, variant, routing reason and status.",
    ["endpoint", "experiment", "variant", "reason", "status"],
)
UPSTREAM_ATTEMPTS = Counter(
    "muse_upstream_attempts",
    "Attempts per endpoint by outcome (ok, error class, refusal).",
    ["endpoint", "outcome"],
)
RETRIES = Counter("muse_upstream_retries", "Retries (attempts after the first) per endpoint.", ["endpoint"])
FALLBACKS = Counter(
    "muse_fallbacks",
    "Calls served by a later candidate than the assigned endpoint.",
    ["from_endpoint", "reason"],
)

COST_UNKNOWN = Counter(
    "muse_attempts_cost_unknown",
    "Attempts that died with their worker: possibly billed, cost unknown.",
    ["endpoint"],
)


def observe_outcome(*, experiment: str | None, variant: str | None, assigned: str, outcome: Any) -> None:
    """Count one routed call from its :class:`routing.pipeline.router.ServeOutcome` (no I/O)."""
    served = outcome.served.public_id if outcome.served is not None else "none"
    status = "succeeded" if outcome.result is not None else "cancelled" if outcome.cancelled else "failed"
    ROUTED_CALLS.labels(served, experiment or "", variant or "", outcome.reason, status).inc()
    previous = None
    for attempt in outcome.attempts:
        UPSTREAM_ATTEMPTS.labels(attempt.endpoint, attempt.outcome).inc()
        if getattr(attempt, "cost_unknown", False):
            COST_UNKNOWN.labels(attempt.endpoint).inc()
        if attempt.endpoint == previous:
            RETRIES.labels(attempt.endpoint).inc()
        previous = attempt.endpoint
    if outcome.served is not None and assigned and served != assigned:
        FALLBACKS.labels(assigned, outcome.reason).inc()


class RoutingStateCollector:
    """Scrape-time gauges for circuit breakers, kill switches and the oldest waiting jobs."""

    def collect(self) -> Iterable[GaugeMetricFamily]:
        from routing.guards.circuit import breaker
        from routing.guards.killswitch import kill_state
        from routing.models import CompletionJob, JobStatus
        from routing.selectors import catalogue

        circuit = GaugeMetricFamily(
            "muse_circuit_state", "1 for each endpoint's current circuit state.", labels=["endpoint", "state"]
        )
        kills = GaugeMetricFamily(
            "muse_kill_switch_active", "Active kill switches (1 each).", labels=["scope", "target"]
        )
        unreadable = GaugeMetricFamily(
            "muse_kill_state_unreadable", "1 when the kill-switch state could not be read (external off)."
        )
        age = GaugeMetricFamily(
            "muse_job_oldest_age_seconds",
            "Age of the oldest completion job row in a status (s); broker backlog: muse_queue_depth.",
            labels=["status"],
        )
        try:
            b = breaker()
            for public_id in sorted(catalogue().endpoints):
                circuit.add_metric([public_id, b.state(public_id)], 1)
            state = kill_state()
            if state.external_off or state.forced_by_env:
                kills.add_metric(["all_external", ""], 1)
            for scope, targets in (
                ("provider", state.providers),
                ("endpoint", state.endpoints),
                ("experiment", state.experiments),
            ):
                for target in sorted(targets):
                    kills.add_metric([scope, target], 1)
            for exp, var in sorted(state.variants):
                kills.add_metric(["variant", f"{exp}/{var}"], 1)
            unreadable.add_metric([], 1 if state.unreadable else 0)
            now = timezone.now()
            for status in (JobStatus.QUEUED, JobStatus.RUNNING):
                oldest = CompletionJob.objects.filter(status=status).aggregate(t=Min("created_at"))["t"]
                age.add_metric([str(status)], (now - oldest).total_seconds() if oldest else 0.0)
        except Exception as exc:  # noqa: BLE001 - a scrape reports what it can
            log.warning("routing state metrics unavailable: %s", type(exc).__name__)
        yield from (circuit, kills, unreadable, age)
