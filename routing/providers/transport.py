"""The provider SDK clients' HTTP transport: an upstream call another thread can cut off.

Both SDKs (``openai`` 3.x and ``anthropic`` 2.x) send requests with ``httpx2`` (the SDKs' own
successor of ``httpx``: ``httpx2.Client`` → ``httpx2.HTTPTransport`` → ``httpcore2.ConnectionPool``
→ one ``httpcore2`` network stream per socket); ``httpx2``/``httpcore2`` in a profile are the SDK
calls. A non-streamed SDK call blocks its thread in ``recv`` until the whole answer has arrived,
so nothing in that thread can notice that the caller went away. :func:`watched_http_client`
builds the SDK's default client (its limits, timeouts, keep-alive socket options and proxies) and
routes each of its connections through :class:`WatchedBackend`, whose streams tell the
:class:`UpstreamCall` of the thread using them (:func:`upstream_call`) which socket carries it.
:meth:`UpstreamCall.cancel`, from any thread, then shuts that socket down
(``shutdown(SHUT_RDWR)``): the blocked ``recv`` returns at once, the SDK raises a connection
error, the upstream sees the connection close, and the socket is never used again (the pool drops
a connection whose read failed, and checks an idle one before reuse).

A socket belongs to the call that last read or wrote it, so cancelling a call that has finished
never touches a connection the pool has handed to another call since.

The native Avocado service's non-streamed calls go through :func:`watched_pool` instead: a
``urllib3`` connection pool (the HTTP library under ``requests``) whose connections bind their
socket to the current :class:`UpstreamCall` in the same way: cancellable like the SDK's, and
cheaper (the optimisation is the pool; cancellation is the same on both paths). Django-free.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import socket
import threading
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore2
import httpx2
import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection

log = logging.getLogger("routing.providers")

_current: contextvars.ContextVar[UpstreamCall | None] = contextvars.ContextVar(
    "muse_upstream_call", default=None
)
#: Serialises binding a socket to a call with cutting it off (both rare: once per call).
_lock = threading.Lock()


class UpstreamCall:
    """One upstream HTTP call (in one thread) that :meth:`cancel` can cut off from another.

    ``cancelled``: cancel() was called. ``sent``: the call had started writing its request (so the
    upstream may have billed its input). ``kill``: set (a ``KillInForce``) when a kill switch, not
    the caller, was the reason.
    """

    __slots__ = ("_stream", "cancelled", "kill", "sent")

    def __init__(self) -> None:
        self._stream: _WatchedStream | _WatchedConnection | None = None
        self.cancelled = False
        self.sent = False
        self.kill = None

    def cancel(self) -> None:
        """Shut down the socket this call is using now, and any it uses from now on (idempotent)."""
        with _lock:
            self.cancelled = True
            stream = self._stream
            if stream is not None and stream.owner is self:
                stream.shut_down()

    def _bind(self, stream: _WatchedStream | _WatchedConnection) -> None:
        with _lock:
            stream.owner, self._stream, self.sent = self, stream, True
            if self.cancelled:
                stream.shut_down()

    def _release(self) -> None:
        with _lock:
            if self._stream is not None and self._stream.owner is self:
                self._stream.owner = None
            self._stream = None


@contextmanager
def upstream_call() -> Iterator[UpstreamCall]:
    """Run the SDK calls of this block (this thread or task) as one cancellable :class:`UpstreamCall`.

    Only clients from :func:`watched_http_client` are cut off by its ``cancel()``."""
    call = UpstreamCall()
    token = _current.set(call)
    try:
        yield call
    finally:
        _current.reset(token)
        call._release()


def _shut_down(sock: Any) -> None:
    """``shutdown(SHUT_RDWR)`` on a raw socket (under TLS too): a blocked read returns now."""
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):  # already closed, or never connected
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _WatchedStream(httpcore2.NetworkStream):
    """A network stream that binds its socket to the current :class:`UpstreamCall` on use."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner
        self._sock = inner.get_extra_info("socket")
        self.owner: UpstreamCall | None = None

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        call = _current.get()
        if call is not None and call is not self.owner:
            call._bind(self)
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        call = _current.get()
        if call is not None and call is not self.owner:
            call._bind(self)
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None):
        return _WatchedStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)

    def shut_down(self) -> None:
        _shut_down(self._sock)


