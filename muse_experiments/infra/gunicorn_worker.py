"""gunicorn's ``gthread`` worker, safe from slow clients (``worker_class`` in
:mod:`muse_experiments.infra.gunicorn_conf`).

What it buys: a client that sends its request slowly or never closes its end costs a socket and a
bounded buffer, not one of the process's threads; one that stops reading its response holds its
thread for ``send_timeout_s`` at most; none stalls the event loop. So the web tier keeps answering
without a buffering proxy in front (``bench/bench_slow_clients.py``; README "In front of it").

gthread hands a connection to a thread as soon as it has a byte to read; the thread reads the head
and body with a blocking ``recv`` (no deadline) and writes with a blocking ``sendall`` (no
timeout), and the event loop closes a connection by lingering on it for up to 2 s. 100 sockets
sending a byte every 2 s held all threads, a client that stopped reading held one for good, and
clients that never closed their end stalled the event loop. Here:

* the event loop reads each request itself (non-blocking) and gives it to a thread only once it is
  complete: its head, and its body when the body has a ``Content-Length`` or is chunked, up to
  ``buffer_bytes`` in all (:class:`PendingRequest`); what a thread still has to read past that
  (the rest of a larger body) is read under the same deadline (:class:`DeadlineUnreader`);
* the head must be complete within ``header_timeout_s`` of its first byte, and the body within
  ``body_timeout_s`` of the end of the head plus one second per ``body_min_rate`` bytes received
  (Apache's ``mod_reqtimeout`` rule, so a large upload at a fair rate is not cut off); a client that
  is late gets a 408 and is closed;
* a send of the response gives up when the client has taken no byte of it for ``send_timeout_s``
  (the kernel's ``SO_SNDTIMEO``, at half that per ``send()``, so the client is dropped after between
  half and all of ``send_timeout_s``; an application that takes its time between chunks, like a
  streamed completion, is not a blocked send): the connection is reset and its thread is free;
* at most ``stalled_sends_share`` of a process's threads wait on clients that are not taking their
  response at once (:meth:`ClientSocket.sendall`); past that, a send that would wait resets its
  client at once, so clients that stop reading, however many, never hold every thread;
* closing a connection lingers as gunicorn's does (FIN, then drain for up to 2 s, RFC 9112
  section 9.6), but in the event loop, without blocking it.

Kept from gthread: keep-alive and its timeout, pipelined requests, gunicorn's parsing (the C
parser) and its answers to malformed requests (this module's scan only decides when to hand the
bytes on), de-chunked bodies, ``Expect: 100-continue`` (the event loop answers it, so the body
comes; gunicorn then sends its own 100 too, which RFC 9110 section 15.2 lets a client receive).
Not supported, refused by :meth:`BufferingThreadWorker.check_config`: TLS, HTTP/2 and the uWSGI
protocol in gunicorn itself (terminate TLS in front).
"""

from __future__ import annotations

import contextlib
import errno
import math
import re
import selectors
import socket
import struct
import threading
import time
from dataclasses import dataclass, fields
from functools import partial

from gunicorn.errors import ConfigError
from gunicorn.http.unreader import SocketUnreader
from gunicorn.workers.gthread import TConn, ThreadWorker

#: A closing connection is drained for this long (s) and this many bytes at most (gunicorn's
#: ``util.close_graceful``).
LINGER_S = 2.0
LINGER_MAX_BYTES = 65536
#: Largest ``recv`` of the event loop.
RECV_BYTES = 65536
#: Longest chunk-size line the scan waits for (gunicorn's default ``limit_request_field_size``).
MAX_CHUNK_LINE = 8190

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
_HEX = re.compile(rb"[0-9A-Fa-f]+")


