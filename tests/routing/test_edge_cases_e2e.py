"""Streams, drop-ins and cost against the real APIs' edge cases, end to end.

Live server + a real Celery worker + simulated upstreams that send exact scripted wire bytes,
driven through the official ``openai`` and ``anthropic`` SDKs. Streamed calls run in the worker
and travel through Redis (the cancel flag too). Run on PostgreSQL in CI.
"""

from __future__ import annotations

import re
import time
from decimal import Decimal

import anthropic
import httpx
import openai
import pytest

from muse_experiments.infra.config_version import bump
from routing.catalogue import AVOCADO_VERSIONS, avocado_id
from routing.models import Attempt, CallRecord, CompletionJob, ModelEndpoint
from tests.conftest import wait_for_records_written
from tests.factories import api_key, seed_catalogue
from tests.wire import anthropic_stream, chat_text_stream, responses_failed_body, responses_failed_stream

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DEFAULT = avocado_id(AVOCADO_VERSIONS)
DEFAULT_MODEL = f"avocado-v{AVOCADO_VERSIONS}"


@pytest.fixture
def platform(live_server, upstreams, celery_worker_process):
    seed_catalogue(upstreams.url)
    return live_server.url, api_key(["completions"]), upstreams


def openai_client(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def wait_for(predicate, timeout_s: float = 15.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def single_slot(upstreams) -> None:
    """The default model takes one call at a time (``max_concurrency=1``)."""
    ModelEndpoint.objects.filter(public_id=DEFAULT).update(max_concurrency=1)
    bump()


def one_slot_slow_stream_first(upstreams) -> None:
    """One call at a time on the default model; its first call streams 30 words 200 ms apart,
    later calls answer "second caller served" at once."""
    single_slot(upstreams)
    upstreams.set_scenario(
        DEFAULT_MODEL,
        wire=chat_text_stream(DEFAULT_MODEL, [f"w{i} " for i in range(30)], delay_ms=200),
        wire_first_n=1,
        reply="second caller served",
    )


def read_then_hang_up(client: openai.OpenAI, frames: int) -> float:
    """Stream ``muse-default``, read ``frames`` chunks, close the connection; returns when (epoch s)."""
    stream = client.chat.completions.create(
        model="muse-default", messages=[{"role": "user", "content": "count to thirty"}], stream=True
    )
    it = iter(stream)
    for _ in range(frames):
        next(it)
    stream.close()
    return time.time()


def test_a_streaming_caller_that_goes_away_closes_the_upstream_and_is_billed_for_what_it_got(platform):
    url, key, upstreams = platform
    upstreams.set_scenario(
        DEFAULT_MODEL, wire=chat_text_stream(DEFAULT_MODEL, [f"w{i} " for i in range(30)], delay_ms=200)
    )
    gone_at = read_then_hang_up(openai_client(url, key), frames=4)

    call = wait_for(
        lambda: (
            "client_closed_at" in upstreams.calls(model=DEFAULT_MODEL)[0]
            and upstreams.calls(model=DEFAULT_MODEL)[0]
        ),
        what="the upstream stream to close",
    )
    assert call["client_closed_at"] - gone_at < 1.0
    assert call["frames_sent"] < 15  # not all 34 frames: nobody was reading them
    job = wait_for(
        lambda: CompletionJob.objects.filter(status="cancelled").first(), what="the job to end cancelled"
    )
    record = CallRecord.objects.get(job=job)
    assert (record.status, record.error_kind, record.served_endpoint) == (
        "cancelled",
        "client_disconnected",
        DEFAULT,
    )
    assert 3 <= record.output_tokens < 30 and record.input_tokens > 0
    # $0.10 / M input, $0.40 / M output
    assert (
        record.cost_usd
        == (Decimal(record.input_tokens) * Decimal("0.10") + Decimal(record.output_tokens) * Decimal("0.40"))
        / 10**6
    )
    [attempt] = Attempt.objects.filter(call=record)
    assert (attempt.outcome, attempt.output_tokens, attempt.cost_usd) == (
        "client_disconnected",
        record.output_tokens,
        record.cost_usd,
    )


def test_a_cancelled_call_frees_its_concurrency_slot_at_once(platform):
    url, key, upstreams = platform
    one_slot_slow_stream_first(upstreams)
    client = openai_client(url, key)
    gone_at = read_then_hang_up(client, frames=4)
    time.sleep(max(0.0, gone_at + 1.0 - time.time()))

    second = client.chat.completions.with_raw_response.create(
        model="muse-default", messages=[{"role": "user", "content": "hi"}]
    )
    assert second.headers["x-muse-served-model"] == DEFAULT
    assert second.parse().choices[0].message.content == "second caller served"


def test_anthropic_stream_usage_snapshots_are_merged_and_the_call_costs_what_was_billed(platform):
    url, key, upstreams = platform
    upstreams.set_scenario(
        "claude-sonnet-5-5",
        wire=anthropic_stream(
            "claude-sonnet-5-5",
            start_usage={
                "input_tokens": 20,
                "cache_creation_input_tokens": 10_000,
                "cache_read_input_tokens": 0,
                "output_tokens": 1,
            },
            delta_usage={"input_tokens": 20, "output_tokens": 500},
        ),
    )
    client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)
    with client.messages.stream(
        model="anthropic/claude-sonnet-5-5", max_tokens=1000, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        final = stream.get_final_message()
    assert (final.usage.cache_creation_input_tokens, final.usage.output_tokens, final.usage.input_tokens) == (
        10_000,
        500,
        20,
    )
    assert final.model == "anthropic/claude-sonnet-5-5"
    wait_for_records_written()
    record = wait_for(lambda: CallRecord.objects.first(), what="the call record")
    assert (record.cache_write_tokens, record.output_tokens, record.input_tokens) == (10_000, 500, 10_020)
    # 20 x $3 + 10,000 x $3.75 + 500 x $15 per million
    assert record.cost_usd == Decimal("0.04506")


def test_a_one_hour_cache_write_costs_the_one_hour_price_and_reaches_the_client_split(platform):
    """The same usage as above, written with a 1-hour TTL: was priced at the 5-minute rate
    ($0.04506); Claude's 1-hour writes cost 2x input, $6 per million here. Streamed and not; the
    non-streamed answer tells the client the split (a stream's ``message_delta`` has no field
    for it)."""
    url, key, upstreams = platform
    written = {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 10_000}
    usage = {"input_tokens": 20, "cache_creation_input_tokens": 10_000, "cache_creation": written,
             "cache_read_input_tokens": 0, "output_tokens": 500}  # fmt: skip
    body = {"id": "msg_wire", "type": "message", "role": "assistant", "model": "claude-sonnet-5-5",
            "content": [{"type": "text", "text": "Hello"}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": usage}  # fmt: skip
    upstreams.set_scenario(
        "claude-sonnet-5-5",
        wire=anthropic_stream(
            "claude-sonnet-5-5",
            start_usage={**usage, "output_tokens": 1},
            delta_usage={"input_tokens": 20, "output_tokens": 500},
        ),
        wire_body=body,
    )
    client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)
    ask = {
        "model": "anthropic/claude-sonnet-5-5",
        "max_tokens": 1000,
        "messages": [{"role": "user", "content": "hi"}],
    }
    with client.messages.stream(**ask) as stream:
        assert stream.get_final_message().usage.cache_creation_input_tokens == 10_000
    whole = client.messages.create(**ask)
    assert whole.usage.cache_creation.model_dump() == written
    wait_for_records_written()
    records = wait_for(
        lambda: len(CallRecord.objects.all()) == 2 and CallRecord.objects.all(), what="records"
    )
    # 20 x $3 + 10,000 x $6 + 500 x $15 per million
    assert [r.cost_usd for r in records] == [Decimal("0.06756")] * 2
    assert [a.cost_usd for a in Attempt.objects.all()] == [Decimal("0.06756")] * 2


def test_every_failed_responses_attempt_is_recorded_and_summed_into_the_call_cost(platform):
    url, key, upstreams = platform
    upstreams.set_scenario(  # a failed response, streamed (no Redis) or not (Redis: drop-ins call non-streamed)
        "muse-special",
        wire=responses_failed_stream("muse-special", input_tokens=1200, output_tokens=40),
        wire_body=responses_failed_body("muse-special", input_tokens=1200, output_tokens=40),
    )
    with pytest.raises(openai.APIStatusError):
        openai_client(url, key).responses.create(model="azure/muse-special", input="hi")
    wait_for_records_written()
    record = CallRecord.objects.get()
    attempts = list(Attempt.objects.filter(call=record))
    assert [(a.input_tokens, a.output_tokens, a.cost_usd) for a in attempts] == [
        (1200, 40, Decimal("0.0019"))
    ] * 3
    assert (record.status, record.input_tokens, record.output_tokens) == ("failed", 3600, 120)
    assert record.cost_usd == Decimal("0.0057")  # 3 x (1,200 x $1.25 + 40 x $10) per million


# -- NUL characters (PostgreSQL cannot store U+0000) ----------------------------------------------


def test_client_input_with_a_nul_is_refused_naming_the_field(platform, postgres):
    url, key, upstreams = platform
    http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    body = {"session_id": "s", "user_id": "u", "messages": [{"role": "user", "content": "hi"}]}
    r = http.post("/api/v1/completions", json={**body, "attributes": {"plan": "pro\u0000"}})
    assert r.status_code == 400 and list(r.json()["error"]["fields"]) == ["attributes.plan"]
    r = http.post("/api/v1/completions", json={**body, "attributes": {"sub\u0000agent": "x\u0000"}})
    assert r.status_code == 400 and list(r.json()["error"]["fields"]) == ["attributes.sub\\u0000agent"]

    client = openai_client(url, key)
    history = [
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": '{"path": "a\\u0000b"}'}}
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    ]  # fmt: skip
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="muse-default", messages=history)
    assert err.value.body["param"] == "messages[1].tool_calls[0].function.arguments.path"
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="muse-default", messages=[{"role": "user", "content": "bytes: \u0000\u0001"}], stream=True
        )
    assert err.value.body["param"] == "messages[0].content"
    assert CompletionJob.objects.count() == 0 and upstreams.call_count() == 0
    http.close()


def test_provider_output_with_a_nul_is_delivered_stored_escaped_and_the_call_recorded(platform, postgres):
    url, key, upstreams = platform
    upstreams.set_scenario(DEFAULT_MODEL, wire=chat_text_stream(DEFAULT_MODEL, ["col1\u0000", "col2"]))
    stream = openai_client(url, key).chat.completions.create(
        model="muse-default", messages=[{"role": "user", "content": "table"}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "col1\u0000col2"
    job = wait_for(lambda: CompletionJob.objects.filter(status="succeeded").first(), what="the job")
    assert job.result["text"] == "col1\u2400col2"  # NUL_ESCAPE, U+2400 SYMBOL FOR NULL
    record = CallRecord.objects.get(job=job)
    assert record.status == "succeeded" and record.output_tokens == 2 and record.cost_usd > 0


# -- Drop-ins: served model, foreign tool-call ids, prompt caching ----------------------------------


def test_streamed_and_non_streamed_drop_in_replies_name_the_served_model(platform):
    url, key, upstreams = platform
    client = openai_client(url, key)
    chunks = list(
        client.chat.completions.create(
            model="muse-default",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert {c.model for c in chunks} == {DEFAULT}
    assert (
        client.chat.completions.create(
            model="muse-default", messages=[{"role": "user", "content": "hi"}]
        ).model
        == DEFAULT
    )
    events = list(client.responses.create(model="muse-default", input="hi", stream=True))
    assert {e.response.model for e in events if hasattr(e, "response")} == {DEFAULT}
    with anthropic.Anthropic(base_url=url, api_key=key, max_retries=0).messages.stream(
        model="muse-default", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        assert stream.get_final_message().model == DEFAULT


def test_a_tool_call_id_minted_elsewhere_reaches_claude_in_a_form_it_accepts_on_every_turn(platform):
    url, key, upstreams = platform
    history = [
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "functions.get_weather:0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ]},
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "18C"},
    ]  # fmt: skip
    client = openai_client(url, key)
    for _ in range(2):  # two turns of one session
        reply = client.chat.completions.create(
            model="anthropic/claude-sonnet-5-5",
            messages=history,
            extra_headers={"X-Muse-Session-Id": "sess-ids"},
        )
        assert reply.choices[0].message.content
    sent = [call["body"]["messages"] for call in upstreams.calls(model="claude-sonnet-5-5")]
    ids = [(m[1]["content"][0]["id"], m[2]["content"][0]["tool_use_id"]) for m in sent]
    assert ids[0] == ids[1] and ids[0][0] == ids[0][1]
    assert re.fullmatch(r"[a-zA-Z0-9_-]+", ids[0][0])


def test_an_empty_assistant_turn_routed_to_claude_is_answered_not_refused(platform):
    """The issue's input through the chat drop-in: Anthropic refused its empty text block (400)."""
    url, key, upstreams = platform
    history = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "Weather in Bern?"},
    ]
    for model in ("anthropic/claude-sonnet-5-5", "azure/muse-special", "muse-default"):
        reply = openai_client(url, key).chat.completions.create(model=model, messages=history)
        assert reply.choices[0].message.content
    [call] = upstreams.calls(model="claude-sonnet-5-5")
    assert call["status"] == 200
    assert call["body"]["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "Weather in Bern?"}],
        }
    ]


def test_messages_drop_in_keeps_cache_breakpoints_and_the_call_shows_cache_reads(platform):
    url, key, upstreams = platform
    client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)
    system = [
        {"type": "text", "text": "You review code carefully. " * 300, "cache_control": {"type": "ephemeral"}}
    ]

    def ask(question: str):
        return client.messages.create(
            model="anthropic/claude-sonnet-5-5",
            max_tokens=200,
            system=system,
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "text", "text": question, "cache_control": {"type": "ephemeral"}}],
                }
            ],
        )

    first = ask("Review A.")
    body = upstreams.calls(model="claude-sonnet-5-5")[0]["body"]
    assert body["system"] == system
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "Review A.", "cache_control": {"type": "ephemeral"}}
    ]
    assert first.usage.cache_creation_input_tokens > 1000
    second = ask("Review A.")
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    wait_for_records_written()
    records = list(CallRecord.objects.order_by("created_at"))
    assert [r.cached_input_tokens for r in records] == [0, second.usage.cache_read_input_tokens]
    assert records[1].cost_usd < records[0].cost_usd  # cache reads are priced at $0.30/M, writes at $3.75/M


