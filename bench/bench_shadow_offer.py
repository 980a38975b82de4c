"""CPU of one shadow-call publish (made by the records drainer): the earliest path
(``backlog_take``, then ``apply_async`` through kombu) against the bounded direct push the offer
takes (:meth:`muse_experiments.infra.broker.DirectPublisher.push_bounded`: one Lua script), one
offer per script and a drained batch's offers in one script.

Runs in this process on ``DATABASE_URL`` + ``REDIS_URL`` (a Redis database of your own: the
script empties its ``shadow`` list and the shadow backlog counter). Thread CPU time per publish
(``time.thread_time``: what the worker's GIL-holding thread spends, not the wait for Redis),
``--rounds`` alternating rounds of ``--n`` publishes, a realistic message (a one-turn request and
the primary's summary).

    DATABASE_URL=postgres://…/muse_x REDIS_URL=redis://127.0.0.1:6379/9 \\
        .venv/bin/python bench/bench_shadow_offer.py [--n 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Offers per drained batch in the batched case (the drainer offers a batch's calls together).
BATCH = 20

KWARGS = {
    "test_key": "bench-control",
    "job_id": "5b0b4c1e-0000-4000-8000-000000000000",
    "session_id": "s-1",
    "user_id": "bench-user-1",
    "request": {"messages": [{"role": "user", "content": "Benchmark request 1: answer briefly."}], "tools": []},
    "primary": {"model": "avocado/abc", "latency_ms": 1.0, "cost_usd": "0.000010", "output_tokens": 12,
                "text": "x" * 80, "tool_calls": []},
}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not os.environ.get("REDIS_URL"):
        raise SystemExit("set REDIS_URL (a Redis database of your own) and DATABASE_URL")
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "muse_experiments.settings")
    os.environ.setdefault("SECRET_KEY", "bench-" + "x" * 50)
    import django

    django.setup()
    from django.conf import settings

    from muse_experiments.celery import app
    from muse_experiments.infra.broker import direct_publisher
    from muse_experiments.infra.queues import Queue
    from muse_experiments.infra.redis_client import redis_client
    from routing.messages import RUN_SHADOW
    from routing.shadow import sampling
    from routing.shadow.budget import BACKLOG_KEY, backlog_take

    app.loader.import_default_modules()
    settings.SHADOW_MAX_BACKLOG = 10**9
    publisher = direct_publisher(app)
    if publisher is None or publisher.client is not redis_client():
        raise SystemExit("the broker is not this Redis: the offer would take the apply_async path")
    client = redis_client()

    def before() -> None:
        backlog_take(10**9)
        app.tasks[RUN_SHADOW.name].apply_async(kwargs=KWARGS, kwargsrepr="k", queue=Queue.SHADOW)

    def one() -> None:
        sampling._publish([KWARGS])

    def batch() -> None:  # a drained batch's offers: BATCH messages, one script
        sampling._publish([KWARGS] * BATCH)

    cpu: dict[str, list[float]] = {
        "apply_async (before)": [], "push_bounded, 1": [], f"push_bounded, {BATCH}": []
    }  # fmt: skip
    for _ in range(args.rounds):
        for name, fn, per in zip(cpu, (before, one, batch), (1, 1, BATCH), strict=True):
            for _ in range(50 // per):
                fn()
            started = time.thread_time()
            for _ in range(args.n // per):
                fn()
            cpu[name].append((time.thread_time() - started) / (args.n // per * per) * 1e6)
            client.delete(Queue.SHADOW, BACKLOG_KEY)
    for name, values in cpu.items():
        rounds = ", ".join(f"{v:.0f}" for v in values)
        print(f"{name:>22}: CPU µs per publish, median {statistics.median(values):.0f} (rounds: {rounds})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
