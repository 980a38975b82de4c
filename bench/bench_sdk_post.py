"""A provider call through the SDK's ``create`` against the same call through ``client.post``.

Run: ``.venv/bin/python bench/bench_sdk_post.py [--calls 1000]``

Starts the simulated upstreams in this process (real HTTP on 127.0.0.1), makes a second-turn
request per API (Chat Completions on the native endpoint; Responses on OpenAI, Azure dated and
Azure v1, replaying the encrypted reasoning of a first turn, a tool call and its output), and
times, alternating over two rounds on the same warm SDK client and the same body:

* ``create``: ``chat.completions.create(**body)`` / ``responses.create(**body)``;
* ``post``: ``client.post(path, body=body, cast_to=…, options=INFERENCE_OPTIONS)``, what
  :mod:`routing.providers.openai_chat` (``cast_to=httpx2.Response``, its JSON read as is) and
  :mod:`routing.providers.openai_responses` (``cast_to=Response``) do.

Prints wall ms per call (the fake's serving is in it too, the same for both) and the
post / create ratio.

Then the native endpoint's call against ``bench/instant_upstream.py`` in its own process, so that
this process's CPU is the client's alone: ``create``, ``post`` and ``urllib3`` — what
:mod:`routing.providers.openai_chat` does for a native endpoint (:func:`~routing.providers.
openai_chat.native_route`, the watched ``urllib3`` pool of :mod:`routing.providers.transport`) —
CPU ms per call, best of 3 rounds, and each against ``create``. Same-machine, same-run figures
only.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx2  # noqa: E402
from openai.types.responses import Response  # noqa: E402

from routing.providers import CompletionRequest, Message  # noqa: E402
from routing.providers._openai_common import INFERENCE_OPTIONS, openai_sdk_client  # noqa: E402
from routing.providers.openai_chat import CHAT_PATH, _post_native, build_chat_kwargs, native_route  # noqa: E402
from routing.providers.openai_responses import RESPONSES_PATH, build_responses_kwargs  # noqa: E402
from routing.simulated import FakeUpstreams  # noqa: E402
from tests.routing.conftest import MODELS, make_endpoint, second_turn  # noqa: E402


def two_ways(endpoint, request: CompletionRequest) -> dict[str, Callable[[], object]]:
    """``{"create": …, "post": …}``: the same call through the SDK's ``create`` and its ``post``."""
    client = openai_sdk_client(endpoint)
    if endpoint.api_style == "chat_completions":
        body = build_chat_kwargs(endpoint, request)
        return {
            "create": lambda: client.chat.completions.create(**body),
            "post": lambda: client.post(
                CHAT_PATH, body=body, cast_to=httpx2.Response, options=INFERENCE_OPTIONS
            ).json(),
        }
    body = build_responses_kwargs(endpoint, request)
    return {
        "create": lambda: client.responses.create(**body),
        "post": lambda: client.post(RESPONSES_PATH, body=body, cast_to=Response, options=INFERENCE_OPTIONS),
    }


def native_cpu(fake: FakeUpstreams, calls: int) -> None:
    """The native call three ways against the instant upstream (own process): CPU ms per call."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_proxy import start_upstream
    from benchlib import Processes

    with tempfile.TemporaryDirectory() as logs, Processes(Path(logs)) as procs:
        upstream = start_upstream(procs)
        endpoint = make_endpoint(fake, "native", base_url=f"{upstream}/v1")
        request = CompletionRequest(messages=(Message("user", "hi"),))
        body = build_chat_kwargs(endpoint, request)
        client = openai_sdk_client(endpoint)
        route = native_route(endpoint)
        ways = {
            "create": lambda: client.chat.completions.create(**body),
            "post": lambda: client.post(
                CHAT_PATH, body=body, cast_to=httpx2.Response, options=INFERENCE_OPTIONS
            ).json(),
            "urllib3": lambda: _post_native(route, endpoint, body),
        }
        best = dict.fromkeys(ways, float("inf"))
        for call in ways.values():
            for _ in range(200):  # warm-up
                call()
        for _ in range(3):
            for way, call in ways.items():
                started = time.process_time()
                for _ in range(calls):
                    call()
                best[way] = min(best[way], (time.process_time() - started) / calls * 1000)
        print(
            f"\nnative chat against the instant upstream (pid {os.getpid()} CPU ms per call, best of 3 × {calls}):"
        )
        for way, ms in best.items():
            print(f"  {way:<8}{ms:7.3f} ms  ({ms / best['create']:.2f}× create)")


def ms_per_call(call, n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - started) / n * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="timed calls per way and round")
    args = parser.parse_args()
    fake = FakeUpstreams(models=list(MODELS.values()))
    fake.start()
    try:
        print(f"{'endpoint':<18}{'create ms':>11}{'post ms':>10}{'post/create':>13}")
        for name in ("native", "openai_responses", "azure_dated", "azure_v1"):
            endpoint = make_endpoint(fake, name)
            request = second_turn(fake, endpoint, reasoning=endpoint.api_style == "responses")
            totals = dict.fromkeys(("create", "post"), 0.0)
            ways = two_ways(endpoint, request)
            for call in ways.values():
                ms_per_call(call, 100)  # warm-up
            for _ in range(2):
                for way, call in ways.items():
                    totals[way] += ms_per_call(call, args.calls) / 2
            print(
                f"{name:<18}{totals['create']:>11.2f}{totals['post']:>10.2f}"
                f"{totals['post'] / totals['create']:>12.2f}×"
            )
        native_cpu(fake, args.calls)
    finally:
        fake.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
