"""Structured logs carry the request id and job id; /metrics exposes request latency by route."""

from __future__ import annotations

import io
import json
import logging
import os
import sys

import pytest
from django.core.signals import request_finished
from django.db import close_old_connections
from django.test import Client
from prometheus_client import REGISTRY

from muse_experiments.celery import app as celery_app
from muse_experiments.infra.logs import JsonFormatter, new_request_id
from muse_experiments.wsgi import application  # imported once (its setup configures logging)

pytestmark = pytest.mark.django_db


def json_lines(caplog) -> list[dict]:
    formatter = JsonFormatter()
    return [json.loads(formatter.format(r)) for r in caplog.records]


def test_every_request_line_carries_the_callers_request_id_and_echoes_it(caplog):
    caplog.set_level(logging.INFO, logger="muse.access")
    response = Client().get("/healthz", HTTP_X_REQUEST_ID="req-abc.123")
    assert response["X-Request-Id"] == "req-abc.123"
    access = [line for line in json_lines(caplog) if line["logger"] == "muse.access"]
    assert len(access) == 1
    assert access[0]["request_id"] == "req-abc.123"
    assert access[0]["msg"].startswith("GET /healthz 200 ")
    assert access[0]["level"] == "INFO" and access[0]["ts"].endswith("Z")


def test_the_access_line_and_latency_figure_wait_until_the_body_is_sent(caplog):
    """As gunicorn runs the application: the body is iterated (sent), then the response closed."""
    caplog.set_level(logging.INFO, logger="muse.access")
    environ = {
        "REQUEST_METHOD": "POST", "PATH_INFO": "/v1/chat/completions", "QUERY_STRING": "",
        "SERVER_NAME": "testserver", "SERVER_PORT": "80", "HTTP_HOST": "testserver",
        "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(b"{}"), "CONTENT_LENGTH": "2",
        "CONTENT_TYPE": "application/json", "HTTP_X_REQUEST_ID": "req-close.1",
    }  # fmt: skip
    labels = {"method": "POST", "route": "/v1/chat/completions", "status": "401"}
    before = REGISTRY.get_sample_value("muse_http_request_duration_seconds_count", labels) or 0
    response = application(environ, lambda status, headers, exc_info=None: None)
    body = b"".join(response)
    assert json.loads(body)["error"]["type"] == "authentication_error"
    assert not [r for r in caplog.records if r.name == "muse.access"]
    assert (REGISTRY.get_sample_value("muse_http_request_duration_seconds_count", labels) or 0) == before
    request_finished.disconnect(close_old_connections)  # the test's transaction keeps its connection
    try:
        response.close()
    finally:
        request_finished.connect(close_old_connections)
    [line] = [line for line in json_lines(caplog) if line["logger"] == "muse.access"]
    assert line["request_id"] == "req-close.1" and line["msg"].startswith("POST /v1/chat/completions 401 ")
    assert REGISTRY.get_sample_value("muse_http_request_duration_seconds_count", labels) == before + 1


def test_a_503_answer_is_an_access_line_not_a_django_request_error(caplog, settings):
    """A 503 is an answer (here: the session store is unreachable), logged once by the access
    log; django.request would add an ERROR line per request (alert noise under a kill switch)."""
    from muse_experiments.api.auth import api_key_create

    settings.REASONING_STORE_URL = "redis://127.0.0.1:1/0"
    caplog.set_level(logging.INFO)
    _, key = api_key_create(name="t", scopes=["completions"])
    response = Client().post("/api/v1/sessions/s1/end", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 503
    assert [r.getMessage() for r in caplog.records if r.name == "django.request"] == []
    access = [r.getMessage() for r in caplog.records if r.name == "muse.access"]
    assert len(access) == 1 and access[0].startswith("POST /api/v1/sessions/<str:session_id>/end 503 ")


def test_gateway_statuses_are_not_django_request_errors_but_a_500_still_is(caplog):
    from django.http import HttpResponse
    from django.test import RequestFactory
    from django.utils.log import log_response

    for status in (502, 503, 504, 500):
        log_response("%s", "/x", response=HttpResponse(status=status), request=RequestFactory().get("/x"))
    errors = [(r.levelname, r.status_code) for r in caplog.records if r.name == "django.request"]
    assert errors == [("ERROR", 500)]


def test_a_json_line_has_exactly_its_fields_and_never_a_records_extras():
    logger = logging.getLogger("tests.fields")
    try:
        raise ValueError("boom")
    except ValueError:
        record = logger.makeRecord(
            "tests.fields", logging.ERROR, __file__, 1, "failed for %s", ("ünïcode",), sys.exc_info(),
            extra={"request": "Authorization: Bearer muse_secret", "status_code": 500},
        )  # fmt: skip
    line = json.loads(JsonFormatter().format(record))
    assert list(line) == ["ts", "level", "logger", "msg", "request_id", "job_id", "process", "pid", "exc"]
    assert (line["level"], line["logger"], line["msg"]) == ("ERROR", "tests.fields", "failed for ünïcode")
    assert line["pid"] == os.getpid() and line["exc"].endswith("ValueError: boom")
    assert "muse_secret" not in JsonFormatter().format(record)


def test_an_unsafe_request_id_is_replaced_not_logged():
    assert new_request_id("bad id\n{injected}") != "bad id\n{injected}"
    assert len(new_request_id(None)) == 32
    response = Client().get("/healthz", HTTP_X_REQUEST_ID="x" * 101)
    assert response["X-Request-Id"] != "x" * 101


def test_a_task_binds_its_id_as_job_id_and_the_publishing_request_id(caplog):
    seen = {}

    @celery_app.task(name="tests.log_something")
    def log_something():
        logging.getLogger("tests.job").warning("inside the task")
        return "ok"

    caplog.set_level(logging.INFO)
    result = log_something.apply(task_id="job-42", headers={"muse_request_id": "req-7"})
    assert result.get() == "ok"
    lines = [line for line in json_lines(caplog) if line["logger"] == "tests.job"]
    seen = lines[0]
    assert (seen["job_id"], seen["request_id"]) == ("job-42", "req-7")
    # after the task the ids are unbound again
    logging.getLogger("tests.job").warning("outside")
    assert json_lines(caplog)[-1]["job_id"] is None


def test_metrics_expose_request_latency_by_route_pattern_not_raw_path():
    client = Client()
    before = (
        REGISTRY.get_sample_value(
            "muse_http_request_duration_seconds_count",
            {"method": "GET", "route": "/healthz", "status": "200"},
        )
        or 0.0
    )
    client.get("/healthz")
    client.get("/api/v1/completions/00000000-0000-0000-0000-000000000000")  # 401, pattern label
    body = client.get("/metrics").content.decode()
    after = REGISTRY.get_sample_value(
        "muse_http_request_duration_seconds_count", {"method": "GET", "route": "/healthz", "status": "200"}
    )
    assert after == before + 1
    assert 'route="/api/v1/completions/<str:job_id>"' in body
    assert "00000000-0000" not in body
    assert "muse_queue_depth{" in body and "muse_broker_up" in body
    assert "muse_job_oldest_age_seconds" in body


def test_metrics_require_the_token_when_one_is_set(settings):
    settings.METRICS_TOKEN = "s3cret-token"
    client = Client()
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token").status_code == 200