@dataclass(frozen=True)
class ClientLimits:
    """How long a client may take, and how much of a request the event loop holds.

    ``header_timeout_s`` (s): the request line and headers, from their first byte;
    ``body_timeout_s`` (s): the body, from the end of the head, plus 1 s per ``body_min_rate``
    bytes received (bytes/s); ``buffer_bytes``: a request (head and body) is received by the
    event loop up to this size; ``send_timeout_s`` (s): the longest a client may take no byte of
    its response (it may be dropped after half that); ``stalled_sends_share`` (0-1]: the share of a
    process's threads (at least one) that may wait at once on clients not taking their response.
    Raises ``ValueError`` for a value that is not positive, or a share above 1."""

    header_timeout_s: float
    body_timeout_s: float
    body_min_rate: float
    buffer_bytes: int
    send_timeout_s: float
    stalled_sends_share: float = 0.25

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not value > 0:
                raise ValueError(f"{f.name} must be positive, got {value!r}")
        if self.stalled_sends_share > 1:
            raise ValueError(f"stalled_sends_share must be at most 1, got {self.stalled_sends_share!r}")


def request_framing(head: bytes) -> tuple[int | None, bool, bool]:
    """``(Content-Length or None, chunked, expects 100-continue)`` of a raw HTTP/1 request head
    (without its final empty line). Raises ``ValueError`` when the framing is not simply one of
    the two (repeated or malformed ``Content-Length``, both, a ``Transfer-Encoding`` that does not
    end with ``chunked``): gunicorn's parser refuses those without reading a body."""
    if head.startswith(b"\r\n"):  # one empty line may come first (RFC 9112 section 2.2)
        head = head[2:]
    request_line, *lines = head.split(b"\r\n")
    length, chunked, expect = None, False, False
    for line in lines:
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == b"content-length":
            if length is not None or not value.isdigit():
                raise ValueError(f"Content-Length {value!r}")
            length = int(value)
        elif name == b"transfer-encoding":
            if chunked or not value.endswith(b"chunked"):
                raise ValueError(f"Transfer-Encoding {value!r}")
            chunked = True
        elif name == b"expect":
            expect = value == b"100-continue" and request_line.endswith(b" HTTP/1.1")
    if chunked and length is not None:
        raise ValueError("both Content-Length and Transfer-Encoding")
    return length, chunked, expect


class PendingRequest:
    """One request as the event loop receives it: its bytes so far, whether a thread should take
    it (:attr:`complete`), and by when it must be (:attr:`deadline`, ``time.monotonic()``).

    Complete means: the head, then the body its framing announces (``Content-Length`` bytes, or
    the chunks up to the last one and the trailer section), have arrived; or ``buffer_bytes`` are
    held; or the framing is one gunicorn's parser will refuse. Scans resume where they stopped, so
    a request sent a byte at a time costs the event loop linear, not quadratic, time.
    """

    def __init__(self, limits: ClientLimits, idle_until: float) -> None:
        self.limits = limits
        self.data = bytearray()
        #: Before the first byte: when an idle connection is closed (the keep-alive timeout).
        self.deadline = idle_until
        self.complete = False
        self.expects_continue = False
        self.continued = False  # the event loop has sent its 100 Continue
        self._stage = "head"  # head, body (of known length), chunks, trailers
        self._pos = 0  # where the scan resumes
        self._body_end = 0

    @property
    def in_head(self) -> bool:
        return self._stage == "head"

    def feed(self, data: bytes, now: float) -> None:
        """Take the next ``data`` received at ``now`` (a ``time.monotonic()`` value)."""
        limits = self.limits
        if not self.data:
            self.deadline = now + limits.header_timeout_s
        elif not self.in_head:
            self.deadline += len(data) / limits.body_min_rate
        self.data += data
        self._scan(now)
        if len(self.data) >= limits.buffer_bytes:
            self.complete = True

    def _scan(self, now: float) -> None:
        data = self.data
        if self.in_head:
            end = data.find(b"\r\n\r\n", max(0, self._pos - 3))
            if end < 0:
                self._pos = len(data)
                return
            self._pos = end + 4
            try:
                length, chunked, self.expects_continue = request_framing(bytes(data[:end]))
            except ValueError:
                self.complete = True
                return
            received = len(data) - self._pos
            self.deadline = now + self.limits.body_timeout_s + received / self.limits.body_min_rate
            self._stage = "chunks" if chunked else "body"
            self._body_end = self._pos + (length or 0)
        if self._stage == "body":
            self.complete = len(data) >= self._body_end
            return
        while self._stage == "chunks":
            eol = data.find(b"\r\n", self._pos)
            if eol < 0:
                self.complete = len(data) - self._pos > MAX_CHUNK_LINE
                return
            size = bytes(data[self._pos : eol]).split(b";", 1)[0].rstrip(b" \t")
            if not _HEX.fullmatch(size):
                self.complete = True
                return
            if int(size, 16) == 0:
                self._stage, self._pos = "trailers", eol  # the section ends at the first CRLF CRLF
                break
            next_line = eol + 2 + int(size, 16) + 2
            if next_line > len(data):
                return
            self._pos = next_line
        end = data.find(b"\r\n\r\n", self._pos)
        if end < 0:
            self._pos = max(self._pos, len(data) - 3)
            return
        self.complete = True


