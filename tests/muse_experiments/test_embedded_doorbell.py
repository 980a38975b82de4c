"""The embedded broker's doorbells (muse_experiments.embedded): a publish rings the workers, a
stored result rings the web processes with its key, and a bell whose process is gone is removed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

from celery import Celery

from muse_experiments.embedded import (
    AtomicFilesystemBackend,
    Doorbell,
    bells_folder,
    doorbell,
    result_ring,
    wait_for_ring,
)


def short_dir() -> str:
    """A folder with a short path (a Unix socket path must stay under 108 bytes)."""
    return tempfile.mkdtemp(prefix="bells-", dir="/tmp")


def result_backend(*, expires_s: int | None = None) -> tuple[AtomicFilesystemBackend, str]:
    """An embedded result store in a fresh short folder, and that folder."""
    results = short_dir() + "/results"
    os.makedirs(results)
    app = Celery(set_as_current=False)
    if expires_s is not None:
        app.conf.result_expires = expires_s
    url = f"muse_experiments.embedded:AtomicFilesystemBackend://{results}"
    return AtomicFilesystemBackend(app=app, url=url), results


def test_a_ring_reaches_every_bell_of_its_kind_only():
    folder = short_dir()
    listener, ringer = Doorbell(folder), Doorbell(folder)
    worker_bell = listener.listen("worker")
    web_bell = listener.listen("web")
    assert worker_bell is not None and web_bell is not None
    assert listener.listen("worker") is worker_bell  # one bell per kind and process

    ringer.ring("worker", b"hello")
    assert wait_for_ring(worker_bell, 5) == [b"hello"]
    assert wait_for_ring(web_bell, 0) == []  # the web bell was not rung


def test_a_bell_of_a_dead_process_is_removed_when_rung():
    folder = short_dir()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(dead.stdout)
    path = os.path.join(folder, f"worker-{pid}.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.close()  # the socket file stays; nobody listens (its process exited)
    Doorbell(folder).ring("worker")
    assert not os.path.exists(path)


def test_storing_a_result_wakes_the_thread_waiting_for_that_task_only():
    backend, results = result_backend()
    assert bells_folder(results) == os.path.join(os.path.dirname(results), "bells")

    woken: dict[str, bool] = {}
    ready = threading.Barrier(3)

    def wait(task_id: str) -> None:
        with result_ring(backend, task_id) as rung:
            assert rung is not None
            ready.wait(5)
            woken[task_id] = rung.wait(5 if task_id == "job-a" else 0.5)

    threads = [threading.Thread(target=wait, args=(t,)) for t in ("job-a", "job-b")]
    for t in threads:
        t.start()
    ready.wait(5)
    backend.store_result("job-a", "succeeded", "SUCCESS")
    for t in threads:
        t.join(10)
    assert woken == {"job-a": True, "job-b": False}
    assert backend.get_task_meta("job-a")["result"] == "succeeded"
    assert doorbell(bells_folder(results)).listen("web") is not None


def test_results_older_than_result_expires_are_swept_and_fresh_ones_kept():
    """The embedded default runs no beat (Celery's backend_cleanup), so the backend sweeps."""
    backend, results = result_backend(expires_s=3600)
    for task_id in ("old-1", "old-2", "fresh"):
        backend.store_result(task_id, "ok", "SUCCESS")
    staging = os.path.join(os.path.dirname(results), ".staging-left-by-a-killed-writer")
    open(staging, "wb").close()
    two_hours_ago = time.time() - 7200
    for path in (
        backend._filename(backend.get_key_for_task("old-1")),
        backend._filename(backend.get_key_for_task("old-2")),
        staging,
    ):
        os.utime(path, (two_hours_ago, two_hours_ago))

    assert backend.sweep() == 3
    assert sorted(os.listdir(results)) == [os.fsdecode(backend.get_key_for_task("fresh"))]
    assert not os.path.exists(staging)
    assert backend.get_task_meta("fresh")["result"] == "ok"
    assert backend.sweep() == 0  # nothing left to sweep; a second sweep is harmless


def test_storing_a_result_sweeps_once_the_interval_has_passed():
    backend, results = result_backend(expires_s=60)
    backend.store_result("stale", "ok", "SUCCESS")
    stale = backend._filename(backend.get_key_for_task("stale"))
    os.utime(stale, (time.time() - 120, time.time() - 120))

    backend.store_result("next", "ok", "SUCCESS")  # within the interval: no sweep yet
    assert os.path.exists(stale)
    backend._next_sweep = 0.0  # the interval has passed
    backend.store_result("last", "ok", "SUCCESS")
    assert not os.path.exists(stale)
    assert len(os.listdir(results)) == 2
