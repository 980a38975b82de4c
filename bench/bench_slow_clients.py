"""Slow clients against the production web server: is it still answering?

Run:  .venv/bin/python bench/bench_slow_clients.py [--levels 100,200] [--readers 100,200]
          [--pooled 32] [--window 10] [--reader-window 40]
      (loopback only, no database; about 5 minutes; never part of the test suite)

It starts the ``web`` line of the ``Procfile`` — gunicorn with ``muse_experiments.infra.gunicorn_conf``,
``WEB_CONCURRENCY`` processes x ``WEB_THREADS`` threads (2 x 48 by default) — serving the tiny
WSGI application at the bottom of this file instead of the project's (``GET /healthz`` answers
``ok``; ``POST`` reads its whole body first, as the API views do; ``GET /stream`` streams
``--stream-mb`` MiB). One fresh server per row, so no row inherits another's stuck threads. Each
row holds a number of misbehaving sockets open for the whole probe window (a socket the server
drops is opened again at once, as an attacker would):

* ``slow-header``: sends a request head one byte every 2 s, never finishing it (no key needed);
* ``slow-body``: sends a whole head with ``Content-Length: 100000``, then one body byte every 2 s;
* ``stops-reading``: asks for ``/stream`` and never reads (receive buffer 64 KiB), once; probed
  for ``--reader-window`` s, longer than the send timeout;
* ``never-closes``: sends a ``Connection: close`` request, reads the answer, never closes its end
  (a new such socket every 2 s per slot);
* ``pooled`` (not misbehaving): clients sending ``GET /healthz`` on their kept-alive connections as
  fast as they are answered, for what the server's own reading costs (requests/s and the server's
  CPU per request in the notes).

Meanwhile a probe ``GET /healthz`` on a new connection starts every 0.5 s for ``--window``
seconds; a probe is *answered* when its 200 arrives within 10 s. Each row prints the probes'
answered share and their p50/p99 latency (unanswered probes count as "> 10 s"); how many times
the server dropped a misbehaving socket within the window (``dropped``; ``408``: how many of those
saw a 408; ``never-closes``: how many answers ended with the server's FIN); for ``stops-reading``,
how many of the readers' connections the server had closed by the end.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import selectors
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

PROBE_TIMEOUT_S = 10.0
PROBE_EVERY_S = 0.5
TRICKLE_EVERY_S = 2.0

# -- the WSGI application gunicorn serves (``bench_slow_clients:application``) -----------------


def application(environ, start_response):
    """``/stream``: ``STREAM_MB`` MiB in 64 KiB pieces; any ``POST``: reads its body, answers its
    length; anything else: ``ok``."""
    if environ["PATH_INFO"] == "/stream":
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        piece = b"x" * 65536
        return (piece for _ in range(int(os.environ.get("STREAM_MB", "16")) * 16))
    body = b"ok"
    if environ["REQUEST_METHOD"] == "POST":
        body = str(len(environ["wsgi.input"].read())).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


# -- the bench ---------------------------------------------------------------------------------


@dataclass
class Row:
    kind: str
    sockets: int
    latencies: list[float] = field(default_factory=list)  # seconds; inf = unanswered
    dropped: int = 0
    saw_408: int = 0
    readers_closed: int | None = None
    rate: float | None = None  # pooled: requests answered per second
    cpu_ms: float | None = None  # pooled: the server's CPU per request


def _connect(port: int, rcvbuf: int | None = None, timeout: float = 5) -> socket.socket:
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    try:
        s.connect(("127.0.0.1", port))
    except OSError:
        s.close()
        raise
    s.setblocking(False)
    return s


class Tricklers:
    """``n`` sockets, each sending ``head`` whole and then ``trickle`` one byte every 2 s; a socket
    the server closes is counted and replaced."""

    def __init__(self, port: int, n: int, head: bytes, trickle: bytes) -> None:
        self.port, self.n, self.head, self.trickle = port, n, head, trickle
        self.socks: dict[socket.socket, int] = {}  # socket -> bytes of `trickle` sent
        self.dropped = self.saw_408 = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _open(self) -> None:
        end = time.monotonic() + TRICKLE_EVERY_S
        while len(self.socks) < self.n and not self.stop.is_set() and time.monotonic() < end:
            try:
                s = _connect(self.port, timeout=0.5)
                if self.head:
                    s.sendall(self.head)
            except OSError:
                return  # try again at the next tick
            self.socks[s] = 0

    def _drop(self, s: socket.socket, answer: bytes) -> None:
        self.dropped += 1
        self.saw_408 += answer.startswith(b"HTTP/1.1 408")
        self.socks.pop(s, None)
        s.close()

    def _run(self) -> None:
        while not self.stop.is_set():
            self._open()
            for s, sent in list(self.socks.items()):
                try:
                    answer = s.recv(4096)  # readable: the server answered (408) or closed
                    self._drop(s, answer)
                    continue
                except BlockingIOError:
                    pass
                except OSError:
                    self._drop(s, b"")
                    continue
                try:
                    s.send(self.trickle[sent % len(self.trickle) : sent % len(self.trickle) + 1])
                    self.socks[s] = sent + 1
                except OSError:
                    self._drop(s, b"")
            self.stop.wait(TRICKLE_EVERY_S)

    def __enter__(self) -> Tricklers:
        self._open()
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        for s in self.socks:
            s.close()


class NonReaders:
    """``n`` sockets that each ask for ``/stream`` and never read (64 KiB receive buffer)."""

    def __init__(self, port: int, n: int) -> None:
        self.socks = []
        for _ in range(n):
            s = _connect(port, rcvbuf=65536)
            s.sendall(b"GET /stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            self.socks.append(s)

    def closed_by_server(self) -> int:
        """Drain each socket: how many end in EOF or a reset (the server closed it)."""
        closed = 0
        for s in self.socks:
            with contextlib.suppress(BlockingIOError):
                try:
                    while s.recv(1 << 20):
                        pass
                    closed += 1
                except (ConnectionResetError, BrokenPipeError):
                    closed += 1
        return closed

    def close(self) -> None:
        for s in self.socks:
            s.close()


class NeverClosers(Tricklers):
    """``n`` sockets sending a ``Connection: close`` request, reading the whole answer and never
    closing their end; each is replaced by a new one 2 s after it was opened."""

    def _open(self) -> None:
        pass  # _run opens them

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        held: list[socket.socket] = []
        due = [0.0] * self.n  # when each slot opens its next socket
        while not self.stop.is_set():
            now = time.monotonic()
            for slot, when in enumerate(due):
                if when > now:
                    continue
                if self.stop.is_set() or time.monotonic() > now + TRICKLE_EVERY_S:
                    break  # a server that stopped accepting makes each connect wait
                due[slot] = now + TRICKLE_EVERY_S
                try:
                    s = _connect(self.port, timeout=0.5)
                    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                except OSError:
                    continue
                sel.register(s, selectors.EVENT_READ)
            for key, _ in sel.select(0.2):
                s = key.fileobj
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                if not data:  # the server closed its side: keep ours open
                    sel.unregister(s)
                    held.append(s)
                    self.dropped += 1
        for key in list(sel.get_map().values()):
            key.fileobj.close()
        for s in held:
            s.close()


class PooledLoad:
    """``n`` well-behaved clients, each sending ``GET /healthz`` on its kept-alive connection as
    fast as it is answered (the cost of the event loop's reading shows here); :attr:`answered`."""

    def __init__(self, port: int, n: int) -> None:
        self.port, self.answered = port, 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(n)]

    def _run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=PROBE_TIMEOUT_S)
        while not self.stop.is_set():
            try:
                conn.request("GET", "/healthz")
                conn.getresponse().read()
                self.answered += 1
            except OSError:
                conn.close()
        conn.close()

    def __enter__(self) -> PooledLoad:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


