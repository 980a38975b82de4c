"""HTTP edges on the production server (gunicorn, gthread): an oversize body answers 413 and the
kept-alive connection stays usable for the client's next pooled request; an unsupported content
type is a 415."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from muse_experiments.auth import api_key_create
from tests.conftest import REPO, database_url_for_subprocess

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def gunicorn_url(settings):
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": database_url_for_subprocess(), "DJANGO_DEBUG": "true"}
    env["REDIS_URL"] = settings.REDIS_URL or ""
    env["MAX_REQUEST_BYTES"] = str(1024 * 1024)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "muse_experiments.wsgi",
            "-b",
            f"127.0.0.1:{port}",
            "-k",
            "gthread",
            "--workers",
            "1",
            "--threads",
            "4",
        ],  # fmt: skip
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.3)
        else:
            pytest.fail("gunicorn did not start")
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_an_oversize_body_is_a_413_and_the_pooled_connection_keeps_working(gunicorn_url):
    _, raw = api_key_create(name="edge", scopes=["events"])
    big = b'{"events": [' + b'{"event_id":"x","name":"a","session_id":"s","value":1},' * 60_000 + b"{}]}"
    assert len(big) > 3_000_000
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    with httpx.Client(
        base_url=gunicorn_url, limits=limits, timeout=120, headers={"Authorization": f"Bearer {raw}"}
    ) as c:
        first = c.post("/api/v1/events", content=big, headers={"content-type": "application/json"})
        assert first.status_code == 413 and first.json()["error"]["code"] == "request_too_large"

        # the next pooled requests on the same connection are answered
        for i in range(3):
            ok = c.post(
                "/api/v1/events", json={"event_id": f"e{i}", "name": "rating", "session_id": "s", "value": 4}
            )
            assert ok.status_code == 201, ok.text
        unsupported = c.post("/api/v1/events", content=b"event_id=e", headers={"content-type": "text/plain"})
        assert unsupported.status_code == 415
