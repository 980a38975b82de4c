"""Request shape of the Anthropic drop-in: ``POST /v1/messages``.

:func:`parse_messages` checks a body against its declared shape (:mod:`.shapes`) and turns it
into a :class:`~.shapes.DropinCall`: ``system`` + ``messages`` as our stored messages
(``tool_result`` blocks → tool messages; text blocks keep their structure and prompt-caching
breakpoints; ``thinking`` blocks a client sends back are dropped: we never hand them out), tools,
and the output contracts (``output_config.format``, ``tool_choice`` with its
``disable_parallel_tool_use``). Sampling parameters and ``thinking`` are held to Anthropic's rules
but the experiment variant decides them.
Source: https://docs.anthropic.com/en/api/messages
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PlainValidator

from ..providers.contracts import ToolChoice
from .errors import DropinError, require
from .shapes import (
    MAX_MESSAGES,
    MAX_OUTPUT_TOKENS,
    MAX_TOOLS,
    CacheControl,
    DropinCall,
    Id,
    JsonSchema,
    Metadata,
    PositiveInt,
    RequestShape,
    Shape,
    Text,
    ToolArguments,
    ToolName,
    ToolSchema,
    TopP,
    Unsupported,
    by_type,
    choose_tools,
    number_from_zero_to,
    output_format,
    refuse,
    text_or_list,
    tool_spec,
    validate,
)

CONTRACT_FIELDS = {"output_format": "output_config.format", "tool_choice": "tool_choice"}


def _max_tokens(value: Any) -> int:
    """Anthropic's own words for its one required number."""
    if value is None:
        raise refuse("max_tokens: Field required (a positive integer).")
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise refuse("max_tokens: must be a positive integer.")
    if value > MAX_OUTPUT_TOKENS:
        raise refuse(f"'{{param}}' is too large: no model writes more than {MAX_OUTPUT_TOKENS} tokens.")
    return value


class TextBlock(Shape):
    type: Literal["text"] = "text"
    text: Text = ""
    cache_control: CacheControl | None = None

    def part(self) -> dict[str, Any]:
        """The block as a stored part: ``{"text"}`` plus its ``cache_control`` when it has one."""
        part: dict[str, Any] = {"text": self.text}
        if self.cache_control is not None:
            part["cache_control"] = self.cache_control.stored()
        return part


#: Where only text blocks go (``system``, a ``tool_result``'s content).
TextBlocks = text_or_list(by_type({"text": TextBlock}))


class ToolUseBlock(Shape):
    type: str
    id: Id
    name: Id
    input: ToolArguments = Field(default_factory=dict)


class ToolResultBlock(Shape):
    type: str
    tool_use_id: Id
    content: TextBlocks | None = None
    cache_control: CacheControl | None = None


class ThinkingBlock(Shape):
    """A thinking block a client sends back: dropped."""

    type: str


Block = by_type(
    {
        "text": TextBlock,
        "tool_use": ToolUseBlock,
        "tool_result": ToolResultBlock,
        "thinking": ThinkingBlock,
        "redacted_thinking": ThinkingBlock,
    }
)


class AnthropicMessage(Shape):
    role: Literal["user", "assistant"]
    content: text_or_list(Block) = Field(default=None, validate_default=True)


class AnthropicTool(Shape):
    type: Literal["custom"] | None = None
    name: ToolName
    description: Annotated[str, Field(max_length=4000)] | None = None
    input_schema: ToolSchema | None = None
    cache_control: CacheControl | None = None


class AnthropicToolChoice(Shape):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class Thinking(Shape):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: Any = None


class JsonOutputFormat(Shape):
    type: Literal["json_schema"]
    schema_: JsonSchema = Field(alias="schema")


class OutputConfig(Shape):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: JsonOutputFormat | None = None


