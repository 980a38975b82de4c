"""CPU per request of the drop-in endpoints' request validation, on realistic bodies.

Run: ``.venv/bin/python bench/bench_dropin_validation.py [--runs 7] [--calls 2000]``

Each body is a 20-message agent conversation with 4 tools (system prompt, user turns, assistant
turns with one or two tool calls, their results), as an SDK sends it to
``/v1/chat/completions``, ``/v1/responses`` and ``/v1/messages``; ``chat-short`` is the one-message
body ``bench/bench_proxy.py`` sends. What is timed is what the view
does with the parsed JSON before it submits the job: the body checked against its declared shape
(unknown parameters, types, ranges, tool schemas, tool choice, output contracts) and turned into
our stored messages and tools. Identity headers and the job submission are not included (the
same before and after). Prints, per body, the median over ``--runs`` runs of the CPU time
(``time.process_time``) per call in microseconds, and the spread of the runs.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path, relative to the repository root"},
            "start_line": {"type": "integer", "minimum": 1},
            "end_line": {"type": "integer", "minimum": 1},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "Shell command to run"},
            "timeout_s": {"type": "number", "description": "Seconds before the command is killed"},
            "env": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "required": ["command"],
    },
    {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "paths": {"type": "array", "items": {"type": "string"}},
            "case_sensitive": {"type": "boolean"},
        },
        "required": ["query"],
    },
    {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "edits": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"old": {"type": "string"}, "new": {"type": "string"}},
                    "required": ["old", "new"],
                },
            },
        },
        "required": ["path", "edits"],
    },
]
TOOL_NAMES = ["read_file", "run_command", "search", "edit_file"]
SYSTEM = "You are a careful coding agent. " * 40
PROMPT = "The test suite fails on the date parsing module; find out why and fix it. " * 4
RESULT = "def parse(value):\n    return datetime.strptime(value, '%Y-%m-%d')\n" * 12


def _turns() -> list[tuple[str, list[tuple[str, str, dict]], list[str]]]:
    """Six assistant turns: (text, calls [(id, name, args)], results), 2 parallel calls in two."""
    turns = []
    for i in range(6):
        calls = [(f"call_{i}a", TOOL_NAMES[i % 4], {"path": f"src/module_{i}.py", "start_line": 1})]
        if i in (1, 4):
            calls.append((f"call_{i}b", "search", {"query": "strptime", "paths": ["src", "tests"]}))
        turns.append((f"Let me look at step {i}." if i % 2 else "", calls, [RESULT for _ in calls]))
    return turns


def chat_body() -> dict:
    """20 messages: system, user, 6 x (assistant + 1-2 tool results), assistant, user."""
    messages: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]
    for text, calls, results in _turns():
        messages.append(
            {
                "role": "assistant",
                "content": text or None,
                "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                    for cid, name, args in calls
                ],
            }
        )
        messages += [
            {"role": "tool", "tool_call_id": cid, "content": result}
            for (cid, _, _), result in zip(calls, results, strict=True)
        ]
    messages += [
        {"role": "assistant", "content": "The parser is fine; the test data is not."},
        {"role": "user", "content": "Which test data?"},
        {"role": "assistant", "content": [{"type": "text", "text": "The format string is wrong."}]},
        {"role": "user", "content": [{"type": "text", "text": "Fix it and run the tests."}]},
    ]
    return {
        "model": "muse-default",
        "messages": messages,
        "tools": [
            {"type": "function", "function": {"name": n, "description": f"{n} tool", "parameters": s}}
            for n, s in zip(TOOL_NAMES, SCHEMAS, strict=True)
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "temperature": 0.2,
        "max_completion_tokens": 4096,
        "stream": False,
        "user": "user-42",
        "metadata": {"session_id": "sess-42"},
    }


def responses_body() -> dict:
    """``instructions`` + 20 input items (messages, function calls and their outputs, a reasoning item)."""
    items: list[dict] = [{"role": "user", "content": PROMPT}]
    for text, calls, results in _turns():
        if text:
            items.append({"role": "assistant", "content": [{"type": "output_text", "text": text}]})
        for cid, name, args in calls:
            items.append(
                {"type": "function_call", "call_id": cid, "name": name, "arguments": json.dumps(args)}
            )
        items += [
            {"type": "function_call_output", "call_id": cid, "output": result}
            for (cid, _, _), result in zip(calls, results, strict=True)
        ]
    items.insert(3, {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA" * 20})
    items.append({"role": "user", "content": [{"type": "input_text", "text": "Fix it and run the tests."}]})
    del items[-3:-1]  # 20 items: the last turn without its call
    return {
        "model": "muse-default",
        "instructions": SYSTEM,
        "input": items,
        "tools": [
            {"type": "function", "name": n, "description": f"{n} tool", "parameters": s, "strict": False}
            for n, s in zip(TOOL_NAMES, SCHEMAS, strict=True)
        ],
        "tool_choice": "auto",
        "temperature": 0.2,
        "max_output_tokens": 4096,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "user": "user-42",
    }


def messages_body() -> dict:
    """System blocks with a cache breakpoint, 20 messages with tool_use / tool_result blocks (one
    user turn of tool results followed by one of text, as Anthropic allows)."""
    messages: list[dict] = [
        {
            "role": "user",
            "content": [{"type": "text", "text": PROMPT, "cache_control": {"type": "ephemeral"}}],
        }
    ]
    for text, calls, results in _turns():
        blocks: list[dict] = [{"type": "text", "text": text}] if text else []
        blocks += [{"type": "tool_use", "id": f"toolu_{cid}", "name": n, "input": a} for cid, n, a in calls]
        messages.append({"role": "assistant", "content": blocks})
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_{cid}", "content": result}
                    for (cid, _, _), result in zip(calls, results, strict=True)
                ],
            }
        )
    messages += [
        {"role": "user", "content": "Also check the time zones."},
        {"role": "assistant", "content": "The format string is wrong."},
        {"role": "user", "content": "Fix it and run the tests."},
        {"role": "assistant", "content": [{"type": "text", "text": "Running them now."}]},
        {"role": "user", "content": [{"type": "text", "text": "Go on."}]},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Thanks."},
    ]
    return {
        "model": "muse-default",
        "max_tokens": 8192,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "messages": messages,
        "tools": [
            {"name": n, "description": f"{n} tool", "input_schema": s}
            for n, s in zip(TOOL_NAMES, SCHEMAS, strict=True)
        ],
        "tool_choice": {"type": "auto"},
        "temperature": 0.2,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "metadata": {"user_id": "user-42"},
    }


def short_chat_body() -> dict:
    """What ``bench/bench_proxy.py`` sends: one user message, nothing else."""
    return {
        "model": "muse-default",
        "messages": [{"role": "user", "content": "Benchmark request 1: answer briefly."}],
    }


BODIES = {
    "chat": chat_body,
    "responses": responses_body,
    "messages": messages_body,
    "chat-short": short_chat_body,
}


def validators() -> dict:
    """The callable each view runs on a body. At a commit before the declared shapes (main
    ``e45de11`` and earlier: copy this script there) it is the hand-written checks the views ran,
    in the views' order, so the same script measures before and after."""
    try:
        from routing.dropin.anthropic_shapes import parse_messages
        from routing.dropin.openai_shapes import parse_chat, parse_responses
    except ImportError:
        return _hand_written_checks()
    return {"chat": parse_chat, "responses": parse_responses, "messages": parse_messages}


