"""An instant upstream: a minimal OpenAI-compatible ``POST /v1/chat/completions`` that answers a
fixed chat completion at once (stdlib asyncio, one process, TCP_NODELAY, HTTP/1.1 keep-alive).

``bench/bench_proxy.py`` points the direct SDK calls, LiteLLM's proxy and the platform's Avocado
endpoints at one of these, so their latency differences are the proxies' own. Any other path gets
a 404; ``"stream": true`` gets the same answer as a Chat Completions event stream; ``GET /health`` answers ``{"ok": true}``. The request body is only parsed for ``model``,
which the answer echoes. Run:  python bench/instant_upstream.py --port 18200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import time

#: The fixed answer (``id``, ``created`` and ``model`` are filled per request).
COMPLETION = {
    "object": "chat.completion",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Done: the benchmark's fixed answer.",
                "refusal": None,
            },
            "finish_reason": "stop",
            "logprobs": None,
        }
    ],
    "usage": {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20},
}
MAX_BODY = 4 * 1024 * 1024


def completion_body(model: str, n: int) -> bytes:
    """The fixed ``chat.completion`` JSON for ``model``, with id ``chatcmpl-instant-<n>``."""
    return json.dumps(
        {"id": f"chatcmpl-instant-{n}", "created": int(time.time()), "model": model, **COMPLETION}
    ).encode()


def stream_body(model: str, n: int, *, include_usage: bool) -> bytes:
    """The fixed answer as a Chat Completions stream (``data: <chunk>`` lines, ``data: [DONE]``):
    the text, the finish reason, then the usage when ``stream_options.include_usage`` asks for it."""
    base = {
        "id": f"chatcmpl-instant-{n}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    message = COMPLETION["choices"][0]["message"]
    chunks = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": message["content"]}, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]  # fmt: skip
    if include_usage:
        chunks.append({**base, "choices": [], "usage": COMPLETION["usage"]})
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def response(
    status: int, body: bytes, *, close: bool = False, content_type: str = "application/json"
) -> bytes:
    """An HTTP/1.1 response with ``Content-Length`` (streams too: the whole stream is sent at once)."""
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 413: "Payload Too Large"}[status]
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n"
        f"content-length: {len(body)}\r\nconnection: {'close' if close else 'keep-alive'}\r\n\r\n"
    )
    return head.encode() + body


class InstantProtocol(asyncio.Protocol):
    """One connection: parse requests as they arrive (``Content-Length`` bodies), answer each."""

    served = 0
    #: Open connections' transports (closed by :func:`close_connections`).
    connections: set[asyncio.BaseTransport] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        InstantProtocol.connections.add(transport)
        self.buffer = b""
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        InstantProtocol.connections.discard(self.transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
            length = int(headers.get("content-length", "0") or 0)
            if length > MAX_BODY or "chunked" in headers.get("transfer-encoding", ""):
                self.transport.write(response(413, b'{"error": "send a Content-Length body"}', close=True))
                self.transport.close()
                return
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            self.transport.write(self.answer(head[0], body))

    def answer(self, request_line: str, body: bytes) -> bytes:
        method, _, rest = request_line.partition(" ")
        path = rest.split(" ", 1)[0].split("?", 1)[0]
        if method == "GET" and path == "/health":
            return response(200, b'{"ok": true}')
        if method != "POST" or not path.endswith("/chat/completions"):
            return response(404, b'{"error": {"message": "not found", "type": "invalid_request_error"}}')
        try:
            request = json.loads(body)
            model = request.get("model") or "instant"
        except (ValueError, AttributeError):
            return response(400, b'{"error": {"message": "invalid JSON", "type": "invalid_request_error"}}')
        InstantProtocol.served += 1
        if request.get("stream"):
            usage = bool((request.get("stream_options") or {}).get("include_usage"))
            body = stream_body(str(model), InstantProtocol.served, include_usage=usage)
            return response(200, body, content_type="text/event-stream")
        return response(200, completion_body(str(model), InstantProtocol.served))


async def serve(port: int, host: str = "127.0.0.1") -> asyncio.Server:
    """Start listening on ``host:port`` (0 = any free port; read it from ``server.sockets``)."""
    return await asyncio.get_running_loop().create_server(InstantProtocol, host, port, backlog=1024)


def close_connections() -> None:
    """Close every open connection (call on the server's event loop)."""
    for transport in list(InstantProtocol.connections):
        transport.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()

    async def run() -> None:
        server = await serve(args.port)
        async with server:
            await server.serve_forever()

    asyncio.run(run())


if __name__ == "__main__":
    main()
