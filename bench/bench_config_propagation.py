"""Benchmark configuration propagation: how long until another process routes with a change.

Run: ``REDIS_URL=redis://127.0.0.1:6379/1 .venv/bin/python bench/bench_config_propagation.py [--rounds 20]``

The parent process changes an experiment's coverage through ``experiment_update`` (which
bumps the configuration version: a Redis INCR after commit, or a database row without Redis); a
child process (this script with ``--probe``) polls ``selectors.assignment_snapshot()`` the way a
routing worker does and prints the wall-clock time at which it first sees each new coverage. The
figure is child-observed time minus parent commit time, per round: median / p95 / max in ms. The
bound is ``CONFIG_REFRESH_INTERVAL_S`` (0.5 s by default) plus one snapshot rebuild.

Without ``DATABASE_URL`` the script uses its own SQLite file under ``$MUSE_VAR_DIR`` (default
``var/bench``), migrated on first use. The probe mode is also used by
``tests/muse_experiments/experiments/test_propagation.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "muse_experiments.settings")
    os.environ.setdefault("DJANGO_DEBUG", "true")
    os.environ.setdefault("SIMULATED_UPSTREAMS", "127.0.0.1:9")  # the seed's address (never called)
    import django

    django.setup()


def probe(key: str, poll_s: float, timeout_s: float) -> int:
    """Child: print ``ready <coverage>``, then ``seen <coverage> <unix time>`` on every change
    of experiment ``key``'s coverage in the cached snapshot; exit on EOF of stdin's parent or timeout."""
    setup_django()
    from muse_experiments.experiments.selectors import assignment_snapshot

    def coverage() -> float | None:
        spec = next((e for e in assignment_snapshot().experiments if e.key == key), None)
        return spec.coverage if spec else None

    last = coverage()
    print(f"ready {last}", flush=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = coverage()
        if now != last:
            print(f"seen {now} {time.time():.6f}", flush=True)
            last = now
        time.sleep(poll_s)
    return 0


def start_probe(key: str, env: dict[str, str], timeout_s: float = 120.0) -> subprocess.Popen:
    """Start a probe child (stdout piped, line-buffered) and wait for its ``ready`` line."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--probe", key, "--timeout", str(timeout_s)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = proc.stdout.readline()
    if not line.startswith("ready"):
        proc.kill()
        proc.wait()
        proc.stdout.close()
        raise RuntimeError(f"probe did not start: {line!r}")
    return proc


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--probe", metavar="KEY", help=argparse.SUPPRESS)
    parser.add_argument("--poll", type=float, default=0.002, help="probe poll interval (s)")
    parser.add_argument("--timeout", type=float, default=120.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        return probe(args.probe, args.poll, args.timeout)

    os.environ.setdefault("MUSE_VAR_DIR", str(REPO / "var" / "bench"))
    if not os.environ.get("DATABASE_URL"):
        os.environ["DATABASE_URL"] = f"sqlite:///{Path(os.environ['MUSE_VAR_DIR']) / 'propagation.sqlite3'}"
    setup_django()
    import secrets

    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from muse_experiments.experiments.models import Experiment
    from muse_experiments.experiments.services.edits import experiment_create, experiment_update
    from muse_experiments.experiments.services.lifecycle import experiment_start, experiment_stop
    from muse_experiments.experiments.services.variants import VariantInput
    from routing.catalogue import avocado_id, endpoint_seeds, provider_seeds
    from routing.models import ModelEndpoint
    from routing.ops_services import catalogue_seed

    if not ModelEndpoint.objects.exists():
        catalogue_seed(
            providers=provider_seeds("http://127.0.0.1:9"), endpoints=endpoint_seeds(), actor="bench"
        )
    endpoints = {e.public_id: e for e in ModelEndpoint.objects.all()}
    key = f"bench-propagation-{secrets.token_hex(3)}"
    experiment = experiment_create(
        key=key,
        name=key,
        actor="bench",
        variants=[
            VariantInput(key="control", weight=0.5, endpoint=endpoints[avocado_id(14)], is_control=True),
            VariantInput(key="treatment", weight=0.5, endpoint=endpoints[avocado_id(15)]),
        ],
    )
    experiment = experiment_start(experiment=experiment, actor="bench")
    env = {**os.environ, "DJANGO_DEBUG": "true"}
    proc = start_probe(key, env)
    delays = []
    try:
        for i in range(args.rounds):
            coverage = 0.5 if i % 2 == 0 else 0.9
            committed = time.time()
            experiment_update(experiment=experiment, actor="bench", coverage=coverage)
            line = proc.stdout.readline().split()
            if not line or line[0] != "seen" or float(line[1]) != coverage:
                raise RuntimeError(f"unexpected probe output {line!r}")
            delays.append((float(line[2]) - committed) * 1000)
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        experiment_stop(experiment=Experiment.objects.get(key=key), actor="bench")
    delays.sort()
    backend = "Redis version key" if settings.REDIS_URL else "database version row"
    print(f"config propagation to a second process via the {backend} ({args.rounds} changes,")
    print(
        f"CONFIG_REFRESH_INTERVAL_S={settings.CONFIG_REFRESH_INTERVAL_S}, database {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}):"
    )
    print(
        f"  median {statistics.median(delays):.0f} ms   p95 {delays[int(0.95 * (len(delays) - 1))]:.0f} ms"
        f"   max {delays[-1]:.0f} ms   min {delays[0]:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
