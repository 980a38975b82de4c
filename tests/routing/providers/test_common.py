"""Types, cost arithmetic, error mapping helpers, secrets and the registry (no network)."""

from __future__ import annotations

import base64
import copy
import pickle
import random
import urllib.parse
from decimal import Decimal

import pytest

from routing.providers import (
    AuthFailed,
    ClientRequestError,
    CompletionRequest,
    CompletionResult,
    EndpointConfig,
    Message,
    ProviderRegistry,
    RateLimited,
    ReasoningState,
    Secret,
    StreamEvent,
    StreamFailed,
    ToolCall,
    ToolSpec,
    UpstreamUnavailable,
    Usage,
    compute_cost_usd,
    get_client,
)
from routing.providers.anthropic_messages import AnthropicMessagesClient, anthropic_usage
from routing.providers.base import ProviderClient
from routing.providers.errors import (
    WITHHELD,
    ProviderError,
    class_for_status,
    safe_error_type,
    safe_message,
    safe_upstream_message,
)
from routing.providers.openai_chat import OpenAIChatClient
from routing.providers.openai_responses import OpenAIResponsesClient
from routing.providers.reasoning import anchor_reasoning
from routing.providers.sdk_errors import parse_retry_after
from routing.providers.types import assistant_turn_digest, messages_from_openai


@pytest.fixture(autouse=True)
def _fresh_config_snapshots():
    """Django-free module: shadows the Django fixture of tests/conftest.py (runs with -p no:django)."""
    yield


def endpoint(**kw) -> EndpointConfig:
    base = {
        "public_id": "ep",
        "provider_kind": "openai",
        "base_url": "http://x/v1",
        "upstream_model": "gpt-4.1-mini",
        "api_style": "chat_completions",
        "credential": "sk-canary-XXXX",
    }
    base.update(kw)
    return EndpointConfig(**base)


# ---- Secret / EndpointConfig -------------------------------------------------------------------


def test_secret_never_reveals_itself():
    s = Secret("sk-canary-XXXX")
    assert "canary" not in repr(s) and "canary" not in str(s) and "canary" not in f"{s}"
    assert s.reveal() == "sk-canary-XXXX"
    assert s == Secret("sk-canary-XXXX") and s != Secret("other")
    assert len(s.fingerprint) == 16 and "canary" not in s.fingerprint
    with pytest.raises(TypeError):
        pickle.dumps(s)
    assert copy.deepcopy(s) is s


def test_endpoint_repr_masks_credential_and_coerces_prices():
    ep = endpoint(price_input_per_mtok=1.25, price_output_per_mtok="10")
    assert "sk-canary-XXXX" not in repr(ep)
    assert isinstance(ep.credential, Secret)
    assert ep.price_input_per_mtok == Decimal("1.25") and ep.price_output_per_mtok == Decimal("10")
    assert "sk-canary-XXXX" not in repr(copy.deepcopy(ep))


def test_endpoint_fingerprint_depends_on_endpoint_and_credential():
    a = endpoint()
    assert a.fingerprint == endpoint().fingerprint
    assert a.fingerprint != endpoint(credential="sk-other").fingerprint
    assert a.fingerprint != endpoint(upstream_model="gpt-4.1").fingerprint
    assert a.fingerprint != endpoint(base_url="http://y/v1").fingerprint


def test_endpoint_validation():
    with pytest.raises(ValueError):
        endpoint(provider_kind="bedrock")
    with pytest.raises(ValueError):
        endpoint(api_style="completions")


def test_upstream_model_kept_verbatim():
    assert endpoint(upstream_model="my.model_v1.2").upstream_model == "my.model_v1.2"


# ---- cost ------------------------------------------------------------------------------------------