class SendTimeout(TimeoutError):
    """A send of the response made no progress for its timeout: the client stopped reading."""


class RequestTimeout(TimeoutError):
    """A thread reading the rest of a request passed the request's deadline."""


class ClientSocket(socket.socket):
    """A client connection whose ``sendall`` raises :class:`SendTimeout` when the socket's
    ``SO_SNDTIMEO`` passed without progress (the kernel then fails the ``send`` with ``EAGAIN``),
    or at once when it would wait while every one of :attr:`waiting_sends` is taken."""

    __slots__ = ()

    #: Sends that may wait on their client at once, in this process (set by the worker).
    waiting_sends = threading.BoundedSemaphore(1)

    def sendall(self, data, flags: int = 0) -> None:
        """Send all of ``data`` (bytes): what the socket's buffer takes now without a slot, the
        rest holding one of :attr:`waiting_sends`. Raises :class:`SendTimeout` when no slot is free
        or the client took nothing for the socket's send timeout."""
        view = memoryview(data)
        try:
            sent = self.send(view, flags | socket.MSG_DONTWAIT)
        except BlockingIOError:
            sent = 0
        if sent == len(view):
            return
        if not self.waiting_sends.acquire(blocking=False):
            raise SendTimeout(errno.ETIMEDOUT, "too many clients are not taking their response")
        try:
            super().sendall(view[sent:], flags)
        except BlockingIOError as exc:
            raise SendTimeout(errno.ETIMEDOUT, "the client read nothing") from exc
        finally:
            self.waiting_sends.release()

    def sendfile(self, file, offset: int = 0, count: int | None = None) -> int:
        """Send a file through :meth:`sendall`, so the send timeout holds: ``socket.sendfile``
        waits for a blocked ``os.sendfile()`` without one. Returns the bytes sent."""
        file.seek(offset)
        sent = 0
        while count is None or sent < count:
            block = file.read(RECV_BYTES if count is None else min(RECV_BYTES, count - sent))
            if not block:
                break
            self.sendall(block)
            sent += len(block)
        return sent


class DeadlineUnreader(SocketUnreader):
    """gunicorn's socket reader, holding each ``recv`` of a thread to the request's deadline
    (:attr:`deadline`, moved by :attr:`min_rate` as bytes come, as in :class:`PendingRequest`).
    Raises :class:`RequestTimeout`, which gunicorn's body drain takes as a reason to close."""

    deadline = math.inf
    min_rate = math.inf

    def chunk(self, size_hint=None):
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise RequestTimeout(errno.ETIMEDOUT, "request not received in time")
        prior = self.sock.gettimeout()
        self.sock.settimeout(remaining if prior is None else min(prior, remaining))
        try:
            data = super().chunk(size_hint)
        except TimeoutError as exc:
            raise RequestTimeout(errno.ETIMEDOUT, "request not received in time") from exc
        finally:
            self.sock.settimeout(prior)
        self.deadline += len(data) / self.min_rate
        return data


