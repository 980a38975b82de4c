"""Generated multi-turn sessions: reasoning replayed on the turn that produced it, on every path.

A seeded generator plans sessions of 2-10 turns mixing text answers, single tool calls, parallel
tool calls and tool rounds right after tool results. Each session runs against one reasoning
model (Azure over the Responses API, or Claude over Messages) through one client path -- the REST
API (sync and streamed turns) or a drop-in driven by the official SDK (``/v1/chat/completions``,
``/v1/responses``, ``/v1/messages``, streamed turns included) -- with a live server and a real
Celery worker. The simulated upstreams enforce the real placement rules
(:func:`routing.simulated.reasoning.misplaced_reasoning`), so a misplaced item fails the
turn; on top, every upstream request is checked: turn j's reasoning stands, byte-exact, right
before turn j's own content and nowhere else, in the original order.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

import anthropic
import httpx
import openai
import pytest

from muse_experiments.experiments.models import ForcedAssignment
from muse_experiments.infra import config_version
from tests.factories import api_key, make_experiment, seed_catalogue

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

AZURE = ("azure/muse-special", "muse-special")
CLAUDE = ("anthropic/claude-sonnet-5-5", "claude-sonnet-5-5")
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CLOCK = {
    "name": "get_time",
    "description": "Time in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
#: Scenario ``tool_calls`` per planned turn kind (``chain`` modes call tools after tool results too).
MODES = {"text": "never", "tool": "chain", "parallel": "chain_parallel"}


@dataclass(frozen=True)
class Plan:
    """One generated session: turn kinds and whether each turn is streamed."""

    kinds: tuple[str, ...]
    streamed: tuple[bool, ...]


def plan(seed: int) -> Plan:
    """2-10 turns; each ``text`` | ``tool`` | ``parallel``; at least one text and one tool turn."""
    rng = random.Random(seed)
    n = rng.randint(2, 10)
    kinds = [rng.choice(("text", "tool", "parallel")) for _ in range(n)]
    kinds[rng.randrange(n)] = "text"
    kinds[rng.choice([i for i in range(n) if kinds[i] == "text"]) - 1] = rng.choice(("tool", "parallel"))
    return Plan(tuple(kinds), tuple(rng.random() < 0.5 for _ in range(n)))


# ---- what the fake issued ------------------------------------------------------------------


def issued(call: dict) -> list[dict]:
    """Reasoning items/blocks the fake sent in one recorded response (plain or streamed)."""
    if call.get("response_body"):
        body = json.loads(call["response_body"])
        if "content" in body:
            return [b for b in body["content"] if b["type"] in ("thinking", "redacted_thinking")]
        return [i for i in body["output"] if i["type"] == "reasoning"]
    events = [
        json.loads(line[6:])
        for chunk in call["stream_events"]
        for line in chunk.splitlines()
        if line.startswith("data: ")
    ]
    done = [e for e in events if e.get("type") == "response.completed"]
    if done:
        return [i for i in done[0]["response"]["output"] if i["type"] == "reasoning"]
    blocks: dict[int, dict] = {}
    for e in events:
        if e.get("type") == "content_block_start":
            blocks[e["index"]] = dict(e["content_block"])
        elif e.get("type") == "content_block_delta":
            d = e["delta"]
            if d["type"] == "thinking_delta":
                blocks[e["index"]]["thinking"] += d["thinking"]
            elif d["type"] == "signature_delta":
                blocks[e["index"]]["signature"] += d["signature"]
    return [b for _, b in sorted(blocks.items()) if b["type"] in ("thinking", "redacted_thinking")]


def assert_replayed_in_place(calls: list[dict], model: str) -> None:
    """Every upstream request carries turn j's reasoning right before turn j's content, in order."""
    assert [c["outcome"] for c in calls] == ["ok"] * len(calls)  # the fake enforced placement too
    reasoning = [issued(c) for c in calls]
    assert all(reasoning), "every turn should have produced reasoning"
    for n, call in enumerate(calls):
        if model == CLAUDE[1]:
            assistants = [m["content"] for m in call["body"]["messages"] if m["role"] == "assistant"]
            assert len(assistants) == n
            for j, content in enumerate(assistants):
                k = len(reasoning[j])
                assert content[:k] == reasoning[j], f"request {n}: turn {j}'s thinking not first in turn {j}"
                assert all(b["type"] not in ("thinking", "redacted_thinking") for b in content[k:])
                for blob in (b.get("signature") or b.get("data") for b in reasoning[j]):
                    assert blob in call["raw_body"]  # byte-exact on the wire
        else:
            items = call["body"]["input"]
            sent = [i for i in items if i.get("type") == "reasoning"]
            assert sent == [item for r in reasoning[:n] for item in r]

            # each assistant turn (a run of assistant message / function_call items) right after
            # a reasoning item: none was moved off its turn (the counts above say none is missing)
            def turn_item(i: dict) -> bool:
                return i.get("type") == "function_call" or i.get("role") == "assistant"

            starts = [
                p for p, i in enumerate(items) if turn_item(i) and (p == 0 or not turn_item(items[p - 1]))
            ]
            assert len(starts) == n
            assert all(items[p - 1].get("type") == "reasoning" for p in starts), f"request {n}"


# ---- client paths --------------------------------------------------------------------------


class RestPath:
    """``POST /api/v1/completions`` (neutral messages), sync or ``stream=true``."""

    def __init__(self, url: str, key: str, session_id: str) -> None:
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        self.session_id = session_id
        self.messages: list[dict] = [{"role": "user", "content": "Weather in Bern?"}]

    def turn(self, streamed: bool) -> tuple[str, list[dict]]:
        body = {
            "session_id": self.session_id,
            "user_id": "u-gen",
            "messages": self.messages,
            "tools": [WEATHER, CLOCK],
            "stream": streamed,
        }
        response = self.http.post("/api/v1/completions", json=body)
        assert response.status_code == 200, response.text
        if streamed:
            events = [json.loads(x[6:]) for x in response.text.splitlines() if x.startswith("data: ")]
            assert events[-1]["type"] == "done", events[-1]
            result = events[-1]["result"]
        else:
            assert response.json()["status"] == "succeeded", response.text
            result = response.json()["result"]
        calls = [
            {"id": c["id"], "name": c["name"], "arguments": c["arguments"]} for c in result["tool_calls"]
        ]
        self.messages.append({"role": "assistant", "content": result["text"], "tool_calls": calls})
        return result["text"], calls

    def tool_results(self, calls: list[dict]) -> None:
        self.messages += [
            {"role": "tool", "tool_call_id": c["id"], "content": '{"temp_c": 21}'} for c in calls
        ]

    def close(self) -> None:
        self.http.close()
        sdk = getattr(self, "sdk", None)
        if sdk is not None:
            sdk.close()

    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})


class ChatPath(RestPath):
    """``/v1/chat/completions`` through the ``openai`` SDK."""

    def __init__(self, url: str, key: str, session_id: str, model: str) -> None:
        super().__init__(url, key, session_id)
        self.model = model
        self.sdk = openai.OpenAI(
            base_url=f"{url}/v1",
            api_key=key,
            max_retries=0,
            default_headers={"X-Muse-Session-Id": session_id},
        )

    def turn(self, streamed: bool) -> tuple[str, list[dict]]:
        tools = [{"type": "function", "function": t} for t in (WEATHER, CLOCK)]
        if streamed:
            text, parts = "", {}
            for chunk in self.sdk.chat.completions.create(
                model=self.model, messages=self.messages, tools=tools, stream=True
            ):
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    for d in choice.delta.tool_calls or ():
                        part = parts.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
                        part["id"] = d.id or part["id"]
                        part["name"] = (d.function.name if d.function else None) or part["name"]
                        part["arguments"] += (d.function.arguments if d.function else None) or ""
            raw_calls = [parts[i] for i in sorted(parts)]
        else:
            message = self.sdk.chat.completions.create(model=self.model, messages=self.messages, tools=tools)
            text = message.choices[0].message.content or ""
            raw_calls = [
                {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                for c in message.choices[0].message.tool_calls or ()
            ]
        entry: dict = {"role": "assistant", "content": text or None}
        if raw_calls:
            entry["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in raw_calls
            ]
        self.messages.append(entry)
        return text, raw_calls


class ResponsesPath(RestPath):
    """``/v1/responses`` through the ``openai`` SDK; the client echoes output items as input."""

    def __init__(self, url: str, key: str, session_id: str, model: str) -> None:
        super().__init__(url, key, session_id)
        self.model = model
        self.sdk = openai.OpenAI(
            base_url=f"{url}/v1",
            api_key=key,
            max_retries=0,
            default_headers={"X-Muse-Session-Id": session_id},
        )

    def turn(self, streamed: bool) -> tuple[str, list[dict]]:
        tools = [{"type": "function", **t} for t in (WEATHER, CLOCK)]
        if streamed:
            with self.sdk.responses.stream(model=self.model, input=self.messages, tools=tools) as stream:
                response = stream.get_final_response()
        else:
            response = self.sdk.responses.create(model=self.model, input=self.messages, tools=tools)
        text, calls = "", []
        for item in response.output:
            assert item.type != "reasoning"
            if item.type == "message":
                text = "".join(p.text for p in item.content if p.type == "output_text")
                self.messages.append({"role": "assistant", "content": text})
            elif item.type == "function_call":
                calls.append({"id": item.call_id, "name": item.name, "arguments": item.arguments})
                self.messages.append(
                    {
                        "type": "function_call",
                        "call_id": item.call_id,
                        "name": item.name,
                        "arguments": item.arguments,
                    }
                )
        return text, calls

    def tool_results(self, calls: list[dict]) -> None:
        self.messages += [
            {"type": "function_call_output", "call_id": c["id"], "output": "21C"} for c in calls
        ]


class MessagesPath(RestPath):
    """``/v1/messages`` through the ``anthropic`` SDK (plain and ``messages.stream``)."""

    def __init__(self, url: str, key: str, session_id: str, model: str) -> None:
        super().__init__(url, key, session_id)
        self.model = model
        self.sdk = anthropic.Anthropic(
            base_url=url, api_key=key, max_retries=0, default_headers={"X-Muse-Session-Id": session_id}
        )

    def turn(self, streamed: bool) -> tuple[str, list[dict]]:
        tools = [
            {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
            for t in (WEATHER, CLOCK)
        ]
        kwargs = {"model": self.model, "max_tokens": 512, "messages": self.messages, "tools": tools}
        if streamed:
            with self.sdk.messages.stream(**kwargs) as stream:
                message = stream.get_final_message()
        else:
            message = self.sdk.messages.create(**kwargs)
        assert all(b.type in ("text", "tool_use") for b in message.content)
        self.messages.append(
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]}
        )
        text = "".join(b.text for b in message.content if b.type == "text")
        return text, [{"id": b.id} for b in message.content if b.type == "tool_use"]

    def tool_results(self, calls: list[dict]) -> None:
        self.messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": c["id"], "content": "21C"} for c in calls],
            }
        )


PATHS = {
    "rest": lambda url, key, sid, model: RestPath(url, key, sid),
    "chat": ChatPath,
    "responses": ResponsesPath,
    "messages": MessagesPath,
}
#: Sessions per client path: (provider, seed). Claude also speaks through the chat drop-in.
SESSIONS = {
    "rest": [("azure", 1), ("claude", 2), ("azure", 3), ("claude", 4)],
    "chat": [("azure", 5), ("claude", 6)],
    "responses": [("azure", 7), ("claude", 8)],
    "messages": [("claude", 9), ("claude", 10)],
}


@pytest.fixture
def platform(live_server, upstreams, redis_url, celery_worker_process):
    """Live server + worker; the reasoning store is Redis, shared by web (streams) and worker."""
    seed_catalogue(upstreams.url)
    experiment = make_experiment(
        key="gen-sessions", arms=[("azure", AZURE[0], 0.5), ("claude", CLAUDE[0], 0.5)]
    )
    return live_server.url, api_key(["completions"]), upstreams, experiment


def session_name(path: str, provider: str, seed: int) -> str:
    return f"gen-{path}-{provider}-{seed}"


def run_session(platform, path: str, provider: str, seed: int) -> int:
    """Run one generated session; returns its number of turns."""
    url, key, upstreams, experiment = platform
    public_id, model = AZURE if provider == "azure" else CLAUDE
    session_id = session_name(path, provider, seed)
    upstreams.reset()
    session = PATHS[path](url, key, session_id, public_id)
    try:
        steps = run_turns(session, upstreams, model, plan(seed), session_id)
    finally:
        session.close()
    calls = upstreams.calls(model=model)
    assert len(calls) == len(steps.kinds)
    assert_replayed_in_place(calls, model)
    return len(steps.kinds)


def run_turns(session: RestPath, upstreams, model: str, steps: Plan, session_id: str) -> Plan:
    for number, (kind, streamed) in enumerate(zip(steps.kinds, steps.streamed, strict=True), start=1):
        upstreams.set_scenario(
            model,
            reasoning=True,
            encrypted_reasoning="always",
            verify_reasoning=True,
            redacted_thinking=number % 3 == 0,
            thinking_text="" if number % 4 == 0 else f"Turn {number}: thinking it over.",
            tool_calls=MODES[kind],
        )
        text, calls = session.turn(streamed)
        assert bool(calls) == (kind != "text"), f"{session_id} turn {number} ({kind}): {text!r} {calls!r}"
        if kind == "parallel":
            assert len(calls) == 2
        if calls:
            session.tool_results(calls)
        else:
            session.user(f"And what about city number {number}?")
    return steps


@pytest.mark.parametrize("path", list(SESSIONS))
def test_generated_sessions_succeed_on_every_turn_with_reasoning_in_place(platform, path):
    if path == "rest":  # the REST API routes by experiment: force each session into its arm
        experiment = platform[3]
        for provider, seed in SESSIONS[path]:
            variant = experiment.variants.get(key=provider)
            unit = session_name(path, provider, seed)
            ForcedAssignment.objects.create(experiment=experiment, unit_id=unit, variant=variant)
        config_version.bump()
    turns = [run_session(platform, path, provider, seed) for provider, seed in SESSIONS[path]]
    assert all(2 <= n <= 10 for n in turns)
