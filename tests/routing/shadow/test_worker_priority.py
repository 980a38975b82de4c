"""The Procfile's shadow worker, started as the Procfile says, runs every thread at Linux
SCHED_IDLE and nice 19: it gets only CPU the primaries' processes leave idle."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from muse_experiments.infra.prodshape import read_procfile
from tests.conftest import CREDENTIAL_ENV, REPO, database_url_for_subprocess, stop_process_group


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
@pytest.mark.django_db(transaction=True)
def test_the_procfile_shadow_worker_runs_at_sched_idle(tmp_path: Path, settings):
    command = read_procfile()["shadow"]
    env = {
        **os.environ,
        **CREDENTIAL_ENV,
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "DATABASE_URL": database_url_for_subprocess(),
        "MUSE_VAR_DIR": str(settings.VAR_DIR),
        "DJANGO_DEBUG": "true",
        "REDIS_URL": settings.REDIS_URL,
        "MUSE_PROCESS_NAME": f"shadow-priority-{os.getpid()}",
    }
    log_path = tmp_path / "shadow.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            ["sh", "-c", f"exec {command}"], env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while b"ready." not in log_path.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the shadow worker did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.1)
        tids = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task")]
        assert len(tids) > 4  # the main thread, the pool's 4 threads and Celery's own
        assert "celery" in Path(f"/proc/{proc.pid}/cmdline").read_text()  # nice and env exec'd into it
        assert {os.sched_getscheduler(t) for t in tids} == {os.SCHED_IDLE}
        assert {os.getpriority(os.PRIO_PROCESS, t) for t in tids} == {19}
    finally:
        stop_process_group(proc)
