"""Request shapes of the OpenAI drop-ins: ``POST /v1/chat/completions`` and ``POST /v1/responses``.

:func:`parse_chat` and :func:`parse_responses` check a body against its declared shape
(:mod:`.shapes`) and turn it into a :class:`~.shapes.DropinCall`: our stored messages (system and
developer → system; tool calls and their results kept; Responses ``reasoning`` items a client
sends back dropped: we never hand reasoning out) and tools, and the output contracts
(``response_format`` / ``text.format``, ``tool_choice``, ``parallel_tool_calls``) every provider
is given in its own terms. Sampling parameters (temperature, token limits …) are held to
OpenAI's types and ranges but the experiment variant decides them.
Sources: https://platform.openai.com/docs/api-reference/chat/create ,
https://platform.openai.com/docs/api-reference/responses/create
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from ..providers.contracts import OutputFormat, ToolChoice
from .errors import DropinError, require
from .shapes import (
    MAX_MESSAGES,
    MAX_TOOLS,
    DropinCall,
    Id,
    JsonSchema,
    Metadata,
    Name,
    RequestShape,
    SchemaName,
    Shape,
    Text,
    TokenLimit,
    ToolArguments,
    ToolName,
    ToolSchema,
    TopP,
    Unsupported,
    by_type,
    choose_tools,
    number_from_zero_to,
    output_format,
    string_or,
    text_or_list,
    tool_spec,
    validate,
)

Temperature = number_from_zero_to(2.0)
ToolChoiceMode = Literal["none", "auto", "required"]
CONTRACT_FIELDS = {"output_format": "response_format", "tool_choice": "tool_choice"}


class TextPart(Shape):
    type: str
    text: Text


class RefusalPart(Shape):
    type: str
    refusal: Text


def text_of(content: Any, param: str) -> str:
    """A message's content as text: a string, or its text (and refusal) parts joined; a part of
    another type is a 400 naming it."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for i, part in enumerate(content):
        if isinstance(part, Unsupported):
            raise DropinError(
                f"Content part type {part.type!r} is not supported; send text.", param=f"{param}[{i}].type"
            )
        texts.append(part.refusal if isinstance(part, RefusalPart) else part.text)
    return "".join(texts)


# -- Chat Completions ---------------------------------------------------------------------------


class FunctionCall(Shape):
    name: Name
    arguments: ToolArguments = Field(default_factory=dict)


class ChatToolCall(Shape):
    id: Id
    function: FunctionCall


ChatContent = text_or_list(by_type({"text": TextPart, "refusal": RefusalPart}))


class ChatMessage(Shape):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: ChatContent | None = None
    tool_calls: Annotated[list[ChatToolCall], Field(max_length=MAX_TOOLS)] | None = None
    tool_call_id: Id | None = None


class FunctionSpec(Shape):
    name: ToolName
    description: Annotated[str, Field(max_length=4000)] | None = None
    parameters: ToolSchema | None = None


class ChatTool(Shape):
    type: Literal["function"]
    function: FunctionSpec


class FunctionName(Shape):
    name: Name


class NamedFunction(Shape):
    type: Literal["function"]
    function: FunctionName


class ToolRef(Shape):
    type: Literal["function"] = "function"
    function: FunctionName


class AllowedTools(Shape):
    mode: Literal["auto", "required"]
    tools: Annotated[list[ToolRef], Field(max_length=MAX_TOOLS)]


class ChatAllowedTools(Shape):
    type: Literal["allowed_tools"]
    allowed_tools: AllowedTools


class TextFormat(Shape):
    type: Literal["text"]


class JsonObjectFormat(Shape):
    type: Literal["json_object"]


class JsonSchemaSpec(Shape):
    name: SchemaName
    schema_: JsonSchema = Field(alias="schema")
    strict: bool | None = None
    description: str | None = None


class ChatJsonSchemaFormat(Shape):
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


class StreamOptions(Shape):
    include_usage: bool | None = None


ChatToolChoice = string_or(
    by_type({"function": NamedFunction, "allowed_tools": ChatAllowedTools}), ToolChoiceMode
)
ChatResponseFormat = by_type(
    {"text": TextFormat, "json_object": JsonObjectFormat, "json_schema": ChatJsonSchemaFormat}
)


class ChatRequest(RequestShape):
    """A Chat Completions body; fields in the order their errors are reported."""

    model: Annotated[str, Field(min_length=1, max_length=200)]
    max_tokens: TokenLimit | None = None
    max_completion_tokens: TokenLimit | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    n: int | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    tools: Annotated[list[ChatTool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: ChatToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ChatResponseFormat | None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=MAX_MESSAGES)]
    user: str | None = None
    safety_identifier: str | None = None
    metadata: Metadata | None = None
    # accepted for compatibility, not used: the experiment variant decides
    stop: Any = None
    seed: Any = None
    store: Any = None
    reasoning_effort: Any = None
    service_tier: Any = None
    prompt_cache_key: Any = None
    frequency_penalty: Any = None
    presence_penalty: Any = None
    logprobs: Any = None
    top_logprobs: Any = None
    verbosity: Any = None
    modalities: Any = None


