"""Slow clients against the production web server: the Procfile's ``web`` line (gunicorn with
``muse_experiments.infra.gunicorn_conf``) on loopback, 1 process x 2 threads, 1 s deadlines
(``WEB_*_TIMEOUT_S``), a 64 KiB request buffer, serving the small WSGI application below.

A client that sends its head or body slowly is answered 408 and closed, one that stops reading is
reset, one that never closes its end costs the event loop nothing — and meanwhile a probe on a new
connection is answered although there are more such clients than threads. Keep-alive, pipelining,
chunked bodies, ``Expect: 100-continue``, bodies past the buffer and a slow streamed response work
as before. Deadlines in the asserts are generous; nothing here times the server.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from muse_experiments.infra.prodshape import read_procfile

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
THREADS = 2
PATIENT_THREADS = 4
STREAM_BYTES = 32 * 1024 * 1024  # more than the socket buffers between the server and a client hold
BUFFER_BYTES = 65536


def application(environ, start_response):
    """``/stream``: ``STREAM_BYTES`` at once; ``/slow-stream``: three events 1.5 s apart (longer
    than the send timeout); anything else: ``"<method> <path> <body length> <sha256[:12]>"`` after
    reading the whole body."""
    path = environ["PATH_INFO"]
    if path == "/stream":
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return (b"x" * 65536 for _ in range(STREAM_BYTES // 65536))
    if path == "/slow-stream":

        def events():
            for i in range(3):
                time.sleep(1.5)
                yield b"data: %d\n\n" % i

        start_response("200 OK", [("Content-Type", "text/event-stream")])
        return events()
    body = environ["wsgi.input"].read()
    answer = f"{environ['REQUEST_METHOD']} {path} {len(body)} {hashlib.sha256(body).hexdigest()[:12]}"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(answer)))])
    return [answer.encode()]


def _digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:12]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``(host, port)`` of the Procfile's gunicorn serving :func:`application`."""
    with _gunicorn(tmp_path_factory, THREADS, send_timeout_s=1) as address:
        yield address


@pytest.fixture(scope="module")
def patient_server(tmp_path_factory):
    """As :func:`server`, with 4 threads and a send timeout longer than any test here, so only the
    cap on waiting sends (one of 4 threads) can free a thread sending to a client that stopped
    reading."""
    with _gunicorn(tmp_path_factory, PATIENT_THREADS, send_timeout_s=600) as address:
        yield address