def _probe(port: int, out: list[float]) -> None:
    started = time.monotonic()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=PROBE_TIMEOUT_S)
        conn.request("GET", "/healthz")
        ok = conn.getresponse().read() == b"ok"
        conn.close()
    except OSError:
        ok = False
    elapsed = time.monotonic() - started
    out.append(elapsed if ok and elapsed <= PROBE_TIMEOUT_S else float("inf"))


def probe_for(port: int, window_s: float) -> list[float]:
    """Start a probe every ``PROBE_EVERY_S`` for ``window_s``; their latencies once all ended."""
    out: list[float] = []
    threads = []
    end = time.monotonic() + window_s
    while time.monotonic() < end:
        t = threading.Thread(target=_probe, args=(port, out), daemon=True)
        t.start()
        threads.append(t)
        time.sleep(PROBE_EVERY_S)
    for t in threads:
        t.join(PROBE_TIMEOUT_S + 5)
    return out


def start_server(procs, port: int, log_dir: Path) -> None:
    """The Procfile's ``web`` line, serving this module's application."""
    command = read_procfile()["web"]
    assert "muse_experiments.wsgi" in command, command
    command = command.replace("muse_experiments.wsgi", "bench_slow_clients:application", 1)
    env = {**os.environ, "HOST": "127.0.0.1", "PORT": str(port)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "bench"), str(REPO)])
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("LOG_FORMAT", "plain")
    proc = procs.spawn(f"exec {command}", f"web-{port}", env=env)
    wait_http(f"http://127.0.0.1:{port}/healthz", timeout_s=60, procs=[proc])


