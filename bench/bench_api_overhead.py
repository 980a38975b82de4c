"""Platform overhead of ``POST /api/v1/completions`` against an upstream that answers instantly.

Starts its own simulated upstream (subprocess), gunicorn (gthread) and a Celery worker (threads)
on Redis and a fresh PostgreSQL database, then measures in one run:

* **direct SDK**: ``openai`` SDK → simulated upstream (``chat.completions.create``), end-to-end ms;
* **platform**: HTTP ``POST /api/v1/completions`` (synchronous) → gunicorn → Redis → worker →
  the same upstream → back, end-to-end ms; **added latency** per request is the end-to-end time
  minus the upstream call's own wall time as the worker measured it (``result.latency_ms``);
* **throughput**: completed completions per second at each concurrency.

At concurrency 1 and 32 (client threads), p50 and p99. Everything shares this machine's cores,
so the figures include the load generator's own CPU use.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/muse_bench REDIS_URL=redis://127.0.0.1:6379/3 \\
        .venv/bin/python bench/bench_api_overhead.py [--requests 400] [--concurrency 1 32]

``DATABASE_URL`` names the server and the database to (re)create; it is dropped and created anew.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
from benchlib import free_port, pct, recreate_database, wait_http

REPO = Path(__file__).resolve().parent.parent
KEYS = {
    "native": "sk-bench-native",
    "azure": "bench-azure",
    "anthropic": "sk-ant-bench",
    "openai": "sk-bench-openai",
}
CREDENTIALS = {
    "AVOCADO_API_KEY": KEYS["native"],
    "AZURE_OPENAI_API_KEY": KEYS["azure"],
    "ANTHROPIC_API_KEY": KEYS["anthropic"],
}


def run_load(fn, n: int, concurrency: int) -> tuple[list, float]:
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(fn, range(n)))
    return results, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="requests per concurrency level")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--gunicorn-workers", type=int, default=2)
    parser.add_argument("--worker-concurrency", type=int, default=32)
    args = parser.parse_args()
    db_url, redis_url = os.environ.get("DATABASE_URL"), os.environ.get("REDIS_URL")
    if not (db_url and db_url.startswith("postgres") and redis_url):
        raise SystemExit("set DATABASE_URL (PostgreSQL, recreated) and REDIS_URL")
    recreate_database(db_url)
    var = Path(tempfile.mkdtemp(prefix="muse-bench-"))
    env = {
        **os.environ, **CREDENTIALS, "DATABASE_URL": db_url, "REDIS_URL": redis_url, "MUSE_VAR_DIR": str(var),
        "SECRET_KEY": "bench-only-secret", "ALLOWED_HOSTS": "127.0.0.1,localhost", "LOG_LEVEL": "WARNING",
    }  # fmt: skip
    py = sys.executable
    procs: list[subprocess.Popen] = []

    def spawn(cmd: list[str], name: str) -> subprocess.Popen:
        log = open(var / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            cmd, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        procs.append(proc)
        return proc

    try:
        up_port, web_port = free_port(), free_port()
        scenarios = var / "scenarios.json"
        scenarios.write_text(json.dumps({"avocado-v15": {"latency_ms": 0, "tool_calls": "never"}}))
        spawn(
            [py, "-m", "routing.simulated", "--port", str(up_port), "--keys-json", json.dumps(KEYS),
             "--scenarios", str(scenarios)], "upstream",
        )  # fmt: skip
        upstream = f"http://127.0.0.1:{up_port}"
        env["SIMULATED_UPSTREAMS"] = f"127.0.0.1:{up_port}"  # the keys may go there (web, worker, seed)
        wait_http(f"{upstream}/_fake/health")
        manage = [py, "manage.py"]
        subprocess.run([*manage, "migrate", "-v", "0"], env=env, cwd=REPO, check=True)
        subprocess.run(
            [*manage, "seed_catalogue", "--simulated-base-url", upstream],
            env=env,
            cwd=REPO,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        key = subprocess.run(
            [*manage, "create_api_key", "--name", "bench", "--scopes", "completions", "--rate-limit", "100000000"],
            env=env, cwd=REPO, check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        subprocess.run(
            [py, "-c", "import redis,os; r=redis.Redis.from_url(os.environ['REDIS_URL']); r.delete('completions','maintenance')"],
            env=env, check=True,
        )  # fmt: skip
        spawn(
            [py, "-m", "gunicorn", "muse_experiments.wsgi", "-k", "gthread", "--workers", str(args.gunicorn_workers),
             "--threads", "32", "-b", f"127.0.0.1:{web_port}", "--log-level", "warning"], "gunicorn",
        )  # fmt: skip
        spawn(
            [py, "-m", "celery", "-A", "muse_experiments", "worker", "-Q", "completions,maintenance", "--pool", "threads",
             "--concurrency", str(args.worker_concurrency), "-l", "warning", "--without-gossip", "--without-mingle",
             "--without-heartbeat", "-n", f"bench-{os.getpid()}@%h"], "worker",
        )  # fmt: skip
        web = f"http://127.0.0.1:{web_port}"
        wait_http(f"{web}/healthz")

        sdk = openai.OpenAI(base_url=f"{upstream}/v1", api_key=KEYS["native"], max_retries=0)
        http = httpx.Client(base_url=web, headers={"Authorization": f"Bearer {key}"}, timeout=60,
                            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64))  # fmt: skip

        def direct(i: int) -> float:
            t = time.perf_counter()
            sdk.chat.completions.create(
                model="avocado-v15", messages=[{"role": "user", "content": f"bench {i}"}]
            )
            return (time.perf_counter() - t) * 1000

        def platform(i: int) -> tuple[float, float]:
            t = time.perf_counter()
            r = http.post(
                "/api/v1/completions",
                json={
                    "session_id": f"s-{i}",
                    "user_id": f"u-{i % 97}",
                    "messages": [{"role": "user", "content": f"bench {i}"}],
                },
            )
            total = (time.perf_counter() - t) * 1000
            body = r.json()
            if r.status_code != 200 or body["status"] != "succeeded":
                raise RuntimeError(f"{r.status_code}: {r.text[:300]}")
            return total, body["result"]["latency_ms"]

        run_load(direct, 50, 8)  # warm-up: connection pools, caches, worker threads
        run_load(platform, 100, 16)
        print(f"machine: {os.cpu_count()} cores; gunicorn {args.gunicorn_workers}x32 threads; "
              f"celery threads x{args.worker_concurrency}; {args.requests} requests per level")  # fmt: skip
        print(f"{'concurrency':>11} {'what':<28} {'p50 ms':>8} {'p99 ms':>8} {'per s':>8}")
        for c in args.concurrency:
            d, d_wall = run_load(direct, args.requests, c)
            p, p_wall = run_load(platform, args.requests, c)
            totals = [t for t, _ in p]
            added = [t - u for t, u in p]
            upstream_ms = [u for _, u in p]
            rows = [
                ("direct SDK -> upstream", d, len(d) / d_wall),
                ("platform end-to-end", totals, len(p) / p_wall),
                ("  upstream call (in worker)", upstream_ms, None),
                ("  platform added latency", added, None),
            ]
            for name, values, rate in rows:
                rate_s = f"{rate:8.1f}" if rate else f"{'':>8}"
                print(f"{c:>11} {name:<28} {statistics.median(values):8.2f} {pct(values, 99):8.2f} {rate_s}")
        http.close()
        sdk.close()
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
