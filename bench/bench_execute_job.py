"""The worker's share of a routed completion, in process: ``routing.pipeline.router.execute_job`` alone.

Starts the instant upstream, prepares the platform exactly as ``bench/bench_proxy.py`` does (a
fresh PostgreSQL database on ``BENCH_DATABASE_URL``, Redis on ``BENCH_REDIS_URL`` flushed, the
catalogue at the upstream, a running 50/50 Avocado v14/v15 experiment), then runs
``execute_job`` in this process on deferred jobs (the row in hand, as a drop-in call's task
message carries it) — no web process, no broker, no Celery — and prints the wall time per call
(p50, mean) and this process's CPU per call. Each job is a new unit; ``--anonymous`` marks the
jobs anonymous (no session or user named: :func:`routing.pipeline.planning.is_anonymous`), ``--profile``
prints the top of a cProfile of a second pass. ``--drain BATCH`` then times the records drainer's
database write (:func:`routing.pipeline.records.records_write`) of the calls the runs buffered in Redis, in
batches of ``BATCH``, each rolled back so that repeats write the same rows.

    BENCH_DATABASE_URL=postgres://…/muse_bench_job BENCH_REDIS_URL=redis://…/3 \\
        .venv/bin/python bench/bench_execute_job.py [--calls 2000] [--anonymous] [--profile] [--drain 15]

Same-machine figures only: compare runs taken back to back (``--anonymous`` against without).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import time
import uuid

from bench_proxy import PORTS, bench_dir, free_port, platform_env, prepare_platform, start_upstream
from benchlib import Processes, recreate_database


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="measured calls (after 300 uncounted)")
    parser.add_argument("--anonymous", action="store_true", help="jobs whose caller named no session or user")
    parser.add_argument("--profile", action="store_true", help="cProfile a second pass")
    parser.add_argument(
        "--drain",
        type=int,
        metavar="BATCH",
        help="then time the records drainer's write of the buffered calls in batches of BATCH",
    )
    args = parser.parse_args()
    var = bench_dir("bench-execute-job", embedded=False)
    with Processes(var / "logs") as procs:
        upstream = start_upstream(procs)
        env = platform_env(var=var, embedded=False, port=free_port(PORTS))
        import redis

        recreate_database(env["DATABASE_URL"])
        redis.Redis.from_url(env["REDIS_URL"]).flushdb()
        prepare_platform(env, upstream=upstream)  # also sets up Django in this process

        from django.utils import timezone

        from routing.pipeline.router import execute_job

        request = {"messages": [{"role": "user", "content": "hi"}], "tools": [], "cancellable": True}
        if args.anonymous:
            request["anonymous"] = True

        def run(n: int) -> list[float]:
            seconds = []
            for _ in range(n):
                unit = f"bench-unit-{uuid.uuid4().hex}"
                row = {
                    "api_key_id": None, "session_id": unit, "user_id": unit, "subagent": "",
                    "attributes": "{}", "request": json.dumps(request),
                    "created_at": timezone.now().isoformat(),
                }  # fmt: skip
                started = time.perf_counter()
                status = execute_job(job_id=str(uuid.uuid4()), row=row)
                seconds.append(time.perf_counter() - started)
                if status != "succeeded":
                    raise SystemExit(f"a job ended {status!r}")
            return seconds

        run(300)
        cpu = time.process_time()
        seconds = run(args.calls)
        cpu = time.process_time() - cpu
        print(
            f"execute_job ({'anonymous' if args.anonymous else 'named'} units, {args.calls} calls): "
            f"p50 {statistics.median(seconds) * 1e3:.3f} ms, mean {statistics.mean(seconds) * 1e3:.3f} ms, "
            f"CPU {cpu / args.calls * 1e3:.3f} ms per call"
        )
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            run(args.calls)
            profile.disable()
            pstats.Stats(profile).sort_stats("cumulative").print_stats(40)
        if args.drain:
            drain_records(args.drain, profile=args.profile)
        redis.Redis.from_url(env["REDIS_URL"]).delete("muse:records")
    return 0


def drain_records(batch: int, *, profile: bool) -> None:
    """The records drainer's CPU per call: the calls the runs buffered in Redis, written by
    :func:`routing.pipeline.records.records_write` in batches of ``batch`` (the drainer's 1-client batch is
    ~15 at the default 200 ms linger), each batch in a transaction rolled back so that every
    repeat writes the same rows; prints the best of 3 repeats (this process's CPU)."""
    from django.db import transaction

    from routing.pipeline.records import records_write
    from routing.worker import drainer

    entries = drainer.redis_client().xrange(drainer.STREAM)
    payloads = [json.loads(fields[b"p"]) for _, fields in entries]
    batches = [payloads[i : i + batch] for i in range(0, len(payloads), batch)]
    profiler = cProfile.Profile() if profile else None
    best = float("inf")
    for _ in range(3):
        if profiler:
            profiler.enable()
        cpu = time.process_time()
        for chunk in batches:
            with transaction.atomic():
                if records_write(chunk) != len(chunk):
                    raise SystemExit("a batch wrote fewer calls than it holds")
                transaction.set_rollback(True)
        best = min(best, time.process_time() - cpu)
        if profiler:
            profiler.disable()
    print(
        f"records_write ({len(payloads)} calls, batches of {batch}, rolled back): CPU {best / len(payloads) * 1e3:.3f} ms per call (best of 3)"
    )
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    raise SystemExit(main())
