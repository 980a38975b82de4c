"""The event loop's view of a request in :mod:`muse_experiments.infra.gunicorn_worker`: when a request
is complete enough for a thread, and by when it must be. (The worker on a real gunicorn:
``tests/test_slow_clients.py``.)"""

from __future__ import annotations

import pytest

from muse_experiments.infra.gunicorn_worker import ClientLimits, PendingRequest, request_framing

LIMITS = ClientLimits(
    header_timeout_s=10, body_timeout_s=20, body_min_rate=1000, buffer_bytes=4096, send_timeout_s=30
)


def fed(data: bytes, *, step: int = 1, limits: ClientLimits = LIMITS) -> list[bool]:
    """``complete`` after each ``step`` bytes of ``data`` fed to a new request."""
    request = PendingRequest(limits, idle_until=75.0)
    seen = []
    for i in range(0, len(data), step):
        request.feed(data[i : i + step], now=0.0)
        seen.append(request.complete)
    return seen


@pytest.mark.parametrize(
    ("head", "framing"),
    [
        (b"GET / HTTP/1.1\r\nHost: a", (None, False, False)),
        (b"\r\nPOST / HTTP/1.1\r\nContent-Length:  12 ", (12, False, False)),
        (b"POST / HTTP/1.1\r\ntransfer-encoding: gzip, Chunked", (None, True, False)),
        (b"POST / HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 3", (3, False, True)),
        (b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3", (3, False, False)),
    ],
)
def test_it_reads_the_framing_of_a_request_head(head, framing):
    assert request_framing(head) == framing


@pytest.mark.parametrize(
    "head",
    [
        b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3",
        b"POST / HTTP/1.1\r\nContent-Length: -3",
        b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
    ],
)
def test_it_refuses_framing_that_gunicorn_refuses(head):
    with pytest.raises(ValueError):
        request_framing(head)


def test_a_request_without_a_body_is_complete_at_the_end_of_its_head_sent_a_byte_at_a_time():
    head = b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n"
    assert fed(head) == [False] * (len(head) - 1) + [True]


def test_a_body_of_declared_length_is_complete_at_its_last_byte():
    request = b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
    assert fed(request) == [False] * (len(request) - 1) + [True]
    assert fed(request, step=len(request)) == [True]


def test_a_chunked_body_is_complete_at_the_end_of_its_trailer_section():
    body = b"5\r\nhello\r\n6;name=value\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
    request = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + body
    assert fed(request) == [False] * (len(request) - 1) + [True]
    no_trailers = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    assert fed(no_trailers) == [False] * (len(no_trailers) - 1) + [True]
    assert fed(no_trailers + b"GET / HTTP/1.1\r\n\r\n", step=10_000) == [True]  # a pipelined next one


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # not a chunk size
        b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",  # the parser's 400
    ],
)
def test_framing_the_parser_refuses_goes_to_a_thread_at_once(request_bytes):
    assert fed(request_bytes, step=len(request_bytes)) == [True]


def test_a_request_larger_than_the_buffer_goes_to_a_thread_when_the_buffer_is_full():
    head = b"POST / HTTP/1.1\r\nContent-Length: 100000\r\n\r\n"
    assert fed(head + b"x" * 5000, step=1024) == [False, False, False, True, True]
    endless_head = b"GET / HTTP/1.1\r\nX: " + b"a" * 5000
    assert fed(endless_head, step=1024)[3:] == [True, True]


def test_the_deadline_is_idle_then_the_head_then_the_body_extended_by_its_bytes():
    request = PendingRequest(LIMITS, idle_until=75.0)
    assert request.deadline == 75.0
    request.feed(b"POST / HTTP/1.1\r\n", now=100.0)
    assert request.deadline == 110.0  # header_timeout_s after the first byte
    request.feed(b"Content-Length: 5000\r\n", now=105.0)
    assert request.deadline == 110.0
    request.feed(b"\r\n" + b"x" * 500, now=106.0)
    assert request.deadline == 106.0 + 20 + 0.5  # body_timeout_s, and 500 bytes at 1000 bytes/s
    request.feed(b"x" * 1000, now=107.0)
    assert request.deadline == 127.5  # and 1000 more
    assert not request.complete


def test_client_limits_must_be_positive():
    with pytest.raises(ValueError, match="send_timeout_s must be positive"):
        ClientLimits(header_timeout_s=1, body_timeout_s=1, body_min_rate=1, buffer_bytes=1, send_timeout_s=0)
