"""Client CPU per Redis call with redis-py's pure-Python reply parser and with hiredis (C).

Run: ``BENCH_REDIS_URL=redis://127.0.0.1:6379/12 .venv/bin/python bench/bench_redis_client.py [--loops 5000]``

Each loop is what a routed call does most often: one pipeline of three commands (the rate limit:
INCR, EXPIRE, GET), one HGETALL of a 10-field hash (a sticky lookup) and one GET of 200 bytes.
Prints CPU microseconds per loop (``time.process_time``, this process only) per parser and
protocol, alternating, and the hiredis / pure-Python ratio. Writes keys ``muse:bench:*`` only.
"""

from __future__ import annotations

import argparse
import os
import time

import redis
from redis._parsers import _HiredisParser, _RESP2Parser, _RESP3Parser


def cpu_us_per_loop(url: str, parser, protocol: int, loops: int) -> float:
    """CPU µs of one loop (pipeline of 3 + HGETALL + GET) with ``parser`` over RESP``protocol``."""
    client = redis.Redis.from_url(url, parser_class=parser, protocol=protocol)
    client.set("muse:bench:s", "v" * 200)
    client.hset("muse:bench:h", mapping={f"f{i}": "x" * 20 for i in range(10)})
    started = time.process_time()
    for _ in range(loops):
        pipe = client.pipeline(transaction=False)
        pipe.incr("muse:bench:c")
        pipe.expire("muse:bench:c", 100)
        pipe.get("muse:bench:s")
        pipe.execute()
        client.hgetall("muse:bench:h")
        client.get("muse:bench:s")
    spent = (time.process_time() - started) / loops * 1e6
    client.delete("muse:bench:s", "muse:bench:h", "muse:bench:c")
    client.close()
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=5000)
    args = parser.parse_args()
    url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
    for protocol, python_parser in ((2, _RESP2Parser), (3, _RESP3Parser)):
        py, hi = [], []
        for _ in range(2):  # alternate, to spread drift over both
            py.append(cpu_us_per_loop(url, python_parser, protocol, args.loops))
            hi.append(cpu_us_per_loop(url, _HiredisParser, protocol, args.loops))
        p, h = min(py), min(hi)
        print(f"RESP{protocol}: pure Python {p:6.0f} µs, hiredis {h:6.0f} µs per loop ({h / p:.2f}×)")


if __name__ == "__main__":
    main()
