"""The drop-ins' declared request shapes (routing/dropin/shapes.py, openai_shapes.py,
anthropic_shapes.py): bodies refused with the vendors' error shapes naming the field as the
vendors do, and turned into our stored request (messages, tools, output contracts)."""

from __future__ import annotations

import json

import pytest

from routing.dropin.anthropic_shapes import parse_messages
from routing.dropin.errors import DropinError, anthropic_message
from routing.dropin.openai_shapes import parse_chat, parse_responses
from routing.providers.contracts import OutputFormat, ToolChoice

PARSERS = {
    "chat": lambda body: parse_chat({"model": "m", **body}),
    "responses": lambda body: parse_responses({"model": "m", **body}),
    "anthropic": lambda body: parse_messages({"model": "m", "max_tokens": 16, **body}),
}


def refused(parse: str, body: dict) -> DropinError:
    with pytest.raises(DropinError) as caught:
        PARSERS[parse](body)
    return caught.value


@pytest.mark.parametrize(
    ("parse", "body", "param"),
    [
        ("chat", {"messages": [{"role": "user", "content": 12}]}, "messages[0].content"),
        ("responses", {"input": 5}, "input"),
        ("responses", {}, "input"),
        ("anthropic", {"messages": [{"role": "user", "content": 12}]}, "messages[0].content"),
    ],
)
def test_a_field_that_takes_a_string_or_an_array_says_both_when_it_gets_neither(parse, body, param):
    error = refused(parse, body)
    assert str(error) == f"'{param}' must be a string or an array."
    assert error.param == param


def _nested(depth: int) -> str:
    """A JSON object whose one value nests lists ``depth`` levels deep in all."""
    return '{"a": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


def _with_arguments(parse: str, args: str) -> tuple[dict, str]:
    return {
        "chat": (
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                ]
            },
            "messages[1].tool_calls[0].function.arguments",
        ),
        "responses": (
            {"input": [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": args}]},
            "input[0].arguments",
        ),
        "anthropic": (
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": args}],
                    },
                ]
            },
            "messages[1].content[0].input",
        ),
    }[parse]


@pytest.mark.parametrize("depth", [65, 980, 90_000])
@pytest.mark.parametrize("parse", ["chat", "responses", "anthropic"])
def test_tool_arguments_nested_too_deep_as_text_are_a_400_naming_them_not_a_500(parse, depth):
    """String-encoded tool arguments are held to the body's 64 levels; 980 and more levels used to
    exhaust the JSON decoder's recursion (RecursionError, an HTML 500 the SDKs retried)."""
    body, param = _with_arguments(parse, _nested(depth))
    error = refused(parse, body)
    assert str(error) == f"'{param}' is nested deeper than 64 levels."
    assert error.param == param