class MessagesRequest(RequestShape):
    """A Messages body; fields in the order their errors are reported."""

    model: Annotated[str, Field(min_length=1, max_length=200)]
    max_tokens: Annotated[int, PlainValidator(_max_tokens)] = Field(default=None, validate_default=True)
    temperature: number_from_zero_to(1.0) | None = None
    top_p: TopP | None = None
    top_k: PositiveInt | None = None
    thinking: Thinking | None = None
    stream: bool | None = None
    metadata: Metadata | None = None
    tools: Annotated[list[AnthropicTool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: AnthropicToolChoice | None = None
    output_config: OutputConfig | None = None
    system: TextBlocks | None = None
    messages: Annotated[list[AnthropicMessage], Field(min_length=1, max_length=MAX_MESSAGES)]
    # accepted for compatibility, not used: the experiment variant decides
    stop_sequences: Any = None
    service_tier: Any = None
    container: Any = None
    context_management: Any = None


def parse_messages(body: Any) -> DropinCall:
    """A Messages body as a :class:`DropinCall`. Raises :class:`DropinError` (400)."""
    req = validate(MessagesRequest, body)
    check_thinking(req.thinking, req.max_tokens)
    tools = [
        tool_spec(t.name, t.description, t.input_schema)
        | ({"cache_control": t.cache_control.stored()} if t.cache_control else {})
        for t in req.tools or ()
    ]
    choice = req.tool_choice
    fmt = req.output_config.format if req.output_config is not None else None
    return DropinCall(
        model=req.model,
        messages=messages_in(req),
        tools=tools,
        stream=bool(req.stream),
        metadata=req.metadata,
        output_format=output_format("json_schema", schema=fmt.schema_) if fmt is not None else None,
        tool_choice=anthropic_tool_choice(choice, tools),
        parallel_tool_calls=False if choice is not None and choice.disable_parallel_tool_use else None,
        contract_fields=CONTRACT_FIELDS,
    )


def check_thinking(thinking: Thinking | None, max_tokens: int) -> None:
    """``thinking`` held to Anthropic's rules (the variant decides the real setting): ``enabled``
    needs an integer ``budget_tokens`` of at least 1,024 and below ``max_tokens``. Raises
    :class:`DropinError` (400)."""
    if thinking is None or thinking.type != "enabled":
        return
    budget = thinking.budget_tokens
    require(
        isinstance(budget, int) and not isinstance(budget, bool) and budget >= 1024,
        "thinking.budget_tokens: must be an integer of at least 1024.",
        "thinking.budget_tokens",
    )
    require(
        budget < max_tokens, "thinking.budget_tokens: must be less than max_tokens.", "thinking.budget_tokens"
    )


def anthropic_tool_choice(
    choice: AnthropicToolChoice | None, tools: list[dict[str, Any]]
) -> ToolChoice | None:
    """``tool_choice`` as a :class:`~routing.providers.types.ToolChoice`: ``any`` → ``required``,
    ``tool`` → ``required`` naming the tool (:func:`~.shapes.choose_tools`)."""
    if choice is None:
        return None
    mode = {"auto": "auto", "none": "none", "any": "required", "tool": "required"}[choice.type]
    named = choice.type == "tool"
    require(not named or choice.name is not None, "'tool_choice.name': Field required.", "tool_choice.name")
    return choose_tools(mode=mode, tools=tools, name=choice.name if named else None)


def _with_parts(message: dict[str, Any], parts: list[dict[str, Any]], structured: bool) -> dict[str, Any]:
    """``message`` with ``parts`` kept when the caller sent blocks (its block structure and breakpoints)."""
    if structured and parts:
        message["parts"] = parts
    return message


def _text_parts(content: Any, param: str) -> list[dict[str, Any]]:
    """Text-only content (a string or text blocks) as stored parts; another block type is a 400."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}]
    parts = []
    for i, block in enumerate(content):
        if isinstance(block, Unsupported):
            raise DropinError(
                f"Block type {block.type!r} is not supported here; send text.", param=f"{param}[{i}].type"
            )
        parts.append(block.part())
    return parts


def messages_in(req: MessagesRequest) -> list[dict[str, Any]]:
    """``system`` + ``messages`` → our stored messages (tool_result blocks → tool messages)."""
    out: list[dict[str, Any]] = []
    if req.system is not None:
        parts = _text_parts(req.system, "system")
        message = {"role": "system", "content": "".join(p["text"] for p in parts)}
        out.append(_with_parts(message, parts, isinstance(req.system, list)))
    for i, m in enumerate(req.messages):
        assistant = m.role == "assistant"
        structured = isinstance(m.content, list)
        texts: list[dict[str, Any]] = [] if structured else [{"text": m.content}]
        calls: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for j, b in enumerate(m.content if structured else ()):
            kind = type(b)
            if kind is TextBlock:
                texts.append(b.part())
            elif kind is ToolUseBlock and assistant:
                calls.append({"id": b.id, "name": b.name, "arguments": b.input})
            elif kind is ToolResultBlock and not assistant:
                content = b.content
                if not isinstance(content, str):
                    parts = _text_parts(content, f"messages[{i}].content[{j}].content")
                    content = "".join(part["text"] for part in parts)
                result = {"role": "tool", "tool_call_id": b.tool_use_id, "content": content}
                cc = b.cache_control.stored() if b.cache_control is not None else None
                results.append(_with_parts(result, [{"text": content, "cache_control": cc}], bool(cc)))
            elif kind is not ThinkingBlock or not assistant:  # thinking is dropped: we never handed it out
                raise DropinError(
                    f"Content block type {b.type!r} is not supported in a {m.role} message.",
                    param=f"messages[{i}].content[{j}].type",
                )
        joined = "".join(part["text"] for part in texts)
        if assistant:
            msg: dict[str, Any] = _with_parts({"role": "assistant", "content": joined}, texts, structured)
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        else:
            out.extend(results)
            if texts or not results:
                out.append(_with_parts({"role": "user", "content": joined}, texts, structured))
    return out