def _peer(conn) -> str:
    return conn.client[0] if conn.client else "-"  # a Unix socket's peer has no address


def _timeval(seconds: float) -> bytes:
    return struct.pack("ll", int(seconds), int(seconds % 1 * 1_000_000))


class BufferingThreadWorker(ThreadWorker):
    """gthread, with each request received by the event loop before a thread takes it, read
    deadlines, a send timeout and a lingering close that does not block (module docstring).
    :attr:`limits` is set by ``gunicorn_conf.post_fork``."""

    limits: ClientLimits | None = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.receiving: set[TConn] = set()  # connections whose request the event loop is reading
        self.lingering: dict[TConn, list] = {}  # closing connections: [deadline, bytes drained]

    @classmethod
    def check_config(cls, cfg, log) -> None:
        super().check_config(cfg, log)
        if cfg.is_ssl or cfg.http2_cleartext != "off" or cfg.protocol != "http":
            raise ConfigError(f"{cls.__name__} serves plain HTTP/1.1 only: terminate TLS in front")

    def init_process(self) -> None:
        if self.limits is None:
            raise ConfigError(
                f"{type(self).__name__}.limits is unset (muse_experiments.infra.gunicorn_conf sets it)"
            )
        slots = max(1, int(self.cfg.threads * self.limits.stalled_sends_share))
        ClientSocket.waiting_sends = threading.BoundedSemaphore(slots)
        super().init_process()

    # -- receiving requests in the event loop ---------------------------------------------------

    def accept(self, listener) -> None:
        """As gthread's, on a :class:`ClientSocket` with the send timeout, then :meth:`enqueue_req`."""
        try:
            sock, client = listener.accept()
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        sock = ClientSocket(fileno=sock.detach())
        # A send() that copied some bytes still waits out its whole SO_SNDTIMEO before returning, so
        # half the timeout per call bounds the time since the client last took a byte.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(self.limits.send_timeout_s / 2))
        conn = TConn(self.cfg, sock, client, listener.getsockname())
        conn.init()  # plain HTTP/1: makes the parser, reads nothing
        conn.parser.unreader = DeadlineUnreader(sock)
        self.enqueue_req(conn)

    def enqueue_req(self, conn) -> None:
        """Receive the connection's next request (gthread calls this when a kept-alive connection
        becomes readable or holds pipelined bytes): what has arrived is read at once; a thread
        takes the request once complete, and the event loop reads the rest until then."""
        conn.request = PendingRequest(self.limits, idle_until=time.monotonic() + self.cfg.keepalive)
        conn.sock.setblocking(False)
        if held := conn.parser.unreader.take_buffered():
            conn.request.feed(held, time.monotonic())
        if not conn.request.complete and not self._recv(conn):
            self._close_now(conn)
        elif conn.request.complete:
            self._submit(conn)
        else:
            self._continue_if_expected(conn)
            self.receiving.add(conn)
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._receive, conn))

    def _receive(self, conn, _fileobj=None) -> None:
        if not self._recv(conn):
            self._stop_receiving(conn)
            self._close_now(conn)
        elif conn.request.complete:
            self._stop_receiving(conn)
            self._submit(conn)
        else:
            self._continue_if_expected(conn)

    @staticmethod
    def _recv(conn) -> bool:
        """Feed the request what the socket holds (nothing when it is empty); ``False`` when the
        client has closed (or reset) the connection before its request was complete."""
        try:
            data = conn.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        if data:
            conn.request.feed(data, time.monotonic())
        return bool(data)

    def _continue_if_expected(self, conn) -> None:
        """Answer an ``Expect: 100-continue`` head, once: its client waits for that to send the body."""
        request = conn.request
        if request.expects_continue and not request.continued:
            request.continued = True
            self._send_quietly(conn, _CONTINUE)

    def _submit(self, conn) -> None:
        request, unreader = conn.request, conn.parser.unreader
        unreader.unread(bytes(request.data))
        unreader.deadline, unreader.min_rate = request.deadline, self.limits.body_min_rate
        conn.request = None
        super().enqueue_req(conn)

    def _stop_receiving(self, conn) -> None:
        self.receiving.discard(conn)
        self.poller.unregister(conn.sock)

    def murder_pending(self) -> None:
        """gthread's sweep (run every turn of the event loop), plus: a request not received by its
        deadline is answered 408 and closed (an idle new connection just closed), and a
        lingering close that has lingered long enough is finished."""
        super().murder_pending()
        now = time.monotonic()
        for conn in [c for c in self.receiving if c.request.deadline <= now]:
            self._stop_receiving(conn)
            request = conn.request
            if not request.data:
                self._close_now(conn)
                continue
            part = "head" if request.in_head else "body"
            self.log.info("Request %s from %s not received in time: 408, closing", part, _peer(conn))
            self._send_quietly(conn, _TIMEOUT)
            self._close(conn)
        for conn in [c for c, (deadline, _) in self.lingering.items() if deadline <= now]:
            self._finish_close(conn)

    def _cap_keepalive(self, deadline: float) -> None:
        """gthread's cap, when the worker stops, on how long idle connections stay open: applied to
        new connections that have not sent a byte yet too."""
        super()._cap_keepalive(deadline)
        for conn in self.receiving:
            if not conn.request.data:
                conn.request.deadline = min(conn.request.deadline, deadline)

    @staticmethod
    def _send_quietly(conn, data: bytes) -> None:
        """Best effort from the event loop: what does not fit in the socket's buffer now is dropped."""
        with contextlib.suppress(OSError):
            conn.sock.send(data)

    # -- answering and closing --------------------------------------------------------------------

    def handle_request(self, req, conn) -> bool:
        """gthread's, where a send that timed out ends the connection (reset, see
        :meth:`finish_request`), and so does a body its thread did not receive in time (when the
        application lets the error through; Django answers it with a 500), instead of either being
        logged as a socket error."""
        try:
            return super().handle_request(req, conn)
        except SendTimeout:
            self.log.info("%s stopped reading its response: resetting", _peer(conn))
            conn.reset = True
        except RequestTimeout:
            self.log.info("Request body from %s not received in time: closing", _peer(conn))
        return False

    def finish_request(self, conn, fs) -> None:
        """gthread's for a kept-alive connection; any other is closed without blocking the event
        loop (:meth:`_close`), or reset when its send timed out (the unsent response is dropped
        at once instead of lingering in the kernel)."""
        if not fs.cancelled() and fs.exception() is None and fs.result() is True:
            super().finish_request(conn, fs)
        elif getattr(conn, "reset", False):
            with contextlib.suppress(OSError):
                conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self._close_now(conn)
        else:
            self._close(conn)

    def _close(self, conn) -> None:
        """Close as gunicorn's ``util.close_graceful`` does (FIN, then drain what the client still
        sends, so the kernel does not answer it with a reset that truncates the response), with the
        draining done by the event loop."""
        try:
            conn.sock.setblocking(False)
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close_now(conn)
            return
        self.lingering[conn] = [time.monotonic() + LINGER_S, 0]
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._drain, conn))

    def _drain(self, conn, _fileobj=None) -> None:
        try:
            data = conn.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        self.lingering[conn][1] += len(data)
        if not data or self.lingering[conn][1] >= LINGER_MAX_BYTES:
            self._finish_close(conn)

    def _finish_close(self, conn) -> None:
        del self.lingering[conn]
        self.poller.unregister(conn.sock)
        self._close_now(conn)

    def _close_now(self, conn) -> None:
        self.nr_conns -= 1
        conn.close()
