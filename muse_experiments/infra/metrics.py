"""Prometheus metrics (``prometheus-client``), exposed at ``GET /metrics``.

Several processes (gunicorn workers, Celery workers) each count their own events. With
``PROMETHEUS_MULTIPROC_DIR`` set (the production supervisor sets and empties it at start), every
process writes its samples to memory-mapped files there and ``/metrics`` merges them
(prometheus-client's multiprocess mode); without it, each process exposes its own counters (tests,
a single process). Cost on the hot path: one histogram observation per request and a few counter
increments per routed call (``bench/bench_metrics_overhead.py`` prints the figures).

Metrics defined here (platform-wide): ``muse_http_request_duration_seconds`` (method, route
pattern, status), ``muse_job_queue_wait_seconds`` (queue: age of a task when a worker starts it,
from the publish time in its headers), and at scrape time ``muse_queue_depth`` (messages waiting
per Celery queue, read from the broker) and ``muse_broker_up``. Routing metrics (routed calls,
retries, fallbacks, circuit and kill states, job age) live in :mod:`routing.metrics` and their
scrape-time collector is listed in ``settings.METRICS_COLLECTORS``.
"""

from __future__ import annotations

import hmac
import logging
import os
import time

from celery import current_app
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from .queues import Queue

log = logging.getLogger(__name__)

#: Seconds; buckets from 1 ms (instant upstream) to 60 s (a long model call).
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

HTTP_REQUEST_DURATION = Histogram(
    "muse_http_request_duration_seconds",
    "Time from request to response in the web process (s), by route pattern.",
    ["method", "route", "status"],
    buckets=LATENCY_BUCKETS,
)
JOB_QUEUE_WAIT = Histogram(
    "muse_job_queue_wait_seconds",
    "Age of a Celery task when a worker starts it: publish to start (s).",
    ["queue"],
    buckets=LATENCY_BUCKETS,
)
#: Task message header holding the publish time (epoch seconds).
PUBLISHED_AT_HEADER = "muse_published_at"


def observe_request(*, method: str, route: str, status: int, seconds: float) -> None:
    """Count one HTTP request (``route`` is the URL pattern, never the raw path)."""
    HTTP_REQUEST_DURATION.labels(method, route, str(status)).observe(seconds)


def stamp_published_at(headers: dict | None = None, **_kwargs) -> None:
    """``before_task_publish``: record the publish time in the message headers."""
    if headers is not None:
        headers.setdefault(PUBLISHED_AT_HEADER, time.time())


def observe_task_start(task=None, **_kwargs) -> None:
    """``task_prerun``: observe how long the task waited in its queue."""
    request = getattr(task, "request", None)
    if request is None:
        return
    published = getattr(request, PUBLISHED_AT_HEADER, None)
    if published is None:
        published = (getattr(request, "headers", None) or {}).get(PUBLISHED_AT_HEADER)
    if published is None:
        return
    queue = ((getattr(request, "delivery_info", None) or {}).get("routing_key")) or "unknown"
    JOB_QUEUE_WAIT.labels(queue).observe(max(0.0, time.time() - float(published)))


class QueueDepthCollector:
    """Scrape-time gauges: messages waiting in each Celery queue, read from the broker (Redis or
    RabbitMQ, through kombu's passive queue declare) within ``METRICS_BROKER_TIMEOUT_S``. The
    broker is the process's Celery app's (``celery.current_app``: the project's app, which Celery's
    Django fix-up makes the default in every thread)."""

    def collect(self):
        depth = GaugeMetricFamily("muse_queue_depth", "Messages waiting in a Celery queue.", labels=["queue"])
        up = GaugeMetricFamily("muse_broker_up", "1 when the broker answered this scrape.")
        try:
            with current_app.connection_for_read() as conn:
                conn.ensure_connection(max_retries=1, timeout=settings.METRICS_BROKER_TIMEOUT_S)
                channel = conn.default_channel
                for queue in Queue:
                    try:
                        _, count, _ = channel.queue_declare(queue=str(queue), passive=True)
                    except Exception:  # noqa: BLE001 - a queue not declared yet holds nothing
                        count = 0
                        channel = conn.channel()
                    depth.add_metric([str(queue)], count)
            up.add_metric([], 1)
        except Exception as exc:  # noqa: BLE001 - the scrape reports the broker down instead
            log.warning("queue depth unavailable: %s", type(exc).__name__)
            up.add_metric([], 0)
        yield depth
        yield up


def _registry() -> CollectorRegistry:
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        base = REGISTRY
    else:
        from prometheus_client import multiprocess

        base = CollectorRegistry()
        multiprocess.MultiProcessCollector(base)
    registry = CollectorRegistry()
    registry.register(_Merged(base))
    for path in settings.METRICS_COLLECTORS:
        registry.register(import_string(path)())
    return registry


class _Merged:
    """Exposes another registry's samples inside a fresh registry (scrape-time collectors are
    added per scrape and never to the global one)."""

    def __init__(self, base: CollectorRegistry) -> None:
        self.base = base

    def collect(self):
        return self.base.collect()


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics`` in Prometheus text format. With ``METRICS_TOKEN`` set it requires
    ``Authorization: Bearer <token>`` (401 otherwise)."""
    token = settings.METRICS_TOKEN
    if token:
        presented = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(presented.encode(), token.encode()):
            return HttpResponse("unauthorized\n", status=401, content_type="text/plain")
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)
