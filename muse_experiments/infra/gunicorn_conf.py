"""gunicorn settings for the production shape (``--config python:muse_experiments.infra.gunicorn_conf``).

gunicorn's own error log uses the JSON formatter when ``LOG_FORMAT`` is ``json`` (the production
default), and a worker that exits is marked dead for prometheus-client's multiprocess mode.
Access lines come from Django (:mod:`muse_experiments.infra.observability`), not gunicorn.
"""

import os

from .gunicorn_worker import ClientLimits

_debug = os.environ.get("DJANGO_DEBUG", "").lower() in ("1", "true", "yes")
_format = os.environ.get("LOG_FORMAT", "plain" if _debug else "json")

graceful_timeout = int(os.environ.get("WEB_GRACEFUL_TIMEOUT_S", "30"))
timeout = int(os.environ.get("WEB_TIMEOUT_S", "330"))  # above the longest wait a request may hold
# Idle keep-alive connections stay open longer than SDK clients keep them (httpx: 5 s), so a client
# never sends on a connection the server has just closed (a reset the caller cannot tell from a
# lost request). Behind a load balancer, keep this above the balancer's idle timeout.
keepalive = int(os.environ.get("WEB_KEEPALIVE_S", "75"))
# Slow clients: gthread with each request received by the event loop before a thread takes it,
# read deadlines and a send timeout (muse_experiments.infra.gunicorn_worker), so a client that sends
# slowly or never closes costs a socket, not a thread, and one that stops reading holds its thread
# for WEB_SEND_TIMEOUT_S at most (bench/bench_slow_clients.py).
worker_class = "muse_experiments.infra.gunicorn_worker.BufferingThreadWorker"
client_limits = ClientLimits(
    # the request line and headers must arrive within this many seconds of their first byte (408)
    header_timeout_s=float(os.environ.get("WEB_HEADER_TIMEOUT_S", "10")),
    # the body within this many seconds of the end of the head ...
    body_timeout_s=float(os.environ.get("WEB_BODY_TIMEOUT_S", "20")),
    # ... plus 1 s per this many bytes received (bytes/s: a 2 MiB body may take up to 532 s)
    body_min_rate=float(os.environ.get("WEB_BODY_MIN_RATE", "4096")),
    # requests up to this size (head and body) reach a thread whole; a thread reads the rest of a
    # larger one under the same deadline. Each connection may hold this much memory meanwhile.
    buffer_bytes=int(os.environ.get("WEB_REQUEST_BUFFER_BYTES", str(1024 * 1024))),
    # a client that takes no byte of its response for this long is reset (after half of it at the
    # earliest: the kernel's per-send timeout is half of it)
    send_timeout_s=float(os.environ.get("WEB_SEND_TIMEOUT_S", "30")),
    # at most this share of a process's threads wait on clients not taking their response; past it
    # such a client is reset at once, so clients that stop reading never hold every thread
    stalled_sends_share=float(os.environ.get("WEB_STALLED_SENDS_SHARE", "0.25")),
)


def post_fork(server, worker):
    """Give the worker its client limits (gunicorn hands workers only its own settings)."""
    worker.limits = client_limits


if _format == "json":
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "muse_experiments.infra.logs.JsonFormatter"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
        "loggers": {
            "gunicorn.error": {"handlers": ["console"], "level": "INFO", "propagate": False},
            # gunicorn builds its access lines and drops them here: Django writes them
            "gunicorn.access": {"handlers": ["console"], "level": "WARNING", "propagate": False},
        },
    }


def child_exit(server, worker):
    """Drop a dead worker's live-gauge samples (prometheus-client multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


# gunicorn 27's control socket (``gunicornc``) would sit at one fixed path in $HOME for every instance
# on the machine; nothing here uses it.
control_socket_disable = True