def _hand_written_checks() -> dict:  # the views' steps before the declared shapes
    from routing.dropin import anthropic_api as a
    from routing.dropin import common as c
    from routing.dropin import openai_api as o

    def chat(body):
        c.check_known(body, o.CHAT_PARAMS)
        c.check_sampling(body, token_fields=("max_tokens", "max_completion_tokens"), temperature_max=2.0)
        c.as_str(body.get("model"), "model", max_len=200, allow_empty=False)
        c.as_object(body.get("stream_options") or {}, "stream_options")
        tools = o.chat_tools(body.get("tools"))
        c.check_tool_choice(body.get("tool_choice"), tools, style="chat")
        return o.chat_messages(body.get("messages")), tools

    def responses(body):
        c.check_known(body, o.RESPONSES_PARAMS)
        c.check_sampling(body, token_fields=("max_output_tokens",), temperature_max=2.0)
        c.as_str(body.get("model"), "model", max_len=200, allow_empty=False)
        tools = o.responses_tools(body.get("tools"))
        c.check_tool_choice(body.get("tool_choice"), tools, style="responses")
        return o.responses_messages(body), tools

    def messages(body):
        c.check_known(body, a.MESSAGES_PARAMS)
        c.as_str(body.get("model"), "model", max_len=200, allow_empty=False)
        c.check_sampling(body, token_fields=("max_tokens",), temperature_max=1.0, top_k=True)
        a.check_thinking(body.get("thinking"), body["max_tokens"])
        tools = a.tools_in(body.get("tools"))
        c.check_tool_choice(body.get("tool_choice"), tools, style="anthropic")
        return a.messages_in(body), tools

    return {"chat": chat, "responses": responses, "messages": messages}


