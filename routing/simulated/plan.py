"""What one successful answer of the simulated upstreams contains, whatever its wire format: a
:class:`Plan` built from the request and the model's scenario (:func:`build_plan`)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .contracts import example, output_contract
from .judge import JUDGE_MARKER, judge_verdict
from .scenario import Scenario

if TYPE_CHECKING:
    from .server import FakeUpstreams


def content_to_text(content: Any) -> str:
    """Text of an OpenAI/Anthropic content value (string or list of parts/blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    out.append(part["text"])
                elif part.get("type") == "tool_result":
                    out.append(content_to_text(part.get("content")))
        return " ".join(p for p in out if p)
    return ""


def tool_arguments(tool_schema: Mapping[str, Any] | None, user_text: str) -> dict[str, Any]:
    """Arguments fitting a tool's schema; a malformed schema gets string arguments (never a crash
    of the simulated upstream)."""
    schema = tool_schema if isinstance(tool_schema, Mapping) else {}
    props = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
    required = schema.get("required") if isinstance(schema.get("required"), list) else list(props)[:1]
    args: dict[str, Any] = {}
    for name in (r for r in required if isinstance(r, str)):
        prop = props.get(name)
        kind = prop.get("type", "string") if isinstance(prop, Mapping) else "string"
        if kind in ("integer", "number"):
            args[name] = 1
        elif kind == "boolean":
            args[name] = True
        elif kind == "array":
            args[name] = []
        elif kind == "object":
            args[name] = {}
        else:
            args[name] = user_text[:80]
    return args


@dataclass
class Plan:
    """What one successful response contains, independent of the wire format."""

    model: str
    text: str
    tool_calls: list[tuple[str, str, dict[str, Any]]]  # (call id, name, arguments)
    reasoning: bool
    encrypted: bool
    thinking_text: str
    redacted: bool
    input_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    output_tokens: int
    reasoning_tokens: int
    request_id: str
    scenario: Scenario


def build_plan(
    fake: FakeUpstreams, api: str, model: str, body: dict[str, Any], sc: Scenario, request_id: str
) -> Plan:
    """What ``fake`` answers ``body`` (an ``api`` request for ``model`` under scenario ``sc``): the
    reply text (or judge verdict, or a value of the requested JSON Schema), the tool calls the
    scenario and the request's contracts allow, reasoning, and token usage (see
    :class:`routing.simulated.scenario.Scenario`)."""
    # Last user text and whether the conversation ends with a tool result.
    user_text = ""
    ends_with_tool_result = False
    tools: list[tuple[str, dict[str, Any]]] = []
    if api == "responses":
        inp = body.get("input")
        if isinstance(inp, str):
            user_text = inp
        elif isinstance(inp, list):
            for item in inp:
                if not isinstance(item, dict):
                    continue
                if item.get("role") == "user":
                    user_text = content_to_text(item.get("content"))
            if inp and isinstance(inp[-1], dict):
                ends_with_tool_result = inp[-1].get("type") == "function_call_output"
        for tool in body.get("tools") or []:
            if tool.get("type") == "function":
                tools.append((tool.get("name", ""), tool.get("parameters") or {}))
    else:
        msgs = body.get("messages") or []
        for msg in msgs:
            if isinstance(msg, dict) and msg.get("role") == "user":
                content = msg.get("content")
                if isinstance(content, list) and any(
                    isinstance(b, dict) and b.get("type") == "tool_result" for b in content
                ):
                    continue
                user_text = content_to_text(content)
        if msgs and isinstance(msgs[-1], dict):
            last = msgs[-1]
            ends_with_tool_result = last.get("role") == "tool" or (
                isinstance(last.get("content"), list)
                and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in last["content"])
            )
        for tool in body.get("tools") or []:
            if api == "chat_completions":
                fn = tool.get("function") or {}
                tools.append((fn.get("name", ""), fn.get("parameters") or {}))
            else:
                tools.append((tool.get("name", ""), tool.get("input_schema") or {}))

    text = sc.reply if sc.reply is not None else f"{model} reply to: {user_text} [quality={sc.quality:.2f}]"
    if JUDGE_MARKER in json.dumps(body):
        text, tools = judge_verdict(user_text, sc.judge_malformed), []
    # the output contracts are honoured: a forced call is made whatever the scenario says,
    # "none" makes none, one call at most without parallel calls, the text in the format asked
    contract = output_contract(api, body)
    calls: list[tuple[str, str, dict[str, Any]]] = []
    again = sc.tool_calls.startswith("chain") or contract.choice == "required"
    wanted = contract.choice == "required" or (sc.tool_calls != "never" and contract.choice != "none")
    if tools and (again or not ends_with_tool_result) and wanted:
        chosen = [tools[0]]
        if contract.name is not None:
            chosen = [t for t in tools if t[0] == contract.name][:1]
        elif sc.tool_calls in ("parallel", "chain_parallel"):
            chosen = tools[:2] if len(tools) > 1 else [tools[0], tools[0]]
        prefix = {"chat_completions": "call_", "responses": "call_", "messages": "toolu_"}[api]
        for name, schema in chosen[: None if contract.parallel else 1]:
            args = sc.tool_arguments if sc.tool_arguments is not None else tool_arguments(schema, user_text)
            calls.append((prefix + uuid.uuid4().hex[:24], name, args))
        text = "" if api != "messages" or contract.fmt else "I'll use a tool for that."
    elif contract.fmt is not None:
        value = (
            example(contract.fmt.get("schema"), user_text) if contract.fmt["type"] == "json_schema" else None
        )
        text = json.dumps(value if value is not None else {"reply": text})

    mode = sc.encrypted_reasoning or fake.encrypted_reasoning
    include = body.get("include") or []
    encrypted = mode == "always" or (mode == "include" and "reasoning.encrypted_content" in include)
    reasoning_tokens = sc.reasoning_tokens if sc.reasoning_tokens is not None else (12 if sc.reasoning else 0)
    if sc.output_tokens is not None:
        output_tokens = sc.output_tokens
    else:
        output_tokens = (
            len(text.split()) + sum(len(json.dumps(a).split()) for _, _, a in calls) + reasoning_tokens
        )
    input_tokens = sc.input_tokens if sc.input_tokens is not None else max(1, len(json.dumps(body)) // 4)
    cache = (sc.cached_tokens, sc.cache_write_tokens)
    if api == "messages" and not any(cache):
        cache = fake.prompt_cache(model, body, input_tokens)
    return Plan(
        model=model,
        text=text,
        tool_calls=calls,
        reasoning=sc.reasoning,
        encrypted=encrypted,
        thinking_text=sc.thinking_text,
        redacted=sc.redacted_thinking,
        input_tokens=input_tokens,
        cached_tokens=cache[0],
        cache_write_tokens=cache[1],
        output_tokens=output_tokens,
        reasoning_tokens=reasoning_tokens,
        request_id=request_id,
        scenario=sc,
    )
