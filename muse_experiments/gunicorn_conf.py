"""gunicorn settings for the production shape (``--config python:muse_experiments.gunicorn_conf``).

gunicorn's own error log uses the JSON formatter when ``LOG_FORMAT`` is ``json`` (the production
default), and a worker that exits is marked dead for prometheus-client's multiprocess mode.
Access lines come from Django (:mod:`muse_experiments.observability`), not gunicorn.
"""

import logging
import os

from gunicorn.glogging import Logger

_debug = os.environ.get("DJANGO_DEBUG", "").lower() in ("1", "true", "yes")
_format = os.environ.get("LOG_FORMAT", "plain" if _debug else "json")

graceful_timeout = int(os.environ.get("WEB_GRACEFUL_TIMEOUT_S", "30"))
timeout = int(os.environ.get("WEB_TIMEOUT_S", "330"))  # above the longest wait a request may hold
# Idle keep-alive connections stay open longer than SDK clients keep them (httpx: 5 s), so a client
# never sends on a connection the server has just closed (a reset the caller cannot tell from a
# lost request). Behind a load balancer, keep this above the balancer's idle timeout.
keepalive = int(os.environ.get("WEB_KEEPALIVE_S", "75"))
if _format == "json":
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "muse_experiments.logs.JsonFormatter"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
        "loggers": {
            "gunicorn.error": {"handlers": ["console"], "level": "INFO", "propagate": False},
            "gunicorn.access": {"handlers": ["console"], "level": "WARNING", "propagate": False},
        },
    }


class AccessLogger(Logger):
    """gunicorn's logger, minus the access line nobody reads: with a ``logconfig_dict`` gunicorn
    builds every request's access-log atoms (headers, environ) and hands them to
    ``gunicorn.access``, which the config above sets to WARNING — 2% of a web process's CPU per
    request (``bench/bench_stages.py --profile``). Django writes the access lines
    (:mod:`muse_experiments.observability`)."""

    def access(self, resp, req, environ, request_time):
        if self.access_log.isEnabledFor(logging.INFO):
            super().access(resp, req, environ, request_time)


logger_class = AccessLogger


def child_exit(server, worker):
    """Drop a dead worker's live-gauge samples (prometheus-client multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


# gunicorn 27's control socket (``gunicornc``) would sit at one fixed path in $HOME for every instance
# on the machine; nothing here uses it.
control_socket_disable = True
