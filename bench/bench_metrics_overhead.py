"""What the production instrumentation costs on the hot path, next to a direct SDK call (one run).

Times, per call, in this process with Django set up:

* the observability middleware (request id, latency histogram, one JSON access line written to
  a null stream) against the same request through a pass-through middleware;
* ``routing.metrics.observe_outcome`` for a call with a retry and a fallback (the worker's cost);

each with prometheus-client in multiprocess mode (memory-mapped files, as ``make run-prod`` runs)
and in-process mode; and the median of direct ``openai`` SDK calls to an instant upstream
(``bench/instant_upstream.py``) in the same run, so every cost is also a fraction of one call.

    .venv/bin/python bench/bench_metrics_overhead.py [--calls 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def per_call_us(fn, calls: int, rounds: int = 5) -> float:
    """Median over ``rounds`` of the mean µs per call of ``fn``."""
    out = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(out)


def direct_sdk_p50_ms(calls: int) -> float:
    import openai
    from instant_upstream import serve

    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(serve(0))
    port = server.sockets[0].getsockname()[1]
    threading.Thread(target=loop.run_forever, daemon=True).start()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
    samples = []
    for _ in range(calls):
        t = time.perf_counter()
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        samples.append((time.perf_counter() - t) * 1000)
    loop.call_soon_threadsafe(loop.stop)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--mode", choices=["multiprocess", "single"], default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode is None:  # run each mode in its own process (prometheus-client picks it at import)
        import subprocess

        direct = direct_sdk_p50_ms(500)
        print(f"direct openai SDK call to an instant upstream: p50 {direct * 1000:.0f} µs")
        for mode in ("multiprocess", "single"):
            env = dict(os.environ)
            env.pop("PROMETHEUS_MULTIPROC_DIR", None)
            with tempfile.TemporaryDirectory() as tmp:
                if mode == "multiprocess":
                    env["PROMETHEUS_MULTIPROC_DIR"] = tmp
                out = subprocess.run(
                    [sys.executable, __file__, "--calls", str(args.calls), "--mode", mode],
                    env=env, capture_output=True, text=True, check=True,
                )  # fmt: skip
            for line in out.stdout.splitlines():
                name, us = line.split("=")
                us = float(us)
                print(
                    f"  {mode:12} {name:44} {us:7.1f} µs  ({us / (direct * 1000) * 100:.2f}% of a direct call)"
                )
        return 0

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "muse_experiments.settings")
    os.environ.setdefault("DJANGO_DEBUG", "true")
    os.environ["LOG_FORMAT"] = "json"
    import django

    django.setup()
    from django.http import HttpResponse
    from django.test import RequestFactory

    from muse_experiments.infra.logs import JsonFormatter
    from muse_experiments.infra.observability import ObservabilityMiddleware
    from routing.metrics import observe_outcome
    from routing.pipeline.serving import AttemptLog, ServeOutcome

    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(JsonFormatter())
    access = logging.getLogger("muse.access")
    access.handlers, access.propagate, access.level = [handler], False, logging.INFO

    request = RequestFactory().post("/v1/chat/completions", HTTP_X_REQUEST_ID="bench-1")

    class Match:
        route = "v1/chat/completions"

    request.resolver_match = Match()
    ok = HttpResponse("{}")

    def view(req):
        return ok

    def bare(req):
        return view(req)

    observed = ObservabilityMiddleware(view)

    def reset_stream():
        handler.stream.seek(0)
        handler.stream.truncate()

    mw = per_call_us(lambda: observed(request), args.calls) - per_call_us(lambda: bare(request), args.calls)
    reset_stream()

    class Endpoint:
        public_id = "avocado/control"

    outcome = ServeOutcome(
        result=object(),
        served=Endpoint(),
        reason="error_fallback",
        attempts=[AttemptLog("azure/x", "UpstreamUnavailable", 1.0), AttemptLog("azure/x", "UpstreamUnavailable", 1.0),
                  AttemptLog("avocado/control", "ok", 1.0)],
    )  # fmt: skip
    obs = per_call_us(
        lambda: observe_outcome(experiment="exp", variant="treatment", assigned="azure/x", outcome=outcome),
        args.calls,
    )
    print(f"middleware (request id, histogram, JSON access line)={mw:.2f}")
    print(f"observe_outcome (call + 3 attempts, 2 retries, fallback)={obs:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