def test_openai_cost_input_includes_cached():
    # 1000 input of which 400 cached; 200 output (incl. 50 reasoning).
    ep = endpoint(
        price_input_per_mtok="1.25", price_cached_input_per_mtok="0.125", price_output_per_mtok="10"
    )
    usage = Usage(input_tokens=1000, cached_input_tokens=400, output_tokens=200, reasoning_tokens=50)
    # 600*1.25 + 400*0.125 + 200*10 = 750 + 50 + 2000 = 2800 per 1e6
    assert compute_cost_usd(usage, ep) == Decimal("0.0028")


def test_anthropic_cost_input_excludes_cache():
    ep = endpoint(
        provider_kind="anthropic",
        api_style="messages",
        price_input_per_mtok="3",
        price_cached_input_per_mtok="0.30",
        price_cache_write_per_mtok="3.75",
        price_output_per_mtok="15",
    )

    class WireUsage:  # what the Anthropic API reports
        input_tokens = 500
        cache_read_input_tokens = 300
        cache_creation_input_tokens = 200
        output_tokens = 100
        output_tokens_details = None

    usage = anthropic_usage(WireUsage())
    assert (usage.input_tokens, usage.cached_input_tokens, usage.cache_write_tokens) == (1000, 300, 200)
    assert usage.vendor["input_tokens"] == 500
    # 500*3 + 300*0.30 + 200*3.75 + 100*15 = 1500 + 90 + 750 + 1500 = 3840 per 1e6
    assert compute_cost_usd(usage, ep) == Decimal("0.00384")


def test_cost_missing_cache_prices_fall_back_to_input_price():
    ep = endpoint(price_input_per_mtok="2", price_output_per_mtok="0")
    usage = Usage(input_tokens=100, cached_input_tokens=50, cache_write_tokens=10)
    assert compute_cost_usd(usage, ep) == Decimal("0.0002")


# ---- request / result ------------------------------------------------------------------------------


def test_allowed_tools_filter_and_system_text():
    tools = (ToolSpec("a"), ToolSpec("b"), ToolSpec("c"))
    req = CompletionRequest(
        messages=(Message("system", "S1"), Message("user", "u"), Message("system", "S2")),
        tools=tools,
        allowed_tools=("c", "a"),
    )
    assert [t.name for t in req.effective_tools()] == ["a", "c"]
    assert req.system_text() == "S1\n\nS2"
    assert CompletionRequest(messages=(), tools=tools).effective_tools() == tools


def test_message_validation():
    with pytest.raises(ValueError):
        Message("tool", "x")
    with pytest.raises(ValueError):
        Message("robot", "x")