def drf_chat_shape():
    """``--drf``: the chat body's shape as DRF serializers (the native API's style: nested
    serializers, ``StrictSerializer`` at the top), shape only -- no tool-schema or argument
    checks, no conversion -- to show what they would cost on this path."""
    from rest_framework import serializers

    from muse_experiments.api.base import StrictSerializer

    class Function(serializers.Serializer):
        name = serializers.CharField(max_length=200)
        arguments = serializers.CharField(allow_blank=True)

    class ToolCall(serializers.Serializer):
        id = serializers.CharField(max_length=200)
        type = serializers.ChoiceField(choices=["function"])
        function = Function()

    class Part(serializers.Serializer):
        type = serializers.ChoiceField(choices=["text", "refusal"])
        text = serializers.CharField(allow_blank=True, trim_whitespace=False)

    class Message(serializers.Serializer):
        role = serializers.ChoiceField(choices=["system", "developer", "user", "assistant", "tool"])
        content = serializers.JSONField(required=False, allow_null=True)
        tool_calls = ToolCall(many=True, required=False)
        tool_call_id = serializers.CharField(required=False, max_length=200)

        def validate_content(self, value):
            if isinstance(value, list):
                parts = Part(data=value, many=True)
                parts.is_valid(raise_exception=True)
                return parts.validated_data
            return value

    class FunctionSpec(serializers.Serializer):
        name = serializers.RegexField(r"^[A-Za-z0-9_-]{1,64}$")
        description = serializers.CharField(required=False, allow_blank=True, max_length=4000)
        parameters = serializers.DictField(required=False)

    class Tool(serializers.Serializer):
        type = serializers.ChoiceField(choices=["function"])
        function = FunctionSpec()

    class Chat(StrictSerializer):
        model = serializers.CharField(max_length=200)
        messages = Message(many=True, allow_empty=False, max_length=1000)
        tools = Tool(many=True, required=False, max_length=128)
        tool_choice = serializers.JSONField(required=False)
        parallel_tool_calls = serializers.BooleanField(required=False)
        temperature = serializers.FloatField(required=False, min_value=0, max_value=2)
        max_completion_tokens = serializers.IntegerField(required=False, min_value=1)
        stream = serializers.BooleanField(required=False)
        user = serializers.CharField(required=False)
        metadata = serializers.DictField(required=False)

    def validate(body):
        serializer = Chat(data=body)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data

    return validate


def cpu_us_per_call(fn, body: dict, calls: int) -> float:
    """CPU microseconds per call of ``fn`` on a fresh deep copy of ``body`` each time (the view
    gets a freshly parsed body; the copies are made before the clock starts)."""
    bodies = [copy.deepcopy(body) for _ in range(calls)]
    started = time.process_time()
    for b in bodies:
        fn(b)
    return (time.process_time() - started) / calls * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument(
        "--drf", action="store_true", help="also time the chat body's shape as DRF serializers"
    )
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "muse_experiments.settings")
    os.environ.setdefault("DJANGO_DEBUG", "true")  # no secret key needed; nothing here reads DEBUG
    os.environ.setdefault("MUSE_VAR_DIR", "/tmp/muse-bench-dropin")
    import django

    django.setup()
    fns = validators()
    for name, make in BODIES.items():
        body = make()
        size = len(json.dumps(body))
        fn = fns[name.split("-")[0]]
        fn(copy.deepcopy(body))  # warm up (and fail loudly on a body the code refuses)
        runs = sorted(cpu_us_per_call(fn, body, args.calls) for _ in range(args.runs))
        print(
            f"{name:10s} {len(body.get('messages') or body.get('input'))} messages, {size:6d} bytes: "
            f"median {statistics.median(runs):7.1f} us CPU/call  (runs {runs[0]:.1f}..{runs[-1]:.1f})"
        )
    if args.drf:
        fn, body = drf_chat_shape(), chat_body()
        runs = sorted(cpu_us_per_call(fn, body, max(1, args.calls // 4)) for _ in range(args.runs))
        print(f"chat as DRF serializers (shape only): median {statistics.median(runs):7.1f} us CPU/call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
