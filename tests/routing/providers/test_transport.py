"""Cutting off a non-streamed upstream call from another thread, over real HTTP, for every
provider kind (the SDK clients' own transports and the native service's urllib3 pool,
:mod:`routing.providers.transport`)."""

from __future__ import annotations

import socket
import threading

import pytest

from routing.providers import CompletionRequest, Message, client_for
from routing.providers.base import sdk_clients
from routing.providers.errors import ConnectionFailed, UpstreamUnavailable
from routing.providers.openai_chat import NATIVE_USER_AGENT, native_route
from routing.providers.transport import upstream_call, watched_pool
from tests.routing.conftest import MODELS

#: Avocado (native chat), Azure OpenAI Responses (dated and v1), Anthropic Messages.
KINDS = ("native", "azure_dated", "azure_v1", "anthropic")


@pytest.fixture(autouse=True)
def _fresh_config_snapshots():
    """Django-free module: shadows the Django fixture of tests/conftest.py (runs with -p no:django)."""
    yield


def ask(text: str) -> CompletionRequest:
    return CompletionRequest(messages=(Message("user", text),))


def wait_until(predicate, what: str, timeout_s: float = 10.0):
    done = threading.Event()
    for _ in range(int(timeout_s / 0.02)):
        value = predicate()
        if value:
            return value
        done.wait(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def call_in_thread(ep, request):
    """Run ``complete`` inside ``upstream_call()`` in a thread; returns (thread, box of call/outcome)."""
    box: dict = {}

    def run():
        with upstream_call() as call:
            box["call"] = call
            try:
                box["result"] = client_for(ep).complete(ep, request)
            except Exception as exc:  # noqa: BLE001 - the test inspects it
                box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, box


@pytest.mark.parametrize("name", KINDS)
def test_cancel_shuts_the_socket_of_a_blocked_call_and_the_upstream_sees_it_close(
    fake, endpoint_factory, name
):
    ep = endpoint_factory(name, timeout_s=30.0)
    fake.set_scenario(MODELS[name], latency_ms=20_000)
    thread, box = call_in_thread(ep, ask("take your time"))
    wait_until(lambda: fake.calls(model=MODELS[name]), "the upstream to receive the request")

    box["call"].cancel()
    thread.join(10)

    assert not thread.is_alive()
    assert isinstance(box.get("error"), ConnectionFailed) and "result" not in box
    assert box["call"].cancelled and box["call"].sent
    [upstream] = wait_until(
        lambda: [c for c in fake.calls(model=MODELS[name]) if "client_closed_at" in c],
        "the upstream to see the connection close",
    )
    assert upstream["status"] is None  # nothing was answered


def test_a_call_cancelled_before_it_sends_never_reaches_the_upstream(fake, endpoint_factory):
    ep = endpoint_factory("native")
    with upstream_call() as call:
        call.cancel()
        with pytest.raises(ConnectionFailed):
            client_for(ep).complete(ep, ask("too late"))
    assert fake.calls(model=MODELS["native"]) == []


def test_cancelling_a_finished_call_leaves_the_pooled_connection_to_the_next_call(fake, endpoint_factory):
    ep = endpoint_factory("native", timeout_s=30.0)
    with upstream_call() as first:
        client_for(ep).complete(ep, ask("one"))
    fake.set_scenario(MODELS["native"], latency_ms=300)
    thread, box = call_in_thread(ep, ask("two"))  # reuses the kept-alive connection of "one"
    wait_until(lambda: len(fake.calls(model=MODELS["native"])) == 2, "the second request")

    first.cancel()
    thread.join(10)

    assert box["result"].text == f"{MODELS['native']} reply to: two [quality=0.50]"
    assert not box["call"].cancelled
    assert [c["status"] for c in fake.calls(model=MODELS["native"])] == [200, 200]


def test_a_native_non_streamed_call_goes_through_the_urllib3_pool_and_the_rest_through_the_sdk(
    fake, endpoint_factory
):
    native, openai_chat = endpoint_factory("native"), endpoint_factory("openai_chat")
    assert client_for(native).complete(native, ask("one")).text.startswith(MODELS["native"])
    list(client_for(native).stream(native, ask("two")))
    client_for(openai_chat).complete(openai_chat, ask("three"))

    agents = [c["headers"]["user-agent"] for c in fake.calls()]
    assert agents[0] == NATIVE_USER_AGENT
    assert agents[1].startswith("OpenAI/Python") and agents[2].startswith("OpenAI/Python")
    first = fake.calls()[0]
    assert (first["method"], first["path"], first["auth_ok"]) == ("POST", "/v1/chat/completions", True)
    assert first["headers"]["content-type"] == "application/json"
    route = native_route(native)
    assert (route.path, route.url) == ("/v1/chat/completions", f"{fake.url}/v1/chat/completions")
    sdk_clients.clear()  # closes the cached pool's connections, as it closes SDK clients
    assert route.pool.pool is None


def test_under_an_environment_proxy_the_native_call_goes_to_the_proxy(fake, endpoint_factory, monkeypatch):
    """The urllib3 pool does not read ``HTTP_PROXY``; the SDK's client does, so a native endpoint
    whose host a proxy applies to is served by the SDK (the proxy here answers 502 to anything)."""
    seen: list[bytes] = []
    proxy = socket.create_server(("127.0.0.1", 0))

    def answer():
        conn, _ = proxy.accept()
        with conn:
            seen.append(conn.recv(65536).split(b"\r\n", 1)[0])
            conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    no_proxies(monkeypatch)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.getsockname()[1]}")
    sdk_clients.clear()
    ep = endpoint_factory("native")
    try:
        with pytest.raises(UpstreamUnavailable):
            client_for(ep).complete(ep, ask("via the proxy"))
    finally:
        sdk_clients.clear()
        proxy.close()
    thread.join(5)
    assert seen == [f"POST {ep.base_url.rstrip('/')}/chat/completions HTTP/1.1".encode()]
    assert fake.calls() == []


def no_proxies(monkeypatch) -> None:
    """Clear every proxy variable ``urllib.request.getproxies`` reads (either case)."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def test_watched_pool_leaves_a_host_to_the_proxy_unless_no_proxy_excludes_it(monkeypatch):
    no_proxies(monkeypatch)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    assert watched_pool("https://avocado.internal/v1", timeout_s=5) is None
    monkeypatch.setenv("NO_PROXY", "avocado.internal")
    pool = watched_pool("https://avocado.internal/v1", timeout_s=5)
    assert pool is not None and (pool.host, pool.port, pool.scheme) == ("avocado.internal", None, "https")
    assert (pool.timeout.connect_timeout, pool.timeout.read_timeout) == (5, 5)
    assert watched_pool("http://avocado.internal:8080/v1", timeout_s=1) is not None  # no HTTP_PROXY
    monkeypatch.setenv("ALL_PROXY", "socks5://proxy.internal:1080")
    monkeypatch.delenv("NO_PROXY")
    assert watched_pool("http://avocado.internal:8080/v1", timeout_s=1) is None
