"""Cutting off a non-streamed upstream call from another thread, over real HTTP, for every
provider kind (the SDK clients' own transports, :mod:`routing.providers.transport`)."""

from __future__ import annotations

import threading

import pytest

from routing.providers import CompletionRequest, Message, client_for
from routing.providers.errors import ConnectionFailed
from routing.providers.transport import upstream_call
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
