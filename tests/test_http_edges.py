"""HTTP edges on the production server (gunicorn with its production config and worker): an
oversize body answers 413 and the kept-alive connection stays usable for the client's next pooled
request; an unsupported content type is a 415."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from muse_experiments.api.auth import api_key_create
from tests.conftest import REPO, database_url_for_subprocess

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gunicorn_url(django_db_setup):
    """One gunicorn for the module's tests, on the test database. Each test makes its own API key,
    which the server learns when its configuration version moves (muse_experiments.api.auth): checked
    on every request here (``CONFIG_REFRESH_INTERVAL_S=0``), so a key works from its commit on."""
    from django.conf import settings

    port = _free_port()
    env = {**os.environ, "DATABASE_URL": database_url_for_subprocess(), "DJANGO_DEBUG": "true"}
    env["CONFIG_REFRESH_INTERVAL_S"] = "0"
    env["REDIS_URL"] = settings.REDIS_URL
    env["MAX_REQUEST_BYTES"] = str(1024 * 1024)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "muse_experiments.wsgi",
            "-b",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
            "--threads",
            "4",
            "--config",
            "python:muse_experiments.infra.gunicorn_conf",
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


def _chunked(data: bytes, size: int = 4096):
    """An iterator body: httpx sends it with ``Transfer-Encoding: chunked`` and no Content-Length."""
    for i in range(0, len(data), size):
        yield data[i : i + size]


def test_a_chunked_body_is_parsed_bounded_and_its_refusals_keep_the_connection(gunicorn_url):
    _, raw = api_key_create(name="chunked", scopes=["events", "completions"])
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    json_ct = {"content-type": "application/json"}
    with httpx.Client(
        base_url=gunicorn_url, limits=limits, timeout=120, headers={"Authorization": f"Bearer {raw}"}
    ) as c:
        event = b'{"event_id":"c1","name":"rating","session_id":"s","value":4}'
        sent = c.post("/api/v1/events", content=_chunked(event, 7), headers=json_ct)
        assert sent.request.headers["transfer-encoding"] == "chunked"
        assert "content-length" not in sent.request.headers
        assert sent.status_code == 201, sent.text

        # the drop-in reads the chunked body: its NUL is named (an empty body would be "'model' ...")
        chat = b'{"model":"muse-default","messages":[{"role":"user","content":"a\\u0000b"}]}'
        nul = c.post("/v1/chat/completions", content=_chunked(chat), headers=json_ct)
        assert nul.status_code == 400
        assert nul.json()["error"]["param"] == "messages[0].content", nul.text

        big = b'{"events": [' + b'{"event_id":"x","name":"a","session_id":"s","value":1},' * 60_000 + b"{}]}"
        assert len(big) > 3_000_000
        over = c.post("/api/v1/events", content=_chunked(big, 65536), headers=json_ct)
        assert over.status_code == 413 and over.json()["error"]["code"] == "request_too_large"
        over_dropin = c.post("/v1/chat/completions", content=_chunked(big, 65536), headers=json_ct)
        assert over_dropin.status_code == 413
        assert over_dropin.json()["error"]["message"] == "Request body too large.", over_dropin.text

        # the same pooled connection still answers
        again = c.post("/api/v1/events", content=_chunked(event.replace(b"c1", b"c2")), headers=json_ct)
        assert again.status_code == 201, again.text


def test_an_unknown_charset_is_refused_naming_it(gunicorn_url):
    _, raw = api_key_create(name="charset", scopes=["events", "completions"])
    foo = {"content-type": "application/json; charset=foo", "Authorization": f"Bearer {raw}"}
    event = b'{"event_id":"cs","name":"rating","session_id":"s","value":4}'
    native = httpx.post(gunicorn_url + "/api/v1/events", content=event, headers=foo, timeout=30)
    assert native.status_code == 415
    assert "charset 'foo'" in native.json()["error"]["message"], native.text
    chat = b'{"model":"muse-default","messages":[{"role":"user","content":"hi"}]}'
    dropin = httpx.post(gunicorn_url + "/v1/chat/completions", content=chat, headers=foo, timeout=30)
    assert dropin.status_code == 400 and "charset 'foo'" in dropin.json()["error"]["message"], dropin.text
    utf8 = {**foo, "content-type": "application/json; charset=utf-8"}
    ok = httpx.post(gunicorn_url + "/api/v1/events", content=event, headers=utf8, timeout=30)
    assert ok.status_code == 201, ok.text


def test_every_drop_in_refuses_a_nul_naming_the_field(gunicorn_url):
    _, raw = api_key_create(name="nul", scopes=["completions"])
    with httpx.Client(base_url=gunicorn_url, timeout=30, headers={"Authorization": f"Bearer {raw}"}) as c:
        chat = c.post("/v1/chat/completions", json={"model": "muse-default", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "a\u0000"}]}]})  # fmt: skip
        assert chat.status_code == 400 and chat.json()["error"]["param"] == "messages[0].content[0].text"
        responses = c.post("/v1/responses", json={"model": "muse-default", "input": [
            {"role": "user", "content": "a\u0000b"}]})  # fmt: skip
        assert responses.status_code == 400 and responses.json()["error"]["param"] == "input[0].content"
        messages = c.post(
            "/v1/messages",
            headers={"anthropic-version": "2023-06-01"},
            json={"model": "muse-default", "max_tokens": 10, "system": "s\u0000", "messages": [
                {"role": "user", "content": "hi"}]},
        )  # fmt: skip
        assert messages.status_code == 400, messages.text
        # the field is named once, as Anthropic does (not "system: 'system': …")
        assert messages.json()["error"]["message"] == "'system': NUL characters (\\u0000) are not allowed."


def test_drop_in_id_headers_are_utf8_and_bad_or_overlong_ones_are_a_400(gunicorn_url):
    _, raw = api_key_create(name="hdr", scopes=["completions"])
    body = {"model": "muse-default", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=gunicorn_url, timeout=30, headers={"Authorization": f"Bearer {raw}"}) as c:
        bad = c.post("/v1/chat/completions", json=body, headers={"X-Muse-Session-Id": b"s\xff\xfe"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "X-Muse-Session-Id", bad.text
        long_key = c.post("/v1/chat/completions", json=body, headers={"Idempotency-Key": "k" * 201})
        assert long_key.status_code == 400 and long_key.json()["error"]["param"] == "Idempotency-Key"
        long_subagent = c.post("/v1/chat/completions", json=body, headers={"X-Muse-Subagent": "a" * 201})
        assert (
            long_subagent.status_code == 400 and long_subagent.json()["error"]["param"] == "X-Muse-Subagent"
        )


def test_a_utf8_id_header_reads_as_the_client_wrote_it():
    """WSGI servers hand header bytes over as ISO-8859-1 (PEP 3333): UTF-8 ``café`` arrives as
    ``cafÃ©``; the drop-ins read it back as ``café``, the id the client's events will name."""
    from django.test import RequestFactory

    from routing.dropin.identity import header_text

    as_wsgi_gives_it = "café-42".encode().decode("latin-1")
    request = RequestFactory().post("/v1/chat/completions", HTTP_X_MUSE_SESSION_ID=as_wsgi_gives_it)
    assert header_text(request, "X-Muse-Session-Id") == "café-42"