def parse_chat(body: Any) -> DropinCall:
    """A Chat Completions body as a :class:`DropinCall`. Raises :class:`DropinError` (400)."""
    req = validate(ChatRequest, body)
    require(req.n in (None, 1), "Only n=1 is supported.", "n")
    tools = [
        tool_spec(t.function.name, t.function.description, t.function.parameters) for t in req.tools or ()
    ]
    messages = chat_messages(req.messages)
    fmt = openai_output_format(req.response_format, "response_format")
    refuse_json_mode_without_json(fmt, messages, "response_format")
    return DropinCall(
        model=req.model,
        messages=messages,
        tools=tools,
        stream=bool(req.stream),
        include_usage=bool(req.stream_options and req.stream_options.include_usage),
        user=req.user,
        safety_identifier=req.safety_identifier,
        metadata=req.metadata,
        output_format=fmt,
        tool_choice=openai_tool_choice(req.tool_choice, tools),
        parallel_tool_calls=req.parallel_tool_calls,
        contract_fields=CONTRACT_FIELDS,
    )


def chat_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Chat messages → our stored messages. A tool message must answer a tool call of an earlier
    assistant message (400 otherwise, as OpenAI answers)."""
    out = []
    call_ids: set[str] = set()
    for i, m in enumerate(messages):
        p = f"messages[{i}]"
        msg: dict[str, Any] = {
            "role": "system" if m.role == "developer" else m.role,
            "content": text_of(m.content, f"{p}.content"),
        }
        if m.role == "assistant" and m.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in m.tool_calls
            ]
            call_ids.update(c.id for c in m.tool_calls)
        if m.role == "tool":
            require(m.tool_call_id is not None, f"'{p}.tool_call_id': Field required.", f"{p}.tool_call_id")
            require(
                m.tool_call_id in call_ids,
                "Invalid parameter: messages with role 'tool' must be a response to a preceding "
                "message with 'tool_calls' (no tool call has this id).",
                f"{p}.tool_call_id",
            )
            msg["tool_call_id"] = m.tool_call_id
        out.append(msg)
    return out


def openai_output_format(fmt: Any, param: str) -> OutputFormat | None:
    """``response_format`` (chat) or ``text.format`` (Responses) as an
    :class:`~routing.providers.types.OutputFormat` (``None``: text). ``param`` names the field."""
    if fmt is None:
        return None
    if isinstance(fmt, Unsupported):
        raise DropinError(
            f"'{param}.type': must be 'text', 'json_object' or 'json_schema'.", param=f"{param}.type"
        )
    spec = fmt.json_schema if isinstance(fmt, ChatJsonSchemaFormat) else fmt
    if isinstance(spec, JsonSchemaSpec | ResponsesJsonSchemaFormat):
        return output_format(
            "json_schema",
            schema=spec.schema_,
            name=spec.name,
            strict=spec.strict,
            description=spec.description,
        )
    return output_format(fmt.type)


def refuse_json_mode_without_json(
    fmt: OutputFormat | None, messages: list[dict[str, Any]], param: str
) -> None:
    """OpenAI's rule for JSON mode, applied before any model is asked (OpenAI's models refuse the
    call without it): the messages must say "json" somewhere. Raises :class:`DropinError` (400
    naming ``param``)."""
    if fmt is None or fmt.type != "json_object":
        return
    require(
        any("json" in m["content"].lower() for m in messages),
        f"'messages' must contain the word 'json' in some form, to use '{param}' of type 'json_object'.",
        param,
    )


def openai_tool_choice(choice: Any, tools: list[dict[str, Any]]) -> ToolChoice | None:
    """``tool_choice`` (a mode, a named function or ``allowed_tools``; Chat Completions or
    Responses form) as a :class:`~routing.providers.types.ToolChoice` (:func:`choose_tools`)."""
    if choice is None:
        return None
    if isinstance(choice, str):
        return choose_tools(mode=choice, tools=tools)
    if isinstance(choice, Unsupported):
        raise DropinError(
            "Only function tool choices (or allowed_tools) are supported.", param="tool_choice.type"
        )
    if isinstance(choice, NamedFunction | ResponsesNamedFunction):
        name = choice.function.name if isinstance(choice, NamedFunction) else choice.name
        return choose_tools(mode="required", tools=tools, name=name)
    spec = choice.allowed_tools if isinstance(choice, ChatAllowedTools) else choice
    names = [t.function.name if isinstance(t, ToolRef) else t.name for t in spec.tools]
    return choose_tools(mode=spec.mode, tools=tools, allowed=names)


# -- Responses ----------------------------------------------------------------------------------

InputContent = text_or_list(by_type({"input_text": TextPart, "output_text": TextPart, "text": TextPart}))


class InputMessage(Shape):
    role: Literal["system", "developer", "user", "assistant"]
    content: InputContent | None = None


class FunctionCallItem(Shape):
    call_id: Id
    name: Id
    arguments: ToolArguments = Field(default_factory=dict)


class FunctionCallOutput(Shape):
    call_id: Id
    output: InputContent | None = None


class ReasoningItem(Shape):
    """A reasoning item a client sends back: dropped (we never forward reasoning we did not issue)."""


class ResponsesTool(Shape):
    type: Literal["function"]
    name: ToolName
    description: Annotated[str, Field(max_length=4000)] | None = None
    parameters: ToolSchema | None = None


class ResponsesNamedFunction(Shape):
    type: Literal["function"]
    name: Name


class ResponsesToolRef(Shape):
    type: Literal["function"] = "function"
    name: Name


class ResponsesAllowedTools(Shape):
    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: Annotated[list[ResponsesToolRef], Field(max_length=MAX_TOOLS)]


class ResponsesJsonSchemaFormat(Shape):
    type: Literal["json_schema"]
    name: SchemaName
    schema_: JsonSchema = Field(alias="schema")
    strict: bool | None = None
    description: str | None = None


class ResponsesText(Shape):
    format: by_type({"text": TextFormat, "json_object": JsonObjectFormat, "json_schema": ResponsesJsonSchemaFormat}) | None = None  # fmt: skip
    verbosity: Literal["low", "medium", "high"] | None = None


ResponsesToolChoice = string_or(
    by_type({"function": ResponsesNamedFunction, "allowed_tools": ResponsesAllowedTools}), ToolChoiceMode
)


InputItem = by_type(
    {
        "message": InputMessage,
        "function_call": FunctionCallItem,
        "function_call_output": FunctionCallOutput,
        "reasoning": ReasoningItem,
    },
    default="message",
)
#: ``input``: the user's text, or the conversation's items (at least one).
ResponsesInput = text_or_list(InputItem, text=str, min_length=1, max_length=MAX_MESSAGES)


class ResponsesRequest(RequestShape):
    """A Responses body; fields in the order their errors are reported."""

    model: Annotated[str, Field(min_length=1, max_length=200)]
    max_output_tokens: TokenLimit | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    previous_response_id: Any = None
    background: bool | None = None
    stream: bool | None = None
    tools: Annotated[list[ResponsesTool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: ResponsesToolChoice | None = None
    parallel_tool_calls: bool | None = None
    text: ResponsesText | None = None
    instructions: Text | None = None
    input: ResponsesInput = Field(default=None, validate_default=True)
    user: str | None = None
    safety_identifier: str | None = None
    metadata: Metadata | None = None
    # accepted for compatibility, not used: the experiment variant decides
    stream_options: Any = None
    store: Any = None
    include: Any = None
    reasoning: Any = None
    truncation: Any = None
    service_tier: Any = None
    prompt_cache_key: Any = None
    max_tool_calls: Any = None
    top_logprobs: Any = None


RESPONSES_CONTRACT_FIELDS = {"output_format": "text.format", "tool_choice": "tool_choice"}


def parse_responses(body: Any) -> DropinCall:
    """A Responses body as a :class:`DropinCall` (stateless: the whole conversation in ``input``).
    Raises :class:`DropinError` (400)."""
    req = validate(ResponsesRequest, body)
    require(
        req.previous_response_id is None,
        "previous_response_id is not supported: send the whole conversation in 'input'.",
        "previous_response_id",
    )
    require(not req.background, "background responses are not supported.", "background")
    tools = [tool_spec(t.name, t.description, t.parameters) for t in req.tools or ()]
    messages = responses_messages(req)
    fmt = openai_output_format(req.text and req.text.format, "text.format")
    refuse_json_mode_without_json(fmt, messages, "text.format")
    return DropinCall(
        model=req.model,
        messages=messages,
        tools=tools,
        stream=bool(req.stream),
        user=req.user,
        safety_identifier=req.safety_identifier,
        metadata=req.metadata,
        output_format=fmt,
        tool_choice=openai_tool_choice(req.tool_choice, tools),
        parallel_tool_calls=req.parallel_tool_calls,
        contract_fields=RESPONSES_CONTRACT_FIELDS,
    )


def responses_messages(req: ResponsesRequest) -> list[dict[str, Any]]:
    """``instructions`` + ``input`` → our stored messages. Consecutive ``function_call`` items
    become one assistant message with parallel tool calls; ``function_call_output`` items become
    tool messages; ``reasoning`` items are dropped."""
    out: list[dict[str, Any]] = []
    if req.instructions is not None:
        out.append({"role": "system", "content": req.instructions})
    if isinstance(req.input, str):
        out.append({"role": "user", "content": req.input})
        return out
    for i, item in enumerate(req.input):
        p = f"input[{i}]"
        if isinstance(item, InputMessage):
            role = "system" if item.role == "developer" else item.role
            out.append({"role": role, "content": text_of(item.content, f"{p}.content")})
        elif isinstance(item, FunctionCallItem):
            call = {"id": item.call_id, "name": item.name, "arguments": item.arguments}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif isinstance(item, FunctionCallOutput):
            out.append(
                {"role": "tool", "tool_call_id": item.call_id, "content": text_of(item.output, f"{p}.output")}
            )
        elif isinstance(item, Unsupported):
            raise DropinError(f"Input item type {item.type!r} is not supported.", param=f"{p}.type")
    return out
