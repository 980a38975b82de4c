"""A configuration change made here is seen by a separate routing process (real subprocess, Redis)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

from muse_experiments.experiments.services.edits import experiment_update
from tests.conftest import database_url_for_subprocess
from tests.factories import make_experiment, seed_catalogue

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from bench_config_propagation import start_probe  # noqa: E402

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.mark.django_db(transaction=True)
def test_a_coverage_change_reaches_another_process(redis_url):
    seed_catalogue()
    experiment = make_experiment(key="propagate")
    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_subprocess(),
        "REDIS_URL": redis_url,
        "MUSE_VAR_DIR": str(settings.VAR_DIR),
        "DJANGO_DEBUG": "true",
    }
    proc = start_probe("propagate", env, timeout_s=60)
    try:
        committed = time.time()
        experiment_update(experiment=experiment, actor="pm", coverage=0.25)
        line = proc.stdout.readline().split()  # blocks until the probe sees it (or exits at its timeout)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert line[:2] == ["seen", "0.25"], line
    print(f"observed by the second process after {(float(line[2]) - committed) * 1000:.0f} ms")