def test_tool_arguments_nested_64_levels_as_text_are_accepted():
    args = _nested(64)
    call = parse_responses(
        {"model": "m", "input": [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": args}]}
    )
    assert call.messages[0]["tool_calls"][0]["arguments"] == json.loads(args)


@pytest.mark.parametrize(
    ("args", "param_below", "message"),
    [
        ('{"path": "a\\u0000b"}', ".path", "NUL characters"),
        ('{"x": ["\\udfff"]}', ".x[0]", "lone surrogate"),
        ("[1, 2]", "", "must encode a JSON object"),
        ("{not json", "", "is not valid JSON"),
    ],
)
@pytest.mark.parametrize("parse", ["chat", "responses", "anthropic"])
def test_tool_arguments_text_is_held_to_the_bodys_rules_naming_the_field_within(
    parse, args, param_below, message
):
    body, param = _with_arguments(parse, args)
    error = refused(parse, body)
    assert error.param == param + param_below and message in error.message


@pytest.mark.parametrize(
    ("schema", "where", "message"),
    [
        ({"type": "object", "properties": "x"}, ".properties", "properties must be an object"),
        ({"type": "object", "properties": {"city": "string"}}, ".properties.city", "Each property's schema"),
        ({"type": "string"}, ".type", 'must be a JSON Schema of "type": "object"'),
        ({"type": "object", "required": "city"}, ".required", "required must be a list"),
    ],
)
@pytest.mark.parametrize("parse", ["chat", "responses", "anthropic"])
def test_a_tool_schema_no_provider_accepts_is_a_400_naming_its_field(parse, schema, where, message):
    """A malformed schema used to go upstream (a real provider refuses it; the simulated one
    crashed, and the caller got a 502)."""
    key = "input_schema" if parse == "anthropic" else "parameters"
    tool, prefix = {
        "chat": (
            {"type": "function", "function": {"name": "g", key: schema}},
            "tools[0].function.parameters",
        ),
        "responses": ({"type": "function", "name": "g", key: schema}, "tools[0].parameters"),
        "anthropic": ({"name": "g", key: schema}, "tools[0].input_schema"),
    }[parse]
    body = {"messages": [{"role": "user", "content": "x"}]} if parse != "responses" else {"input": "x"}
    error = refused(parse, {**body, "tools": [tool]})
    assert error.param == prefix + where
    assert message in str(error)
    good = {"type": ["object"], "properties": {"city": {"type": "string"}, "any": True}, "required": ["city"]}
    ok = {**tool, "function": {"name": "g", key: good}} if parse == "chat" else {**tool, key: good}
    assert PARSERS[parse]({**body, "tools": [ok]}).tools[0]["parameters"] == good


@pytest.mark.parametrize(
    ("parse", "body", "param", "message"),
    [
        ("chat", {"messages": [], "temprature": 1}, "temprature", "Unrecognized request argument supplied: temprature"),
        ("chat", {"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role", None),
        ("chat", {"messages": "hi"}, "messages", "'messages' must be an array."),
        ("chat", {"messages": []}, "messages", "'messages' must not be empty."),
        ("chat", {"messages": [{"role": "user", "content": "x"}], "stream": 1}, "stream", "'stream' must be a boolean."),
        ("chat", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0].type",
         "Content part type 'image_url' is not supported; send text."),
        ("chat", {"messages": [{"role": "user", "content": "x"}], "n": 2}, "n", "Only n=1 is supported."),
        ("chat", {"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id", None),
        ("chat", {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "a b"}}]},
         "tools[0].function.name", None),
        ("chat", {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}},
         "response_format.type", None),
        ("chat", {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}}},
         "response_format.json_schema.name", None),
        ("chat", {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "w"}}},
         "response_format.json_schema.schema", "'response_format.json_schema.schema': Field required."),
        ("responses", {"input": "x", "previous_response_id": "resp_1"}, "previous_response_id",
         "previous_response_id is not supported: send the whole conversation in 'input'."),
        ("responses", {"input": [{"type": "web_search_call"}]}, "input[0].type", "Input item type 'web_search_call' is not supported."),
        ("responses", {"input": "x", "text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format.name", None),
        ("responses", {"input": "x", "tool_choice": {"type": "file_search"}}, "tool_choice.type",
         "Only function tool choices (or allowed_tools) are supported."),
        ("anthropic", {"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f"}]}]},
         "messages[0].content[0].type", "Content block type 'tool_use' is not supported in a user message."),
        ("anthropic", {"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "2h"}}]}]},
         "messages[0].content[0].cache_control.ttl", None),
        ("anthropic", {"messages": [{"role": "user", "content": "x"}], "output_config": {"format": {"type": "json_object"}}},
         "output_config.format.type", None),
        ("chat", {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}, "response_format",
         "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'."),
        ("responses", {"input": "x", "text": {"format": {"type": "json_object"}}}, "text.format",
         "'messages' must contain the word 'json' in some form, to use 'text.format' of type 'json_object'."),
        ("anthropic", {"system": [{"type": "image"}], "messages": [{"role": "user", "content": "x"}]},
         "system[0].type", "Block type 'image' is not supported here; send text."),
    ],
)  # fmt: skip
def test_a_body_off_its_shape_is_refused_naming_the_field_as_openai_does(parse, body, param, message):
    error = refused(parse, body)
    assert error.param == param and error.status == 400
    if message:
        assert error.message == message
    else:  # our own words name the field as the param does
        assert f"'{param}'" in error.message


