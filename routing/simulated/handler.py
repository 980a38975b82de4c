"""The simulated upstreams' request handler: plumbing (JSON bodies, chunked SSE streams, resets),
the control API under ``/_fake/``, the provider routes, authentication, and the refusals the real
APIs give, before a :class:`routing.simulated.plan.Plan` is rendered in the API's wire format."""

from __future__ import annotations

import contextlib
import json
import logging
import select
import socket
import struct
import time
import uuid
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from .anthropic import MessagesRenderer
from .contracts import contract_problem
from .errors import ErrorReply, auth_failure, bearer, error_body, failure_reply, model_not_found
from .openai import ChatRenderer, ResponsesRenderer
from .plan import build_plan
from .reasoning import misplaced_reasoning, unknown_reasoning
from .render import Abort, sse
from .rules import conversation_problem, tool_id_problem
from .scenario import SECRET_HEADERS, Scenario

if TYPE_CHECKING:
    from .server import FakeUpstreams

log = logging.getLogger(__name__)


class Handler(BaseHTTPRequestHandler):
    """One connection to the simulated upstreams: the control API under ``/_fake/`` and the
    provider routes, each request recorded on :attr:`fake` (set on a bound subclass by
    :meth:`routing.simulated.server.FakeUpstreams.start`)."""

    protocol_version = "HTTP/1.1"
    server_version = "FakeUpstreams/1.0"
    timeout = 30  # idle keep-alive connections are dropped after this many seconds
    fake: FakeUpstreams  # set on the bound subclass

    # -- plumbing --------------------------------------------------------------------------

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without TCP_NODELAY, Nagle's algorithm and
        # the client's delayed ACK add ~40 ms to every response on a kept-alive connection.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s - %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    _call: dict[str, Any] | None = None

    def _upd(self, **fields: Any) -> None:
        """Update the recorded call of the current request (under the fake's lock)."""
        if self._call is not None:
            self.fake.update_call(self._call, **fields)

    def _dispatch(self, method: str) -> None:
        self._call = None
        split = urlsplit(self.path)
        path = split.path
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            if path.startswith("/_fake/"):
                self._control(method, path, query, raw)
            else:
                self._provider(method, path, query, raw)
        except Abort:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError):
            # The client went away (e.g. its read timeout fired while we slept).
            self.close_connection = True
            if self._call is not None and "client_closed_at" not in self._call:
                self._upd(client_closed_at=time.time())

    def send_json(
        self, status: int, payload: Any, headers: Mapping[str, str] | None = None, raw: bytes | None = None
    ) -> None:
        """Send ``payload`` as JSON (or the bytes ``raw`` as they are) with ``Content-Length``."""
        body = raw if raw is not None else json.dumps(payload).encode()
        self._upd(response_status=status, response_body=body.decode("utf-8", "replace"))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def start_stream(self, headers: Mapping[str, str]) -> None:
        """Send the headers of a 200 SSE answer in chunked transfer encoding."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.flush()

    def chunk(self, data: bytes) -> None:
        """Send ``data`` as one HTTP chunk (recorded in the call's ``stream_events``)."""
        if not data:
            return
        if self._call is not None:
            self.fake.add_stream_event(self._call, data.decode("utf-8", "replace"))
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_stream(self) -> None:
        """Send the last (empty) chunk."""
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def reset_connection(self) -> None:
        """Abort the TCP connection (RST) without a (complete) response."""
        with contextlib.suppress(OSError):
            self.wfile.flush()
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        with contextlib.suppress(OSError):
            self.connection.close()
        raise Abort

    # -- control API -------------------------------------------------------------------------

    def _control(self, method: str, path: str, query: dict[str, str], raw: bytes) -> None:
        fake = self.fake
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            self.send_json(400, {"error": "body is not JSON"})
            return
        try:
            if path == "/_fake/health":
                self.send_json(200, {"ok": True})
            elif path == "/_fake/scenarios" and method == "GET":
                self.send_json(
                    200, {"scenarios": fake.scenarios(), "default": fake.default_scenario().to_dict()}
                )
            elif path == "/_fake/scenarios" and method == "POST":
                if "scenarios" in body:
                    for model, sc in body["scenarios"].items():
                        fake.set_scenario(model, **sc)
                else:
                    body = dict(body)
                    model = body.pop("model")
                    fake.set_scenario(model, **body)
                self.send_json(200, {"scenarios": fake.scenarios()})
            elif path == "/_fake/calls" and method == "GET":
                self.send_json(200, {"calls": fake.calls(model=query.get("model"), path=query.get("path"))})
            elif path == "/_fake/reset" and method == "POST":
                fake.reset(scenarios=bool(body.get("scenarios")))
                self.send_json(200, {"ok": True})
            else:
                self.send_json(404, {"error": f"no control route {method} {path}"})
        except (KeyError, TypeError, ValueError) as exc:
            self.send_json(400, {"error": f"bad scenario: {exc}"})

    # -- provider routing --------------------------------------------------------------------

    def _route(self, path: str) -> tuple[str | None, str | None, str | None]:
        """-> (api, flavour, deployment) for a provider path, or (None, None, None)."""
        if path == "/v1/chat/completions":
            return "chat_completions", "openai", None
        if path == "/v1/responses":
            return "responses", "openai", None
        if path == "/v1/messages":
            return "messages", "anthropic", None
        if path == "/openai/responses":
            return "responses", "azure", None
        if path in ("/openai/v1/responses",):
            return "responses", "azure_v1", None
        if path == "/openai/v1/chat/completions":
            return "chat_completions", "azure_v1", None
        parts = path.split("/")
        # /openai/deployments/{deployment}/chat/completions
        if (
            len(parts) == 6
            and parts[1:3] == ["openai", "deployments"]
            and parts[4:] == ["chat", "completions"]
        ):
            return "chat_completions", "azure", parts[3]
        if path.startswith("/openai/"):
            return None, "azure", None
        if path.startswith("/v1/"):
            return None, "anthropic" if "anthropic-version" in self.headers else "openai", None
        return None, None, None

    def request_id_headers(self, flavour: str | None) -> dict[str, str]:
        """The header that carries this request's id in ``flavour``'s API (``request-id`` for
        Anthropic, else ``x-request-id``)."""
        if flavour == "anthropic":
            return {"request-id": self._request_id}
        return {"x-request-id": self._request_id}

    def _error(self, flavour: str | None, reply: ErrorReply) -> None:
        headers = {**self.request_id_headers(flavour), **reply.headers}
        self._upd(status=reply.status)
        self.send_json(reply.status, error_body(flavour, reply, self._request_id), headers)

    def _provider(self, method: str, path: str, query: dict[str, str], raw: bytes) -> None:
        fake = self.fake
        api, flavour, deployment = self._route(path)
        self._request_id = ("req_" if flavour == "anthropic" else "") + uuid.uuid4().hex
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        model = deployment or (body.get("model") if isinstance(body, dict) else None)
        headers = {
            k.lower(): ("<redacted>" if k.lower() in SECRET_HEADERS else v) for k, v in self.headers.items()
        }
        self._call = fake.record_call(
            {
                "time": time.time(),
                "method": method,
                "path": path,
                "query": query,
                "headers": headers,
                "api": api,
                "flavour": flavour,
                "model": model,
                "stream": bool(isinstance(body, dict) and body.get("stream")),
                "body": body,
                "raw_body": raw.decode("utf-8", "replace"),
                "auth_ok": False,
                "status": None,
                "outcome": None,
                "request_id": self._request_id,
            }
        )

        # Authentication first, as the real services do.
        if flavour == "anthropic":
            # anthropic>=2 sends the API key as a Bearer token; older SDKs/curl use x-api-key.
            presented = self.headers.get("x-api-key") or bearer(self.headers.get("authorization"))
            families: tuple[str, ...] = ("anthropic",)
        elif flavour in ("azure", "azure_v1"):
            presented = self.headers.get("api-key") or bearer(self.headers.get("authorization"))
            families = ("azure",)
        else:
            presented = bearer(self.headers.get("authorization"))
            families = ("openai", "native")
        if flavour is not None and not fake.key_ok(families, presented):
            self._refuse(flavour, "auth_failed", auth_failure(flavour, presented))
            return
        self._upd(auth_ok=flavour is not None)
        refusal = self._request_refusal(method, path, query, api, flavour, model, body)
        if refusal is not None:
            self._refuse(flavour, *refusal)
            return
        assert api is not None and model is not None and isinstance(body, dict)

        sc = fake.scenario(model)
        attempt = fake.next_attempt(model)
        failing = sc.failure is not None and (sc.fail_first_n <= 0 or attempt <= sc.fail_first_n)
        failure = sc.failure if failing else None
        self._upd(attempt=attempt)

        if not self._wait_or_closed(sc.latency_ms):
            if not fake.stopping():
                self._upd(client_closed_at=time.time())
            raise Abort
        if failure and self._fail_before_body(flavour, failure, sc):
            return
        refusal = self._body_refusal(api, flavour, body, sc)
        if refusal is not None:
            self._refuse(flavour, *refusal)
            return
        stream = bool(body.get("stream"))
        if self._scripted(sc, attempt, stream, flavour):
            return
        plan = build_plan(fake, api, model, body, sc, self._request_id)
        self._upd(status=200)
        self._upd(outcome=failure or "ok")
        renderer = {"chat_completions": ChatRenderer, "responses": ResponsesRenderer}.get(
            api, MessagesRenderer
        )
        renderer(self, plan, body, failure).respond(stream)

    def _refuse(self, flavour: str | None, outcome: str, reply: ErrorReply) -> None:
        self._upd(outcome=outcome)
        self._error(flavour, reply)

    def _request_refusal(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        api: str | None,
        flavour: str | None,
        model: str | None,
        body: Any,
    ) -> tuple[str, ErrorReply] | None:
        """``(outcome, reply)`` for a request refused before its scenario applies: an unknown
        route, a missing ``api-version`` (Azure) or ``anthropic-version``, a body that is not a
        JSON object, a model not served."""
        invalid = "invalid_request_error"
        if api is None or method != "POST":
            if flavour == "anthropic":
                return "not_found", ErrorReply(404, "not_found_error", f"Not found: {method} {path}")
            return "not_found", ErrorReply(404, invalid, f"Unknown request URL: {method} {path}.")
        if flavour == "azure" and "api-version" not in query:
            return "bad_request", ErrorReply(404, invalid, "Resource not found (missing api-version)", "404")
        if flavour == "anthropic" and "anthropic-version" not in self.headers:
            return "bad_request", ErrorReply(400, invalid, "anthropic-version: header is required")
        if not isinstance(body, dict):
            return "bad_request", ErrorReply(
                400, invalid, "We could not parse the JSON body of your request."
            )
        if not model or not self.fake.model_known(model):
            return "model_not_found", model_not_found(flavour, model)
        return None

    def _body_refusal(
        self, api: str, flavour: str | None, body: dict[str, Any], sc: Scenario
    ) -> tuple[str, ErrorReply] | None:
        """``(outcome, reply)`` for a body the real API refuses: reasoning it never issued or out
        of its place (unless ``sc.verify_reasoning`` is off), a conversation, output contract or
        tool-call id it does not take."""
        invalid = "invalid_request_error"
        anthropic = flavour == "anthropic"
        if sc.verify_reasoning:
            bad = unknown_reasoning(self.fake, api, body) or misplaced_reasoning(self.fake, api, body)
            if bad:
                code = None if anthropic else "invalid_encrypted_content"
                return "invalid_reasoning", ErrorReply(400, invalid, bad, code)
        bad_turns = conversation_problem(api, body)
        if bad_turns is not None:
            return "invalid_request", ErrorReply(400, invalid, bad_turns)
        bad_contract = contract_problem(api, body)
        if bad_contract is not None:
            return "invalid_contract", ErrorReply(400, invalid, bad_contract)
        bad_id = tool_id_problem(api, body)
        if bad_id is not None:
            code = None if anthropic else "string_above_max_length"
            return "invalid_tool_id", ErrorReply(400, invalid, bad_id[1], code)
        return None

    def _scripted(self, sc: Scenario, attempt: int, stream: bool, flavour: str | None) -> bool:
        """Send the scenario's scripted wire bytes; True if the request has been answered."""
        if sc.wire_first_n > 0 and attempt > sc.wire_first_n:
            return False
        if stream and sc.wire is not None:
            self._upd(status=200, outcome="scripted", frames_sent=0)
            self.start_stream(self.request_id_headers(flavour))
            for n, frame in enumerate(sc.wire, start=1):
                if not self._wait_or_closed(float(frame.get("delay_ms") or 0)):
                    self._upd(client_closed_at=time.time())
                    raise Abort
                self.chunk(
                    frame["data"].encode() if "data" in frame else sse(frame["json"], frame.get("event"))
                )
                self._upd(frames_sent=n)
            self.end_stream()
            self._upd(finished_at=time.time())
            return True
        if not stream and sc.wire_body is not None:
            self._upd(status=sc.wire_status, outcome="scripted")
            raw = sc.wire_body.get("raw") if isinstance(sc.wire_body, dict) else None
            body = raw.encode() if isinstance(raw, str) else json.dumps(sc.wire_body).encode()
            self.send_json(sc.wire_status, None, self.request_id_headers(flavour), raw=body)
            return True
        return False

    def _wait_or_closed(self, ms: float) -> bool:
        """Sleep ``ms`` ms, watching the client socket; False if the client closed it (or stopping)."""
        deadline = time.monotonic() + ms / 1000.0
        while True:
            if self._peer_closed():
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            if self.fake.stopping(min(left, 0.02)):
                return False

    def _peer_closed(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _fail_before_body(self, flavour: str | None, failure: str, sc: Scenario) -> bool:
        """Emit a pre-body failure; returns True if the request has been answered."""
        self._upd(outcome=failure)
        reply = failure_reply(flavour, failure, sc)
        if reply is not None:
            self._error(flavour, reply)
            return True
        if failure == "timeout":
            self.fake.sleep(sc.hang_ms)
            raise Abort
        if failure == "reset":
            self._upd(status=None)
            self.reset_connection()
        return False
