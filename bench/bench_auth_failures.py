"""Time of a failed API-key authentication, by kind: can a caller tell a known prefix from an unknown one?

Starts gunicorn (the Procfile's settings, one process) on a fresh PostgreSQL database and Redis,
creates one key, then sends over one keep-alive connection, interleaved in rounds of one request
of each kind, in a shuffled order each round, so drift and the after-effects of one request on the
next hit every kind alike:

* **valid key** (the authenticated path: 404 for a job that does not exist, 400 for a body without
  a model): the reference;
* **known prefix, wrong secret** (401);
* **unknown prefix** (401): before issue 30 it cost a database query;
* **refused address** (429): an address past ``AUTH_FAILURE_LIMIT`` failures.

Each request but the refused ones comes from an address of its own (``X-Forwarded-For``, with
``TRUSTED_PROXIES=127.0.0.1``), so no address is refused by the bench itself and every failure is
counted as a first one. Prints p50/p99 wall time (ms, client side, loopback) per kind and path,
and the unknown-minus-known difference of the medians.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/muse_bench_auth REDIS_URL=redis://127.0.0.1:6379/3 \\
        .venv/bin/python bench/bench_auth_failures.py [--requests 1000] [--repo PATH]

``DATABASE_URL`` names the server and the database to (re)create; it is dropped and created anew.
``--repo`` serves another checkout's code with this virtualenv (e.g. ``git archive main`` unpacked
in a temporary folder, for a before/after comparison); settings it does not know are ignored.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from benchlib import REPO, Processes, free_port, pct, recreate_database, wait_http

KINDS = ("valid key", "known prefix, wrong secret", "unknown prefix", "refused address")
CHAT = {"messages": []}  # invalid (no model): a valid key gets a 400, and nothing is dispatched


def variants(raw: str) -> dict[str, str]:
    """The key each kind sends: ``raw``, its secret changed, its prefix changed."""
    _, prefix, secret = raw.split("_", 2)
    return {
        "valid key": raw,
        "known prefix, wrong secret": f"muse_{prefix}_{'A' if secret[0] != 'A' else 'B'}{secret[1:]}",
        "unknown prefix": f"muse_{'f' if prefix[0] != 'f' else 'e'}{prefix[1:]}_{secret}",
        "refused address": f"muse_{prefix}_{'A' if secret[0] != 'A' else 'B'}{secret[1:]}",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000, help="requests per kind and path")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout whose code is served")
    args = parser.parse_args()
    db_url, redis_url = os.environ.get("DATABASE_URL"), os.environ.get("REDIS_URL")
    if not (db_url and db_url.startswith("postgres") and redis_url):
        raise SystemExit("set DATABASE_URL (PostgreSQL, recreated) and REDIS_URL")
    repo = args.repo.resolve()
    recreate_database(db_url)
    var = Path(tempfile.mkdtemp(prefix="muse-bench-auth-"))
    env = {
        **os.environ, "DATABASE_URL": db_url, "REDIS_URL": redis_url, "MUSE_VAR_DIR": str(var),
        "SECRET_KEY": "bench-only-secret", "ALLOWED_HOSTS": "127.0.0.1,localhost", "LOG_LEVEL": "ERROR",
        "TRUSTED_PROXIES": "127.0.0.1",
    }  # fmt: skip
    env.pop("DJANGO_DEBUG", None)
    py = sys.executable
    served = subprocess.run(
        [py, "-c", "import muse_experiments; print(muse_experiments.__file__)"],
        env=env, cwd=repo, check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    subprocess.run([py, "manage.py", "migrate", "-v", "0"], env=env, cwd=repo, check=True)
    raw = subprocess.run(
        [py, "manage.py", "create_api_key", "--name", "bench", "--scopes", "completions",
         "--rate-limit", "100000000"],
        env=env, cwd=repo, check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    keys = variants(raw)
    with Processes(var) as procs:
        port = free_port()
        gunicorn = procs.spawn(
            [py, "-m", "gunicorn", "muse_experiments.wsgi", "-k", "gthread", "--workers", "1",
             "--threads", "4", "-b", f"127.0.0.1:{port}", "--config", "python:muse_experiments.infra.gunicorn_conf"],
            "gunicorn", env=env, cwd=repo,
        )  # fmt: skip
        wait_http(f"http://127.0.0.1:{port}/healthz", procs=[gunicorn])
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
        paths = {
            "/api/v1/completions/<id>": lambda h: http.get(f"/api/v1/completions/{uuid.uuid4()}", headers=h),
            "/v1/chat/completions": lambda h: http.post("/v1/chat/completions", json=CHAT, headers=h),
        }
        shuffle = random.Random(30).shuffle
        refused = "198.18.255.254"
        addresses = (f"198.18.{i // 250}.{i % 250 + 1}" for i in range(10**6))

        def send(path: str, kind: str) -> tuple[float, int]:
            address = refused if kind == "refused address" else next(addresses)
            headers = {"Authorization": f"Bearer {keys[kind]}", "X-Forwarded-For": address}
            started = time.perf_counter()
            response = paths[path](headers)
            return (time.perf_counter() - started) * 1000, response.status_code

        for path in paths:  # warm-up; 21 failures refuse the refused address (with the default limit)
            for _ in range(25):
                for kind in KINDS:
                    send(path, kind)
        print(f"serving {served}; {args.requests} requests per kind and path, shuffled rounds, 1 client")
        print(f"{'path':<26} {'kind':<28} {'status':>7} {'p50 ms':>8} {'p99 ms':>8}")
        for path in paths:
            times: dict[str, list[float]] = {kind: [] for kind in KINDS}
            statuses: dict[str, set[int]] = {kind: set() for kind in KINDS}
            order = list(KINDS)
            for _ in range(args.requests):
                shuffle(order)
                for kind in order:
                    ms, status = send(path, kind)
                    times[kind].append(ms)
                    statuses[kind].add(status)
            for kind in KINDS:
                status = ",".join(str(s) for s in sorted(statuses[kind]))
                print(
                    f"{path:<26} {kind:<28} {status:>7} {statistics.median(times[kind]):8.3f} "
                    f"{pct(times[kind], 99):8.3f}"
                )
            gap = statistics.median(times["unknown prefix"]) - statistics.median(
                times["known prefix, wrong secret"]
            )
            print(f"{path:<26} {'unknown - known (p50)':<28} {'':>7} {gap:+8.3f}")
        http.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