def test_anthropic_names_the_field_its_own_way_in_the_message():
    error = refused("anthropic", {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]})
    assert error.param == "messages[0].content[0].text"
    assert anthropic_message(error.message, error.param) == "'messages.0.content.0.text' must be a string."
    assert (
        anthropic_message("must be a positive integer.", "max_tokens")
        == "max_tokens: must be a positive integer."
    )


@pytest.mark.parametrize(
    ("parse", "extra", "expected"),
    [
        ("chat", {"response_format": {"type": "json_object"}}, OutputFormat("json_object")),
        ("chat", {"response_format": {"type": "text"}}, None),
        (
            "chat",
            {"response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}, "strict": True}}},
            OutputFormat("json_schema", schema={"type": "object"}, name="w", strict=True),
        ),
        (
            "responses",
            {"text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "description": "d"}}},
            OutputFormat("json_schema", schema={"type": "object"}, name="w", description="d"),
        ),
        (
            "anthropic",
            {"output_config": {"effort": "low", "format": {"type": "json_schema", "schema": {"type": "object"}}}},
            OutputFormat("json_schema", schema={"type": "object"}),
        ),
    ],
)  # fmt: skip
def test_output_formats_become_one_neutral_contract(parse, extra, expected):
    text = "Answer in JSON."
    body = {"input": text} if parse == "responses" else {"messages": [{"role": "user", "content": text}]}
    assert PARSERS[parse]({**body, **extra}).output_format == expected


CHAT_TOOL = {"type": "function", "function": {"name": "weather"}}
RESPONSES_TOOL = {"type": "function", "name": "weather"}
ANTHROPIC_TOOL = {"name": "weather"}


@pytest.mark.parametrize(
    ("parse", "tool", "extra", "choice", "parallel"),
    [
        ("chat", CHAT_TOOL, {"tool_choice": "required"}, ToolChoice("required"), None),
        ("chat", CHAT_TOOL, {"tool_choice": "auto", "parallel_tool_calls": False}, None, False),
        ("chat", CHAT_TOOL, {"tool_choice": {"type": "function", "function": {"name": "weather"}}}, ToolChoice("required", "weather"), None),
        ("chat", CHAT_TOOL, {"tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [CHAT_TOOL]}}},
         ToolChoice("required", allowed=("weather",)), None),
        ("responses", RESPONSES_TOOL, {"tool_choice": {"type": "function", "name": "weather"}}, ToolChoice("required", "weather"), None),
        ("responses", RESPONSES_TOOL, {"tool_choice": "none", "parallel_tool_calls": True}, ToolChoice("none"), True),
        ("anthropic", ANTHROPIC_TOOL, {"tool_choice": {"type": "any"}}, ToolChoice("required"), None),
        ("anthropic", ANTHROPIC_TOOL, {"tool_choice": {"type": "tool", "name": "weather", "disable_parallel_tool_use": True}},
         ToolChoice("required", "weather"), False),
        ("anthropic", ANTHROPIC_TOOL, {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}, None, False),
    ],
)  # fmt: skip
def test_tool_choices_become_one_neutral_contract(parse, tool, extra, choice, parallel):
    body = {"input": "x"} if parse == "responses" else {"messages": [{"role": "user", "content": "x"}]}
    call = PARSERS[parse]({**body, "tools": [tool], **extra})
    assert (call.tool_choice, call.parallel_tool_calls) == (choice, parallel)


def test_the_stored_contracts_are_only_those_sent():
    call = parse_chat(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Reply in json"}],
            "tools": [CHAT_TOOL],
            "tool_choice": "required",
            "parallel_tool_calls": False,
            "response_format": {"type": "json_object"},
        }
    )
    assert call.stored_contracts() == {
        "output_format": {"type": "json_object", "name": "response"},
        "tool_choice": {"mode": "required"},
        "parallel_tool_calls": False,
    }
    plain = parse_chat(
        {"model": "m", "messages": [{"role": "user", "content": "x"}], "parallel_tool_calls": True}
    )
    assert plain.stored_contracts() == {}