def test_messages_from_openai():
    msgs = messages_from_openai(
        [
            {"role": "developer", "content": "sys"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ]
    )
    assert [m.role for m in msgs] == ["system", "user", "assistant", "tool"]
    assert msgs[2].tool_calls == (ToolCall("c1", "f", {"x": 1}),)


def _result(state=None) -> CompletionResult:
    return CompletionResult(
        text="hello",
        tool_calls=(ToolCall("c1", "f", {"a": 1}),),
        finish_reason="tool_calls",
        usage=Usage(input_tokens=3, output_tokens=4),
        cost_usd=Decimal("0.000012"),
        latency_ms=12.3456,
        upstream_request_id="req_1",
        endpoint_id="ep",
        upstream_model="m",
        reasoning_state=state,
    )


def test_public_dict_and_repr_exclude_reasoning_state():
    state = ReasoningState(
        "fp", "openai", "responses", ({"type": "reasoning", "encrypted_content": "gAAAAAsecret"},)
    )
    res = _result(state)
    public = res.to_public_dict()
    assert "reasoning_state" not in public
    assert (
        "gAAAAAsecret" not in str(public)
        and "gAAAAAsecret" not in repr(res)
        and "gAAAAAsecret" not in repr(state)
    )
    assert public["cost_usd"] == "0.000012"
    assert public["tool_calls"] == [{"id": "c1", "name": "f", "arguments": {"a": 1}}]
    done = StreamEvent(kind="done", result=res)
    assert "gAAAAAsecret" not in str(done.to_public_dict()) and "gAAAAAsecret" not in repr(done)


def test_stream_error_event_public_dict():
    err = StreamFailed("boom", after_content=True, cause_class="UpstreamUnavailable")
    assert StreamEvent(kind="error", error=err).to_public_dict() == {
        "type": "error",
        "error": {"class": "StreamFailed", "message": "boom", "retryable": False, "after_content": True},
    }


def _turn_state(n, history, text="", calls=()):
    return ReasoningState(
        "fp", "openai", "responses", ({"n": n},), turn_digest=assistant_turn_digest(history, text, calls)
    )


def test_anchor_reasoning_binds_each_state_to_the_turn_that_produced_it():
    a = (ToolCall("t1", "f", {"city": "Bern"}),)
    b = (ToolCall("t2", "f", {"city": "Berlin"}),)
    msgs = [Message("user", "u1")]
    s1 = _turn_state(1, msgs, "", a)
    msgs += [Message("assistant", "", tool_calls=a), Message("tool", "r1", tool_call_id="t1")]
    s2 = _turn_state(2, msgs, "It is sunny.")
    msgs += [Message("assistant", "It is sunny."), Message("user", "And Berlin?")]
    s3 = _turn_state(3, msgs, "", b)
    msgs += [Message("assistant", "", tool_calls=b), Message("tool", "r2", tool_call_id="t2")]
    anchored = anchor_reasoning(CompletionRequest(messages=tuple(msgs)), [s1, s2, s3])
    # the text-only turn keeps its own reasoning; nothing lands on the latest turn but its own
    assert anchored == {1: [s1], 3: [s2], 5: [s3]}


def test_anchor_reasoning_drops_what_no_longer_matches_and_never_moves_it():
    a = (ToolCall("t1", "f", {"city": "Bern"}),)
    msgs = [Message("user", "u1")]
    s1 = _turn_state(1, msgs, "", a)
    msgs += [Message("assistant", "", tool_calls=a), Message("tool", "r1", tool_call_id="t1")]
    s2 = _turn_state(2, msgs, "Sunny.")
    edited = [*msgs, Message("assistant", "Sunny, 20 degrees."), Message("user", "thanks")]
    assert anchor_reasoning(CompletionRequest(messages=tuple(edited)), [s1, s2]) == {1: [s1]}
    # the client dropped the first exchange: turn 2's history differs, so both states go
    dropped = [Message("user", "u1"), Message("assistant", "Sunny."), Message("user", "thanks")]
    assert anchor_reasoning(CompletionRequest(messages=tuple(dropped)), [s1, s2]) == {}
    # identical turns at different places stay apart (the digest chains the history)
    same = [Message("user", "hi"), Message("assistant", "OK."), Message("user", "hi")]
    s_first = _turn_state(1, same[:1], "OK.")
    s_second = _turn_state(2, same, "OK.")
    again = CompletionRequest(messages=(*same, Message("assistant", "OK."), Message("user", "go")))
    assert anchor_reasoning(again, [s_first, s_second]) == {1: [s_first], 3: [s_second]}
    assert anchor_reasoning(again, [s_second]) == {3: [s_second]}


def test_anchor_reasoning_without_digest_uses_tool_call_ids_and_drops_the_rest():
    msgs = (
        Message("user", "u1"),
        Message("assistant", "", tool_calls=(ToolCall("t1", "f", {}),)),
        Message("tool", "r1", tool_call_id="t1"),
        Message("assistant", "", tool_calls=(ToolCall("t2", "f", {}),)),
        Message("tool", "r2", tool_call_id="t2"),
    )
    s1 = ReasoningState("fp", "openai", "responses", ({"n": 1},), tool_call_ids=("t1",))
    s2 = ReasoningState("fp", "openai", "responses", ({"n": 2},), tool_call_ids=("zzz",))
    assert anchor_reasoning(CompletionRequest(messages=msgs), [s1, s2]) == {1: [s1]}


# ---- errors ---------------------------------------------------------------------------------------


def test_safe_message_redacts_keys():
    msg = "Incorrect API key provided: sk-can*******XXXX. also sk-canary-XXXX and sk-proj-abcdef123"
    out = safe_message(msg, ["sk-canary-XXXX"])
    assert "XXXX" not in out and "abcdef123" not in out and "canary" not in out


CREDENTIAL = "demo-azure-0123456789abcdef"


@pytest.mark.parametrize(
    ("text", "gone", "kept"),
    [
        (f"the key {CREDENTIAL} is over quota", ["0123456789"], "the key [redacted] is over quota"),
        (f"key {CREDENTIAL[:-4]}**** wrong", ["0123456789"], None),  # masked: without its last 4
        (f"partial {CREDENTIAL[5:17]} shown", ["azure-012345"], "partial [redacted] shown"),
        ("bad api-key=demo-azure-LEAKCANARY here", ["LEAKCANARY"], "bad api-key=[redacted] here"),
        ("header x-api-key: abcdef123456", ["abcdef123456"], "header x-api-key: [redacted]"),
        ('{"api_key": "hunter2hunter2"}', ["hunter2"], '{"api_key": "[redacted]"}'),
        ("Authorization: Bearer eyJhbGciOi.abc.def", ["eyJhbGciOi"], "Authorization: [redacted]"),
        ("sent Bearer eyJhbGciOi.abc.def", ["eyJhbGciOi"], "sent Bearer [redacted]"),
        ("key sk-proj-abcdef123 and sk-ant-api03-xyz9", ["abcdef123", "xyz9"], None),
        ("Item with id 'rs_68a1b2c3d4e5f6a7' not found.", ["rs_68a1b2c3d4e5f6a7"], None),
        ("short gAAAAAB run", ["gAAAAA"], "short [redacted] run"),
        (f"key {CREDENTIAL.upper()} refused", ["0123456789"], "key [redacted] refused"),
        (f"key={urllib.parse.quote(CREDENTIAL, safe='')}", ["azure"], None),
        (f"echo {base64.b64encode(CREDENTIAL.encode()).decode()}", ["ZGVtby1henVyZS"], None),
        (f"hex {CREDENTIAL.encode().hex()}", [CREDENTIAL.encode().hex()[:20]], "hex [redacted]"),
        (f"reversed {CREDENTIAL[::-1]}", ["9876543210"], "reversed [redacted]"),
        ("Item with id 'RS_68A1B2C3D4E5F6A7' not found.", ["68A1B2C3D4E5F6A7"], None),
    ],
)
def test_safe_upstream_message_redacts_credentials_and_secret_like_text(text, gone, kept):
    out = safe_upstream_message(text, [CREDENTIAL])
    assert not [g for g in gone if g in out], out
    assert kept is None or out == kept
    assert safe_upstream_message(out, [CREDENTIAL]) == out  # idempotent


@pytest.mark.parametrize(
    "text",
    [
        "upstream boom encrypted_content=gAAAAABnCANARYCANARYCANARYCANARYCANARY12345 api-key=x",
        'bad item {"type": "reasoning", "encrypted_content": "c2VjcmV0IHJlYXNvbmluZyBibG9i"}',
        "thinking block rejected: signature=EqQBCkgIARABGAIiQJtrs6pEB5yGnbSVwZ",
        "redacted_thinking blocks cannot be modified",
        # a bare signature-like blob (300 random bytes, base64), no marker word near it
        "invalid block " + base64.b64encode(random.Random(7).randbytes(300)).decode(),
    ],
)
def test_safe_upstream_message_withholds_text_holding_encrypted_reasoning(text):
    assert safe_upstream_message(text) == WITHHELD


def test_safe_upstream_message_keeps_ordinary_errors_and_caps_the_length():
    text = "Rate limit reached for o4-mini in organization org-abc on tokens per min (TPM): Limit 30000"
    assert safe_upstream_message(text, [CREDENTIAL]) == text
    assert safe_upstream_message("risk-assessment failed: task-force") == "risk-assessment failed: task-force"
    out = safe_upstream_message("x" * 495 + CREDENTIAL, [CREDENTIAL])
    assert out == "x" * 495  # no half "[redacted]" either
    out = safe_upstream_message("x" * 495 + CREDENTIAL[:6], [CREDENTIAL[:6] + "0123456789"])
    assert len(out) <= 500 and "demo" not in out and out.endswith("[redacted]")  # a key cut off
    assert len(safe_upstream_message("y" * 10_000)) == 500


def test_every_provider_error_message_is_sanitised_and_keeps_type_and_status():
    err = ProviderError(
        "upstream said api-key=abc123secret and encrypted_content=gAAAAABnCANARYCANARYCANARY12345",
        status_code=400,
        error_type="invalid_request_error",
    )
    assert err.message == str(err) == WITHHELD
    assert (err.status_code, err.error_type) == (400, "invalid_request_error")
    assert safe_error_type("rate_limit_exceeded") == "rate_limit_exceeded"
    assert safe_error_type("sk-live-abcdef0123") is None and safe_error_type("a b") is None


@pytest.mark.parametrize(
    ("status", "etype", "cls"),
    [
        (429, None, RateLimited),
        (401, None, AuthFailed),
        (403, None, AuthFailed),
        (400, None, ClientRequestError),
        (404, None, ClientRequestError),
        (500, None, UpstreamUnavailable),
        (503, None, UpstreamUnavailable),
        (529, "overloaded_error", UpstreamUnavailable),
    ],
)
def test_class_for_status(status, etype, cls):
    assert class_for_status(status, etype) is cls


def test_retryability_flags():
    assert RateLimited("x").retryable and UpstreamUnavailable("x").retryable
    assert not AuthFailed("x").retryable and not ClientRequestError("x").retryable
    assert StreamFailed("x", after_content=False).retryable
    assert not StreamFailed("x", after_content=True).retryable
    assert not StreamFailed("x", after_content=False, retryable=False).retryable


def test_parse_retry_after():
    assert parse_retry_after({"retry-after": "7"}) == 7.0
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "garbage"}) is None