def run_row(kind: str, n: int, window_s: float, stream_mb: int, log_dir: Path) -> Row:
    row = Row(kind, n)
    os.environ["STREAM_MB"] = str(stream_mb)
    with Processes(log_dir, grace_s=5) as procs:
        port = free_port()
        start_server(procs, port, log_dir)
        pad = b"X-Pad: " + b"a" * 100_000
        if kind == "stops-reading":
            readers = NonReaders(port, n)
            time.sleep(2)  # their responses fill the buffers and the sends block
            row.latencies = probe_for(port, window_s)
            row.readers_closed = readers.closed_by_server()
            readers.close()
            return row
        if kind == "pooled":
            server = procs.procs[-1].pid
            with PooledLoad(port, n) as load:
                time.sleep(1)  # warm-up
                answered, cpu_s, started = load.answered, tree_cpu_s([server]), time.monotonic()
                row.latencies = probe_for(port, window_s)
                answered = load.answered - answered
                row.rate = answered / (time.monotonic() - started)
                row.cpu_ms = 1000 * (tree_cpu_s([server]) - cpu_s) / max(answered, 1)
            return row
        if kind == "slow-header":
            clients = Tricklers(port, n, b"", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + pad)
        elif kind == "slow-body":
            head = b"POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n"
            clients = Tricklers(port, n, head, b"{" + b" " * 99_999)
        else:
            clients = NeverClosers(port, n, b"", b"")
        with clients:
            time.sleep(2)
            row.latencies = probe_for(port, window_s)
        row.dropped, row.saw_408 = clients.dropped, clients.saw_408
    return row


def _ms(q: float, latencies: list[float]) -> str:
    value = pct(latencies, q)
    return f"> {PROBE_TIMEOUT_S:.0f} s" if value == float("inf") else f"{value * 1000:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--levels", default="100,200", help="misbehaving sockets per row (besides 0)")
    parser.add_argument("--readers", default="100,200", help="stops-reading sockets per row")
    parser.add_argument("--pooled", default="32", help="well-behaved kept-alive clients per row")
    parser.add_argument("--kinds", default="pooled,slow-header,slow-body,stops-reading,never-closes")
    parser.add_argument("--window", type=float, default=10, help="seconds of probes per row")
    parser.add_argument("--reader-window", type=float, default=40, help="seconds of probes, stops-reading")
    parser.add_argument("--stream-mb", type=int, default=16)
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",") if x]
    readers = [int(x) for x in args.readers.split(",") if x]
    counts = {"stops-reading": readers, "pooled": [int(x) for x in args.pooled.split(",") if x]}
    log_dir = Path(tempfile.mkdtemp(prefix="bench-slow-clients-"))
    plan = [("none", 0, args.window)]
    for kind in args.kinds.split(","):
        for n in counts.get(kind, levels):
            plan.append((kind, n, args.reader_window if kind == "stops-reading" else args.window))
    print(f"web: {read_procfile()['web']}")
    print(f"server logs: {log_dir}")
    print(
        f"{'clients':<14} {'sockets':>7} {'answered':>9} {'p50':>9} {'p99':>9} {'dropped':>8} {'408':>5} notes"
    )
    for kind, n, window in plan:
        row = run_row(kind, n, window, args.stream_mb, log_dir)
        answered = sum(v != float("inf") for v in row.latencies)
        share = f"{answered}/{len(row.latencies)}"
        note = "" if row.readers_closed is None else f"server closed {row.readers_closed}/{n} readers"
        if row.rate is not None:
            note = f"{row.rate:.0f} requests/s to the pooled clients, {row.cpu_ms:.3f} ms server CPU each"
        dropped = "-" if kind in ("none", "pooled", "stops-reading") else str(row.dropped)
        saw = "-" if kind in ("none", "pooled", "stops-reading", "never-closes") else str(row.saw_408)
        print(
            f"{kind:<14} {n:>7} {share:>9} {_ms(50, row.latencies):>9} {_ms(99, row.latencies):>9} "
            f"{dropped:>8} {saw:>5} {note}",
            flush=True,
        )
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchlib import REPO, Processes, free_port, pct, read_procfile, tree_cpu_s, wait_http

    main()
