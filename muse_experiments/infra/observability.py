"""One middleware for what every request needs in production: request id, latency metric, access log.

It binds the request id (:mod:`muse_experiments.infra.logs`), answers with ``X-Request-Id``, observes
``muse_http_request_duration_seconds`` by route pattern (:mod:`muse_experiments.infra.metrics`) and
writes one access log line (logger ``muse.access``, INFO: method, route, status, ms). It sits
first in ``MIDDLEWARE`` so the figures include every other middleware. The figure and the line
are written when the server closes the response, once its body is sent (as gunicorn writes its
own access log), not before: the caller's answer does not wait for them.
"""

from __future__ import annotations

import logging
import time

from .logs import new_request_id, request_id_var
from .metrics import observe_request

access_log = logging.getLogger("muse.access")


class ObservabilityMiddleware:
    """Request id, latency histogram and access log for every request (sync and streamed)."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        rid = new_request_id(request.headers.get("X-Request-Id"))
        token = request_id_var.set(rid)
        request.request_id = rid
        started = time.perf_counter()
        try:
            response = self.get_response(request)
            # streamed responses are timed to their headers (their body may run for minutes)
            seconds = time.perf_counter() - started
        finally:
            request_id_var.reset(token)
        response["X-Request-Id"] = rid
        match = getattr(request, "resolver_match", None)
        route = ("/" + match.route) if match is not None and match.route else "unmatched"
        closers = getattr(response, "_resource_closers", None)  # Django's, run by close()
        if closers is None:
            _observe(rid, request.method, route, response.status_code, seconds)
        else:
            closers.append(lambda: _observe(rid, request.method, route, response.status_code, seconds))
        return response


def _observe(rid: str, method: str, route: str, status: int, seconds: float) -> None:
    """The request's latency figure (s) and access log line (ms), under its request id."""
    observe_request(method=method, route=route, status=status, seconds=seconds)
    if access_log.isEnabledFor(logging.INFO):
        token = request_id_var.set(rid)
        try:
            access_log.info("%s %s %s %.1fms", method, route, status, seconds * 1000.0)
        finally:
            request_id_var.reset(token)