def test_a_non_streamed_call_is_cut_off_within_a_second_when_its_caller_goes_away(platform, redis_url):
    """With Redis a non-streamed drop-in call is ONE non-streamed upstream call; when its caller gives
    up, the worker's cancel watcher shuts that connection: closed within 1 s, the job cancelled with
    its attempt recorded, the slot free for the next caller, and no second upstream call."""
    url, key, upstreams = platform
    single_slot(upstreams)
    upstreams.set_scenario(DEFAULT_MODEL, latency_ms=30_000)
    impatient = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=1.5)
    with pytest.raises(openai.APITimeoutError):
        impatient.chat.completions.create(
            model="muse-default", messages=[{"role": "user", "content": "take your time, please"}]
        )
    gave_up_at = time.time()

    [call] = wait_for(
        lambda: [c for c in upstreams.calls(model=DEFAULT_MODEL) if c.get("client_closed_at")],
        what="the upstream call to close",
    )
    assert call["stream"] is False and call["status"] is None  # non-streamed, never answered
    assert call["client_closed_at"] - gave_up_at < 1.0
    job = wait_for(
        lambda: CompletionJob.objects.filter(status="cancelled").first(), what="the job to end cancelled"
    )
    assert job.error.startswith("client_disconnected")
    record = CallRecord.objects.get(job=job)
    assert (record.status, record.error_kind, record.served_endpoint) == (
        "cancelled",
        "client_disconnected",
        DEFAULT,
    )
    # the request had been sent: its input is billed, estimated (~4 characters a token); no output
    assert (record.input_tokens, record.output_tokens) == (len("take your time, please") // 4, 0)
    assert record.cost_usd == Decimal(record.input_tokens) * Decimal("0.10") / 10**6
    [attempt] = Attempt.objects.filter(call=record)
    assert (attempt.outcome, attempt.input_tokens, attempt.cost_usd) == (
        "client_disconnected",
        record.input_tokens,
        record.cost_usd,
    )

    upstreams.set_scenario(DEFAULT_MODEL, reply="second caller served")
    reply = openai_client(url, key).chat.completions.create(
        model="muse-default", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.model == DEFAULT and reply.choices[0].message.content == "second caller served"
    assert [c["status"] for c in upstreams.calls(model=DEFAULT_MODEL)] == [None, 200]


def test_calls_in_flight_when_a_kill_switch_flips_are_cut_off_not_left_to_finish(platform, redis_url):
    """Kill switch on the external providers while a non-streamed and a streamed call to them are
    in flight: the worker shuts both upstream connections within seconds (not when the upstream
    would have finished), the pinned calls end ``model_unavailable`` naming the kill, and each
    cut-off attempt is recorded ``killed``."""
    import threading

    from routing.ops_services import kill_switch_set

    url, key, upstreams = platform
    upstreams.set_scenario("muse-special", latency_ms=30_000)
    upstreams.set_scenario("claude-sonnet-5-5", chunk_delay_ms=400)
    errors: dict[str, BaseException] = {}

    def non_streamed() -> None:
        try:
            openai_client(url, key).chat.completions.create(
                model="azure/muse-special", messages=[{"role": "user", "content": "slow answer, please"}]
            )
        except BaseException as exc:  # noqa: BLE001 - inspected below
            errors["non_streamed"] = exc

    caller = threading.Thread(target=non_streamed)
    caller.start()
    ant = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)
    stream = ant.messages.create(
        model="anthropic/claude-sonnet-5-5", max_tokens=4000, stream=True,
        messages=[{"role": "user", "content": "count slowly to one hundred"}],
    )  # fmt: skip
    events = iter(stream)
    next(events)  # message_start: the stream is running
    wait_for(
        lambda: upstreams.calls(model="muse-special"), what="the non-streamed call to reach its upstream"
    )
    kill_switch_set(scope="all_external", active=True, reason="incident", actor="oncall")
    flipped_at = time.time()
    with pytest.raises(anthropic.APIError):
        for _ in events:  # the stream ends with an error event instead of running for ~40 s
            pass
    caller.join(30)
    assert isinstance(errors["non_streamed"], openai.InternalServerError), errors
    assert errors["non_streamed"].body["code"] == "model_unavailable"
    for model in ("muse-special", "claude-sonnet-5-5"):
        [call] = wait_for(
            lambda m=model: [c for c in upstreams.calls(model=m) if c.get("client_closed_at")],
            what=f"the {model} upstream call to be closed",
        )
        assert call["client_closed_at"] - flipped_at < 5.0  # config refresh 0.5 s + watcher 0.15 s, loaded CI
    wait_for_records_written()
    outcomes = sorted(Attempt.objects.values_list("outcome", flat=True))
    assert outcomes == ["killed", "killed"]
    assert sorted(CallRecord.objects.values_list("error_kind", flat=True)) == ["model_unavailable"] * 2
