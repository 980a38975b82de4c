"""The WSGI application gunicorn serves: every path through ``MIDDLEWARE``; the drop-in ``/v1/``
paths take API keys only."""

from __future__ import annotations

import io
import json

import pytest
from django.core.signals import request_started
from django.db import close_old_connections

from muse_experiments.wsgi import application

pytestmark = pytest.mark.django_db


def call(
    path: str, method: str = "GET", body: bytes = b"", app=application, **headers: str
) -> tuple[int, dict, bytes]:
    """``(status, headers, body)`` of one request through ``app`` (gunicorn's application)."""
    environ = {
        "REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "testserver",
        "SERVER_PORT": "80", "HTTP_HOST": "testserver", "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/json", **headers,
    }  # fmt: skip
    seen: dict = {}

    def start_response(status, response_headers, exc_info=None):
        seen["status"] = int(status.split()[0])
        seen["headers"] = {k.lower(): v for k, v in response_headers}

    # as Django's test client does: the test's transaction keeps its connection
    request_started.disconnect(close_old_connections)
    try:
        chunks = b"".join(app(environ, start_response))
    finally:
        request_started.connect(close_old_connections)
    return seen["status"], seen["headers"], chunks


def test_the_drop_ins_keep_our_middlewares_and_the_security_headers_and_touch_no_session():
    status, headers, body = call("/v1/chat/completions", "POST", b"{}")
    assert status == 401 and json.loads(body)["error"]["type"] == "authentication_error"
    assert headers["x-content-type-options"] == "nosniff"  # SecurityMiddleware
    assert headers["x-request-id"]  # ObservabilityMiddleware
    assert "vary" not in headers or "cookie" not in headers["vary"].lower()  # no session touched


def test_the_site_keeps_every_middleware():
    status, headers, _ = call("/api/v1/experiments")
    assert status in (401, 403)
    assert headers["x-frame-options"] == "DENY"
    assert headers["x-content-type-options"] == "nosniff" and headers["x-request-id"]


def test_a_staff_session_does_not_authenticate_on_the_drop_ins(admin_client):
    cookie = f"sessionid={admin_client.cookies['sessionid'].value}"
    status, _, _ = call("/v1/chat/completions", "POST", b"{}", HTTP_COOKIE=cookie)
    assert status == 401
    status, _, _ = call("/api/v1/experiments", HTTP_COOKIE=cookie)
    assert status == 200  # the same session on the site's API


def test_a_foreign_host_header_is_refused_on_the_drop_ins_as_on_the_site():
    for path in ("/v1/chat/completions", "/api/v1/experiments"):
        status, _, _ = call(path, "POST", b"{}", HTTP_HOST="evil.example")
        assert status == 400, path
    assert call("/v1/chat/completions", "POST", b"{}")[0] == 401  # the test server's own host
