"""CPU and wall time per drop-in request through the WSGI application, in process.

Calls ``muse_experiments.wsgi.application`` (what gunicorn serves) directly, one thread, with a
valid API key and a body without a model, so each request runs the middlewares, the API-key
authentication, the rate limit (one Redis script), the view and the body's validation and ends
in a 400; nothing is dispatched. No HTTP server and no network client in the figures: CPU per
request (``time.process_time``) is what the web process spends; on a machine busy with other
work, compare the minimum over many short rounds (the least disturbed), not wall times. It also
prints the Python function calls per request (one round under ``cProfile``), which no load
disturbs.

    REDIS_URL=redis://127.0.0.1:6379/3 .venv/bin/python bench/bench_dropin_request.py \\
        [--requests 200] [--rounds 20] [--repo PATH]

The database is a fresh SQLite file in a temporary folder. ``--repo`` runs another checkout's
code with this virtualenv (e.g. ``git archive main`` unpacked in a temporary folder), for a
before/after comparison; run both alternately and compare medians.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import logging
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="requests per round")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout whose code runs")
    args = parser.parse_args()
    if not os.environ.get("REDIS_URL"):
        raise SystemExit("set REDIS_URL (a Redis DB of the bench's own)")
    var = Path(tempfile.mkdtemp(prefix="muse-bench-dropin-"))
    os.environ.update(
        DATABASE_URL=f"sqlite:///{var / 'db.sqlite3'}", MUSE_VAR_DIR=str(var), SECRET_KEY="bench-only",
        ALLOWED_HOSTS="testserver", LOG_LEVEL="ERROR", ACCESS_LOG="false",
        DJANGO_SETTINGS_MODULE="muse_experiments.settings",
    )  # fmt: skip
    os.environ.pop("DJANGO_DEBUG", None)
    sys.path.insert(0, str(args.repo.resolve()))
    os.chdir(args.repo)

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    logging.disable(logging.WARNING)  # django.request's "Bad Request" line per request: not the path measured
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    import muse_experiments
    from muse_experiments.api.auth import api_key_create
    from muse_experiments.wsgi import application

    # as a long-lived server thread: one database connection kept, not closed per request
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    _, raw = api_key_create(name="bench", scopes=["completions"], rate_limit_per_minute=2_000_000_000)
    body = b'{"messages": []}'
    statuses: set[str] = set()

    def start_response(status, headers, exc_info=None):
        statuses.add(status.split()[0])

    def one() -> None:
        environ = {
            "REQUEST_METHOD": "POST", "PATH_INFO": "/v1/chat/completions", "QUERY_STRING": "",
            "SERVER_NAME": "testserver", "SERVER_PORT": "80", "HTTP_HOST": "testserver",
            "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body)),
            "CONTENT_TYPE": "application/json", "HTTP_AUTHORIZATION": f"Bearer {raw}",
            "REMOTE_ADDR": "127.0.0.1",
        }  # fmt: skip
        response = application(environ, start_response)
        b"".join(response)
        response.close()

    for _ in range(300):  # warm-up: caches, the key cache, the Redis pool, the script's SHA
        one()
    cpu, wall = [], []
    for _ in range(args.rounds):
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(args.requests):
            one()
        cpu.append((time.process_time() - c0) * 1000 / args.requests)
        wall.append((time.perf_counter() - w0) * 1000 / args.requests)
    # Python function calls per request: a load-independent measure of the path's length
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(args.requests):
        one()
    profiler.disable()
    calls = pstats.Stats(profiler).total_calls / args.requests
    print(f"code: {Path(muse_experiments.__file__).parent.parent}; statuses {sorted(statuses)}")
    print(f"Python function calls per request: {calls:.0f}")
    print(f"{args.rounds} rounds x {args.requests} requests, POST /v1/chat/completions (400), one thread")
    for name, values in (("CPU ms/request", cpu), ("wall ms/request", wall)):
        print(
            f"{name + ':':<17} min {min(values):.4f}  median {statistics.median(values):.4f}"
            f"  ({args.rounds} rounds)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
