"""What kombu's Redis transport costs a worker per delivered task, on real Redis.

Run: ``BENCH_REDIS_URL=redis://127.0.0.1:6379/12 .venv/bin/python bench/bench_broker_record.py [--tasks 2000] [--rounds 3]``

Prints, load-independent, how many ``redis.Redis`` clients kombu builds per delivered task's
unacknowledged record and acknowledgement (``QoS.append`` + ``ack``) and per kombu publish, and the
CPU of building one (``Channel._create_client``); then the client CPU (``time.process_time``) and
wall time of the record and acknowledgement (two ``MULTI`` round trips), which
``muse_experiments/infra/broker.py``'s ``QoS`` spares a completion task that ends within its delay.
Uses kombu's own transport and the keys ``muse-bench-broker*`` only.
"""

from __future__ import annotations

import argparse
import os
import time

import redis
from kombu import Connection
from kombu.transport import redis as kombu_redis

QUEUE = "muse-bench-broker"
OPTIONS = {"unacked_key": "muse-bench-broker-unacked", "unacked_index_key": "muse-bench-broker-index"}


class _Delivered:
    """The part of a kombu message ``QoS.append`` and ``ack`` read."""

    def __init__(self, raw: dict, tag: str) -> None:
        self._raw = raw
        self.delivery_tag = tag
        self.delivery_info = raw["properties"]["delivery_info"]

    def serializable(self) -> dict:
        return self._raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    url = os.environ.get("BENCH_REDIS_URL") or os.environ["REDIS_URL"]

    built = [0]
    init = redis.Redis.__init__

    def counting(self, *a, **k):
        built[0] += 1
        init(self, *a, **k)

    with Connection(url, transport_options=OPTIONS) as conn:
        channel = conn.channel()
        assert type(channel) is kombu_redis.Channel
        raw = channel.prepare_message(
            "x" * 800, priority=0, content_type="application/json", content_encoding="utf-8",
            headers={"task": "routing.run_completion"}, properties={},
        )  # fmt: skip
        raw["properties"]["delivery_info"] = {"exchange": "", "routing_key": QUEUE}
        redis.Redis.__init__ = counting
        try:
            for i in range(100):
                channel.qos.append(_Delivered(raw, f"c{i}"), f"c{i}")
                channel.qos.ack(f"c{i}")
            per_task = built[0] / 100
            built[0] = 0
            for _ in range(100):
                channel._put(QUEUE, raw)
            per_publish = built[0] / 100
        finally:
            redis.Redis.__init__ = init
        started = time.process_time()
        for _ in range(20000):
            kombu_redis.Channel._create_client(channel)
        build_ms = (time.process_time() - started) / 20000 * 1000
        print(f"redis.Redis built: {per_task:.1f} per task (record + ack), {per_publish:.1f} per kombu publish; "
              f"{build_ms:.4f} ms CPU each")  # fmt: skip
        for r in range(args.rounds):
            cpu, wall = time.process_time(), time.perf_counter()
            for i in range(args.tasks):
                tag = f"t{r}-{i}"
                channel.qos.append(_Delivered(raw, tag), tag)
                channel.qos.ack(tag)
            cpu_ms = (time.process_time() - cpu) / args.tasks * 1000
            wall_ms = (time.perf_counter() - wall) / args.tasks * 1000
            print(f"round {r}: record + ack {cpu_ms:.3f} ms CPU, {wall_ms:.3f} ms wall per task")
        channel.client.delete(QUEUE, *OPTIONS.values())


if __name__ == "__main__":
    main()