# ---- registry -------------------------------------------------------------------------------------


class DummyClient(ProviderClient):
    api_styles = frozenset({"chat_completions"})


def test_registry_defaults():
    assert get_client("native") is OpenAIChatClient
    assert get_client("openai") is OpenAIChatClient
    assert get_client("openai", "responses") is OpenAIResponsesClient
    assert get_client("azure_openai") is OpenAIResponsesClient
    assert get_client("azure_openai", "chat_completions") is OpenAIChatClient
    assert get_client("anthropic") is AnthropicMessagesClient
    with pytest.raises(KeyError):
        get_client("bedrock")


def test_registry_overrides_and_bad_paths():
    assert get_client("native", overrides={"native": f"{__name__}.DummyClient"}) is DummyClient
    registry = ProviderRegistry({"native:chat_completions": f"{__name__}.DummyClient"})
    ep = endpoint(provider_kind="native")
    assert isinstance(registry.client_for(ep), DummyClient)
    assert registry.client_for(ep) is registry.client_for(ep)
    with pytest.raises(ImportError):
        ProviderRegistry({"native": "routing.providers.nope.Client"}).get_client("native")
    with pytest.raises(TypeError):
        ProviderRegistry({"native": "decimal.Decimal"}).get_client("native")


def test_client_rejects_wrong_api_style():
    with pytest.raises(ValueError):
        OpenAIChatClient().complete(endpoint(api_style="responses"), CompletionRequest(messages=()))
