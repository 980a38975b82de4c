"""Output contracts of a request, as each API words them: the answer's format (JSON Schema, JSON
mode), the tool choice and whether calls may run in parallel.

:func:`contract_problem` gives the 400 message the real API answers a contract it refuses with;
:func:`output_contract` reads the contracts of one it takes, and :func:`example` builds a JSON value that
honours a JSON Schema. Sources: https://platform.openai.com/docs/guides/structured-outputs,
https://platform.openai.com/docs/guides/function-calling,
https://docs.anthropic.com/en/docs/build-with-claude/structured-outputs and .../tool-use.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Contract:
    """A request's output contracts, whatever its API: ``fmt`` the answer's format (``None``,
    ``{"type": "json_object"}`` or ``{"type": "json_schema", "schema": ...}``); ``choice``
    ``auto`` / ``none`` / ``required``; ``name`` the tool a ``required`` choice names;
    ``parallel`` whether more than one tool call is allowed."""

    fmt: dict[str, Any] | None = None
    choice: str = "auto"
    name: str | None = None
    parallel: bool = True


def output_contract(api: str, body: dict[str, Any]) -> Contract:
    """The contracts of a request that passed :func:`contract_problem`."""
    choice = body.get("tool_choice")
    if api == "messages":
        fmt = (body.get("output_config") or {}).get("format")
        kind = (choice or {}).get("type", "auto")
        return Contract(
            fmt=fmt,
            choice={"any": "required", "tool": "required"}.get(kind, kind),
            name=(choice or {}).get("name") if kind == "tool" else None,
            parallel=not (choice or {}).get("disable_parallel_tool_use", False),
        )
    fmt = body.get("response_format") if api == "chat_completions" else (body.get("text") or {}).get("format")
    if fmt is not None and fmt.get("type") == "text":
        fmt = None
    if fmt is not None and fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema") if api == "chat_completions" else fmt
        fmt = {"type": "json_schema", "schema": spec.get("schema") or {}}
    name, mode = None, choice or "auto"
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        mode = (choice.get("allowed_tools") or choice).get("mode", "auto")
    elif isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name") if api == "chat_completions" else choice.get("name")
        mode = "required"
    return Contract(
        fmt=fmt, choice=mode, name=name, parallel=body.get("parallel_tool_calls", True) is not False
    )


def _tool_names(api: str, body: dict[str, Any]) -> list[str]:
    tools = body.get("tools") or []
    if api == "chat_completions":
        return [(t.get("function") or {}).get("name") for t in tools if isinstance(t, dict)]
    return [t.get("name") for t in tools if isinstance(t, dict)]


def contract_problem(api: str, body: dict[str, Any]) -> str | None:
    """The 400 message the real API gives for output contracts it refuses (wording after theirs):
    an unknown format type, a JSON Schema format without its name (OpenAI) or with fields
    Anthropic does not take, a schema a strict format cannot enforce, JSON mode without the word
    "json" in the messages (OpenAI), a tool choice without tools or naming a tool not offered,
    and (Anthropic) thinking with a forced tool call."""
    names = _tool_names(api, body)
    choice = body.get("tool_choice")
    if api == "messages":
        fmt = (body.get("output_config") or {}).get("format")
        if fmt is not None:
            extra = sorted(set(fmt) - {"type", "schema"})
            if extra:
                return f"output_config.format.{extra[0]}: Extra inputs are not permitted"
            if fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
                return "output_config.format: Input should be a valid JSON schema output format"
            if not _strict_schema(fmt["schema"], all_required=False):
                return "output_config.format.schema: For 'object' type, 'additionalProperties' must be explicitly set to false"
        if choice is not None:
            if not names:
                return "tool_choice: tool_choice may only be specified while providing tools."
            kind = choice.get("type")
            if kind not in ("auto", "any", "tool", "none"):
                return f"tool_choice.type: Input tag '{kind}' found using 'type' does not match any of the expected tags"
            if kind == "tool" and choice.get("name") not in names:
                return f"tool_choice: Tool '{choice.get('name')}' not found in provided tools"
            if kind == "none" and "disable_parallel_tool_use" in choice:
                return "tool_choice.none.disable_parallel_tool_use: Extra inputs are not permitted"
            if kind in ("any", "tool") and (body.get("thinking") or {}).get("type") in (
                "enabled",
                "adaptive",
            ):
                return "Thinking may not be enabled when tool_choice forces tool use."
        return None
    field = "response_format" if api == "chat_completions" else "text.format"
    fmt = body.get("response_format") if api == "chat_completions" else (body.get("text") or {}).get("format")
    if fmt is not None:
        kind = fmt.get("type")
        if kind not in ("text", "json_object", "json_schema"):
            return f"Invalid value: '{kind}'. Supported values are: 'text', 'json_object', and 'json_schema'."
        spec = (fmt.get("json_schema") or {}) if api == "chat_completions" else fmt
        prefix = f"{field}.json_schema" if api == "chat_completions" else field
        if kind == "json_schema" and not spec.get("name"):
            return f"Missing required parameter: '{prefix}.name'."
        if kind == "json_schema" and spec.get("strict") and not _strict_schema(spec.get("schema") or {}):
            return (
                f"Invalid schema for response_format '{spec.get('name')}': In context=(), 'required' is required "
                "to be supplied and to be an array including every key in properties, and "
                "'additionalProperties' is required to be supplied and to be false."
            )
        if (
            kind == "json_object"
            and "json"
            not in json.dumps(body.get("messages") or body.get("input") or "").lower()
            + (body.get("instructions") or "").lower()
        ):
            return f"'messages' must contain the word 'json' in some form, to use '{field}' of type 'json_object'."
    if choice is not None and not names:
        return "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified."
    if isinstance(choice, str) and choice not in ("none", "auto", "required"):
        return f"Invalid value: '{choice}'. Supported values are: 'none', 'auto', and 'required'."
    if isinstance(choice, dict) and choice.get("type") != "allowed_tools":
        named = (
            (choice.get("function") or {}).get("name") if api == "chat_completions" else choice.get("name")
        )
        if choice.get("type") != "function" or named not in names:
            return f"Invalid value for 'tool_choice': function '{named}' not found in 'tools'."
    if api == "chat_completions" and "parallel_tool_calls" in body and not names:
        return "Invalid value for 'parallel_tool_calls': 'parallel_tool_calls' is only allowed when 'tools' are specified."
    return None


def _strict_schema(schema: Any, *, all_required: bool = True) -> bool:
    """Whether every object schema in ``schema`` sets ``additionalProperties: false`` (and, for
    OpenAI's strict mode, ``all_required``: lists every property in ``required``)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            props = node.get("properties")
            if node.get("type") == "object" or isinstance(props, dict):
                if node.get("additionalProperties") is not False:
                    return False
                if all_required and set(node.get("required") or ()) != set(props or {}):
                    return False
            stack.extend(v for k, v in node.items() if k != "properties" and isinstance(v, dict | list))
            stack.extend((props or {}).values() if isinstance(props, dict) else ())
    return True


def example(schema: Any, text: str, root: Any = None, depth: int = 0) -> Any:
    """A JSON value valid against ``schema`` (every property filled; strings are ``text``),
    following ``$ref`` into the root's ``$defs``."""
    root = schema if root is None else root
    if not isinstance(schema, Mapping) or depth > 16:
        return text
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, Mapping) else {}
        return example(target, text, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return example(schema[key][0], text, root, depth + 1)
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), "null") if isinstance(kind, list) else kind
    if kind == "object" or isinstance(schema.get("properties"), Mapping):
        props = schema.get("properties") or {}
        return {name: example(sub, text, root, depth + 1) for name, sub in props.items()}
    if kind == "array":
        return (
            [example(schema["items"], text, root, depth + 1)]
            if isinstance(schema.get("items"), Mapping)
            else []
        )
    return {"integer": 1, "number": 1.5, "boolean": True, "null": None}.get(kind, text)