@contextlib.contextmanager
def _gunicorn(tmp_path_factory, threads: int, send_timeout_s: float):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = read_procfile()["web"].replace(
        "muse_experiments.wsgi", "tests.test_slow_clients:application", 1
    )
    env = {
        **os.environ,
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "WEB_CONCURRENCY": "1",
        "WEB_THREADS": str(threads),
        "WEB_HEADER_TIMEOUT_S": "1",
        "WEB_BODY_TIMEOUT_S": "1",
        "WEB_BODY_MIN_RATE": "1000000",
        "WEB_SEND_TIMEOUT_S": str(send_timeout_s),
        "WEB_REQUEST_BUFFER_BYTES": str(BUFFER_BYTES),
        "LOG_FORMAT": "plain",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    log = tmp_path_factory.mktemp("slow-clients") / "web.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["sh", "-c", f"exec {command}"], env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while _probe(("127.0.0.1", port), timeout=2) != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"gunicorn did not start: {log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield "127.0.0.1", port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _probe(address, timeout: float = 10) -> int | None:
    """Status of ``GET /healthz`` on a new connection, ``None`` if none came within ``timeout`` s."""
    conn = http.client.HTTPConnection(*address, timeout=timeout)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


class Trickler(threading.Thread):
    """Sends ``head`` at once, then ``trickle`` one byte every 0.25 s, until the server answers or
    closes (:attr:`answer`: everything it sent, ``None`` if it never did within ``within_s``)."""

    def __init__(self, address, head: bytes, trickle: bytes, within_s: float = 20) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(address)
        self.head, self.trickle, self.within_s = head, trickle, within_s
        self.answer: bytes | None = None

    def run(self) -> None:
        with self.sock:
            if self.head:
                self.sock.sendall(self.head)
            end = time.monotonic() + self.within_s
            for byte in self.trickle:
                if time.monotonic() > end:
                    return
                with contextlib.suppress(OSError):
                    self.sock.send(bytes([byte]))
                if select.select([self.sock], [], [], 0.25)[0]:
                    self.answer = _read_to_close(self.sock)
                    return


def _read_to_close(sock: socket.socket, within_s: float = 10) -> bytes:
    """Everything the peer sends until it closes (a reset ends it too)."""
    sock.settimeout(within_s)
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


def _probe_while(address, clients: list[Trickler]) -> int | None:
    """Start ``clients`` (more than the server's threads), let them get going, probe, and wait
    for them to end."""
    for client in clients:
        client.start()
    time.sleep(0.5)
    status = _probe(address)
    for client in clients:
        client.join(30)
    return status


def test_a_head_sent_slowly_is_answered_408_and_closed_and_the_probe_is_answered(server):
    head = b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"a" * 200
    clients = [Trickler(server, b"", head) for _ in range(THREADS + 2)]
    assert _probe_while(server, clients) == 200
    for client in clients:
        assert client.answer is not None, "the server did not drop a client whose head never ended"
        assert client.answer.startswith(b"HTTP/1.1 408 "), client.answer[:100]


def test_a_body_sent_slowly_is_answered_408_and_closed_and_the_probe_is_answered(server):
    head = b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 200\r\n\r\n"
    clients = [Trickler(server, head, b"b" * 200) for _ in range(THREADS + 2)]
    assert _probe_while(server, clients) == 200
    for client in clients:
        assert client.answer is not None, "the server did not drop a client whose body never ended"
        assert client.answer.startswith(b"HTTP/1.1 408 "), client.answer[:100]


def test_a_body_past_the_buffer_sent_slowly_is_closed_by_its_thread(server):
    """The first ``BUFFER_BYTES`` arrive at once, so a thread takes the request and reads the rest
    itself: under the same deadline, after which the connection is closed (the application may
    already have answered, so no 408) and the thread comes back."""
    head = b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % (BUFFER_BYTES + 200)
    clients = [Trickler(server, head + b"b" * BUFFER_BYTES, b"b" * 200) for _ in range(THREADS + 2)]
    assert _probe_while(server, clients) == 200
    for client in clients:
        assert client.answer == b"", "the server did not close a client whose body never ended"


def test_a_client_that_stops_reading_is_reset_and_its_thread_answers_the_probe(server):
    readers = []
    for _ in range(THREADS):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.connect(server)
        s.sendall(b"GET /stream HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        readers.append(s)
    try:
        time.sleep(0.5)  # every thread is sending to a client that does not read
        assert _probe(server, timeout=20) == 200
        for s in readers:
            received = _read_to_close(s, within_s=30)
            assert 0 < len(received) < STREAM_BYTES  # cut off
    finally:
        for s in readers:
            s.close()


def test_more_clients_that_stop_reading_than_threads_never_hold_every_thread(patient_server):
    """With the send timeout out of reach, one thread (a quarter of 4) waits on a client that
    stopped reading; the other such clients are reset at once and the probe is answered."""
    readers = []
    for _ in range(PATIENT_THREADS + 2):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.connect(patient_server)
        s.sendall(b"GET /stream HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        readers.append(s)
    try:
        time.sleep(0.5)  # each reader's request has reached a thread, or waits for one
        assert _probe(patient_server, timeout=20) == 200
        cut_off = 0
        for s in readers:
            cut_off += len(_read_to_close(s, within_s=10)) < STREAM_BYTES
        assert cut_off >= PATIENT_THREADS + 1  # every reader but the one holding the slot
    finally:
        for s in readers:
            s.close()


def test_clients_that_never_close_their_end_do_not_stall_the_server(server):
    """gthread lingered on each closing connection for up to 2 s in its event loop: 40 kept-alive
    clients sending a last request at once and never closing their end held up every other
    connection (a pooled client's next request here) for up to 80 s."""
    pooled, *holders = (http.client.HTTPConnection(*server, timeout=10) for _ in range(41))
    try:
        for conn in (pooled, *holders):
            conn.request("GET", "/healthz")
            assert conn.getresponse().read() == b"GET /healthz 0 " + _digest(b"").encode()
        for conn in holders:
            conn.sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        time.sleep(0.5)
        pooled.request("GET", "/healthz")
        assert pooled.getresponse().status == 200
    finally:
        for conn in (pooled, *holders):
            conn.close()


def _read_response(f) -> tuple[int, dict[str, str], bytes]:
    """``(status, headers, body)`` of the next response on the buffered reader ``f`` (bodies of
    declared length or chunked; 1xx responses are returned as they come)."""
    status = int(f.readline().split()[1])
    headers = {}
    while (line := f.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if status < 200:
        return status, headers, b""
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while size := int(f.readline().split(b";")[0], 16):
            body += f.read(size)
            f.readline()
        f.readline()
        return status, headers, body
    return status, headers, f.read(int(headers.get("content-length", "0")))


def test_keep_alive_pipelining_chunked_bodies_and_expect_continue_still_work(server):
    big = os.urandom(3 * BUFFER_BYTES)  # past the buffer: its thread reads the rest
    with socket.create_connection(server, timeout=20) as s, s.makefile("rb") as f:
        s.sendall(
            b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
            b"POST /chunked HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
            b"POST /length HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc"
            b"POST /big HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(big) + big
        )
        assert _read_response(f)[::2] == (200, b"GET /healthz 0 " + _digest(b"").encode())
        assert _read_response(f)[::2] == (200, f"POST /chunked 11 {_digest(b'hello world')}".encode())
        assert _read_response(f)[::2] == (200, f"POST /length 3 {_digest(b'abc')}".encode())
        assert _read_response(f)[::2] == (200, f"POST /big {len(big)} {_digest(big)}".encode())

        # the same connection: a client that waits for 100 Continue before its body gets one
        s.sendall(b"POST /expect HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
        assert _read_response(f)[0] == 100
        s.sendall(b"body")
        status, _, body = _read_response(f)
        while status == 100:  # gunicorn sends its own too
            status, _, body = _read_response(f)
        assert (status, body) == (200, f"POST /expect 4 {_digest(b'body')}".encode())

        # a chunked body trickled in pieces within its deadline
        s.sendall(b"POST /pieces HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in (b"3\r\nab", b"c\r\n", b"0\r\n", b"\r\n"):
            time.sleep(0.1)
            s.sendall(piece)
        assert _read_response(f)[::2] == (200, f"POST /pieces 3 {_digest(b'abc')}".encode())


def test_a_stream_slower_than_the_send_timeout_is_delivered_whole(server):
    """The send timeout applies to a send the client does not take, not to an application that
    takes its time between chunks (a streamed completion)."""
    conn = http.client.HTTPConnection(*server, timeout=20)
    try:
        conn.request("GET", "/slow-stream")
        response = conn.getresponse()
        assert (response.status, response.read()) == (200, b"data: 0\n\ndata: 1\n\ndata: 2\n\n")
    finally:
        conn.close()