def _raw_post(url: str, path: str, key: str, body: bytes) -> tuple[int, dict]:
    """``(status, JSON body)`` of a POST whose chunked framing is sent byte for byte as given."""
    host, port = url.removeprefix("http://").split(":")
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(head + body)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head_part, _, payload = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head_part.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (h.split(":", 1) for h in header_lines)}
    assert headers["content-type"] == "application/json", answer[:200]
    if headers.get("transfer-encoding") == "chunked":
        size, _, rest = payload.partition(b"\r\n")
        payload = rest[: int(size, 16)]
    return int(status_line.split()[1]), json.loads(payload)


@pytest.mark.parametrize(
    "framing",
    [b"zz\r\nab\r\n0\r\n\r\n", b"2\r\nabc\r\n0\r\n\r\n", b"2;\x01\r\nab\r\n0\r\n\r\n"],
    ids=["bad-size", "missing-terminator", "bad-extension"],
)
def test_a_malformed_chunked_body_is_a_400_in_the_apis_shape_not_a_500(gunicorn_url, framing):
    _, raw = api_key_create(name="bad-chunks", scopes=["events", "completions"])
    status, body = _raw_post(gunicorn_url, "/v1/chat/completions", raw, framing)
    assert status == 400 and body["error"]["type"] == "invalid_request_error", body
    assert "Malformed chunked request body" in body["error"]["message"]
    status, body = _raw_post(gunicorn_url, "/v1/messages", raw, framing)
    assert status == 400 and body["type"] == "error", body
    status, body = _raw_post(gunicorn_url, "/api/v1/events", raw, framing)
    assert status == 400 and "Malformed chunked request body" in json.dumps(body), body