class WatchedBackend(httpcore2.NetworkBackend):
    """``httpcore2``'s network backend whose streams are :class:`_WatchedStream` s."""

    def __init__(self, inner: httpcore2.NetworkBackend | None = None) -> None:
        self._inner = inner or httpcore2.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        return _WatchedStream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.NetworkStream:
        return _WatchedStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def watched_http_client(sdk: Any) -> httpx2.Client:
    """``sdk.DefaultHttpxClient()`` (``openai`` or ``anthropic``: the SDK's defaults) whose
    connections, direct or through a proxy, use :class:`WatchedBackend`, and which follows no
    redirect: the SDKs' default client does, and ``httpx2`` strips only ``Authorization`` when it
    leaves the origin, so a redirect would carry ``x-api-key`` / ``api-key`` to any host (a 3xx
    is an error status instead). If a future ``httpx2`` lays its pools out differently, logs an
    error and returns the client unwatched (calls then run to their end when cancelled;
    ``tests/routing/providers/test_transport.py`` fails first)."""
    client = sdk.DefaultHttpxClient(follow_redirects=False)
    transports = [getattr(client, "_transport", None), *getattr(client, "_mounts", {}).values()]
    pools = [getattr(t, "_pool", None) for t in transports if t is not None]
    if not pools or not all(isinstance(p, httpcore2.ConnectionPool) for p in pools):
        log.error("httpx2 transport without a connection pool: upstream calls cannot be cut off")
        return client
    for pool in pools:
        pool._network_backend = WatchedBackend(pool._network_backend)
    return client


class _WatchedConnection:
    """A ``urllib3`` connection that binds its socket to the current :class:`UpstreamCall` when it
    connects and whenever a request is sent on it (a kept-alive connection changes calls)."""

    owner: UpstreamCall | None = None
    sock: Any

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        self._watch()

    def request(self, *args: Any, **kwargs: Any) -> None:
        if self.sock is not None:  # kept alive from an earlier call; a new one binds in connect()
            self._watch()
        super().request(*args, **kwargs)  # type: ignore[misc]

    def _watch(self) -> None:
        call = _current.get()
        if call is not None and call is not self.owner:
            call._bind(self)

    def shut_down(self) -> None:
        _shut_down(self.sock)


class _WatchedHTTPConnection(_WatchedConnection, HTTPConnection):
    pass


class _WatchedHTTPSConnection(_WatchedConnection, HTTPSConnection):
    pass


class _WatchedHTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


#: Kept-alive connections per pool (the SDK's default ``httpx2`` limit); more are opened when
#: needed and closed after use.
POOL_MAXSIZE = 100


def watched_pool(base_url: str, *, timeout_s: float) -> urllib3.HTTPConnectionPool | None:
    """A ``urllib3`` keep-alive pool for ``base_url``'s host whose calls :meth:`UpstreamCall.cancel`
    can cut off. What it buys: less worker CPU per native call than the SDK's ``client.post`` over
    ``httpx2`` (``bench/bench_sdk_post.py``; figures in bench/README.md).

    ``timeout_s`` bounds the connect and each read (as the SDK's timeout does). No
    retries and no redirects: a failed call is the caller's to retry. ``None`` when an environment
    proxy (``HTTP(S)_PROXY`` or ``ALL_PROXY``, not excluded by ``NO_PROXY``) applies to the host: the caller then
    uses the SDK's client, which honours it."""
    url = urllib3.util.parse_url(base_url)
    scheme = url.scheme or "http"
    proxies = urllib.request.getproxies()
    if (proxies.get(scheme) or proxies.get("all")) and not urllib.request.proxy_bypass(url.host or ""):
        return None
    pool_class = _WatchedHTTPSPool if scheme == "https" else _WatchedHTTPPool
    return pool_class(
        url.host,
        url.port,
        maxsize=POOL_MAXSIZE,
        block=False,
        timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s),
        retries=False,
    )
