"""The drop-ins' request shapes: what they share, and how a body is checked against its shape.

Each endpoint declares its request body as pydantic v2 models in strict mode (JSON types as sent:
``"1"`` is not a number, ``1`` not a string, ``0`` not a boolean): Chat Completions and Responses
in :mod:`.openai_shapes`, Messages in :mod:`.anthropic_shapes`. A body's top level refuses
parameters it does not declare (``Unrecognized request argument supplied``); nested objects ignore
fields they do not declare (the SDKs send back more than they need). Rules across fields (a tool
result answering an earlier call, a forced tool that is among ``tools``) are checked when the
validated body becomes our stored request.

Why pydantic (v2, strict) and not DRF serializers, the native API's style: the same declarative
style, but DRF serializers for the nested message lists cost an order of magnitude more CPU than
the hand-written checks they replace, on the hot path; these shapes cost less than those checks
(``bench/bench_dropin_validation.py``, ``--drf`` for the serializers). The official SDKs build
these very bodies with pydantic.

Errors: :func:`validate` turns the first error into a :class:`~.errors.DropinError` naming the
field as OpenAI does (``messages[2].content``); messages are ours (``'messages[2].content' must
be a string or an array.``), not pydantic's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, PlainValidator, Tag
from pydantic import ValidationError as ShapeError
from pydantic_core import PydanticCustomError

from muse_experiments.api.base import MAX_JSON_DEPTH, depth_exceeds
from muse_experiments.experiments.validation import tool_parameters_problem
from muse_experiments.infra.storage_text import unstorable_paths

from ..providers.contracts import OutputFormat, ToolChoice
from .errors import DropinError, require

MAX_MESSAGES = 1000
MAX_TOOLS = 128
MAX_PARTS = 1000
#: The largest output-token limit a drop-in accepts (``max_tokens`` and its kin): above every
#: served model's output limit, so a larger value is a client bug the provider would refuse.
MAX_OUTPUT_TOKENS = 1_048_576


class Shape(BaseModel):
    """A nested object of a request body: JSON types as sent, undeclared fields ignored."""

    model_config = ConfigDict(strict=True, extra="ignore", populate_by_name=True)


class RequestShape(Shape):
    """A request body: undeclared parameters refused."""

    model_config = ConfigDict(extra="forbid")


def refuse(message: str, at: str = "") -> PydanticCustomError:
    """A validator's error: ``message`` says ``{param}`` where the field's path goes; ``at`` is a
    path below the field the error is about (``.type``, ``.properties.city``)."""
    return PydanticCustomError("dropin", message, {"at": at})


# -- scalar fields ------------------------------------------------------------------------------

Text = Annotated[str, Field(max_length=200_000)]
Id = Annotated[str, Field(min_length=1, max_length=200)]
Name = Annotated[str, Field(max_length=200)]


def _positive_int(value: Any) -> int:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise refuse("'{param}' must be a positive integer.")
    return value


def _token_limit(value: Any) -> int:
    _positive_int(value)
    if value > MAX_OUTPUT_TOKENS:
        raise refuse(f"'{{param}}' is too large: no model writes more than {MAX_OUTPUT_TOKENS} tokens.")
    return value


def number_from_zero_to(high: float) -> Any:
    """A number from 0 to ``high`` (not a boolean, not a string)."""

    def check(value: Any) -> float:
        if not (isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= high):
            raise refuse(f"'{{param}}' must be a number from 0 to {high:g}.")
        return value

    return Annotated[float, PlainValidator(check)]


#: ``max_tokens`` and its kin: a positive integer up to :data:`MAX_OUTPUT_TOKENS`. Held to the
#: provider's rules although the experiment variant decides the real value.
TokenLimit = Annotated[int, PlainValidator(_token_limit)]
PositiveInt = Annotated[int, PlainValidator(_positive_int)]
TopP = number_from_zero_to(1.0)


def _arguments(value: Any) -> dict[str, Any]:
    """Tool-call arguments sent back by a client: a JSON object, or the JSON text of one held to
    the body's own rules (nested at most ``MAX_JSON_DEPTH`` levels: deeper text would exhaust the
    decoder's recursion; no NUL or lone surrogate).

    Two checks are skipped when the text shows they cannot fail: the depth walk when the text
    holds at most ``MAX_JSON_DEPTH`` brackets in all, the NUL and surrogate walk when it holds no
    ``\\u`` escape (JSON text cannot hold a raw NUL, and the body's own text was checked for lone
    surrogates): they were most of a chat body's validation CPU (``bench/bench_dropin_validation.py``)."""
    if isinstance(value, dict):
        return value
    if not isinstance(value, str):
        raise refuse("'{param}' must be a string.")
    deep = f"'{{param}}' is nested deeper than {MAX_JSON_DEPTH} levels."
    try:
        decoded = json.loads(value or "{}")
    except ValueError:
        raise refuse("'{param}' is not valid JSON.") from None
    except RecursionError:  # deeper than the decoder goes, so deeper than the limit
        raise refuse(deep) from None
    if value.count("[") + value.count("{") > MAX_JSON_DEPTH and depth_exceeds(decoded, MAX_JSON_DEPTH):
        raise refuse(deep)
    if not isinstance(decoded, dict):
        raise refuse("'{param}' must encode a JSON object.")
    nul, surrogate = unstorable_paths(decoded, "$") if "\\u" in value else (None, None)
    if nul is not None:
        raise refuse("'{param}': NUL characters (\\u0000) are not allowed.", nul[1:])
    if surrogate is not None:
        raise refuse("'{param}': lone surrogate characters are not allowed.", surrogate[1:])
    return decoded


#: A tool call's ``arguments``: a JSON object or its JSON text (decoded).
ToolArguments = Annotated[dict[str, Any], PlainValidator(_arguments)]


def _tool_name(name: str) -> str:
    if not (name.isascii() and all(c.isalnum() or c in "_-" for c in name)):
        raise refuse("'{param}': tool names may contain only a-z, A-Z, 0-9, _ and -.")
    return name


def _tool_schema(schema: dict[str, Any]) -> dict[str, Any]:
    problem = tool_parameters_problem(schema)
    if problem:
        raise refuse(f"'{{param}}': {problem[1]}", problem[0])
    return schema


ToolName = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_tool_name)]
#: A function's JSON Schema, held to what every provider accepts (``tool_parameters_problem``).
ToolSchema = Annotated[dict[str, Any], AfterValidator(_tool_schema)]
#: A JSON Schema for the answer (an output contract): an object, judged by the provider.
JsonSchema = dict[str, Any]
#: OpenAI's rule for a JSON Schema format's name.
SchemaName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


class Metadata(Shape):
    """The ids a body's ``metadata`` may carry (the rest is the caller's and ignored)."""

    user_id: str | None = None
    session_id: str | None = None


class CacheControl(Shape):
    """An Anthropic prompt-caching breakpoint."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None

    def stored(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


# -- unions ------------------------------------------------------------------------------------

#: Union members are tagged ``<...>``; :func:`field_path` leaves the tags out of field paths.
STRING, ARRAY, OTHER = "<str>", "<list>", "<?>"


def _string_or_array(value: Any) -> str | None:
    return STRING if isinstance(value, str) else ARRAY if isinstance(value, list) else None


def text_or_list(item: Any, *, text: Any = Text, min_length: int = 0, max_length: int = MAX_PARTS) -> Any:
    """A field that takes a string (``text``) or an array of ``item`` (``min_length`` to
    ``max_length`` of them); anything else, ``null`` included, is refused as neither."""
    return Annotated[
        Union[  # noqa: UP007 - a tagged union needs the Union form
            Annotated[text, Tag(STRING)],
            Annotated[list[item], Field(min_length=min_length, max_length=max_length), Tag(ARRAY)],
        ],
        Discriminator(
            _string_or_array,
            custom_error_type="string_or_array",
            custom_error_message="must be a string or an array",
        ),
    ]


class Unsupported(Shape):
    """An object of a ``type`` the endpoint does not take; the request's conversion refuses it
    in the vendor's words, naming the type."""

    type: Any = None


def by_type(choices: Mapping[str, type[BaseModel]], *, default: str | None = None) -> Any:
    """A union of object shapes told apart by their ``type`` field (``default`` when absent): a
    ``type`` not among ``choices`` validates as :class:`Unsupported`; anything but an object is
    refused as the first choice refuses it (``must be an object``)."""
    first = next(iter(choices))

    def tag(value: Any) -> str:
        if not isinstance(value, dict):
            return f"<{first}>"
        kind = value.get("type", default)
        return f"<{kind}>" if isinstance(kind, str) and kind in choices else OTHER

    members = tuple(Annotated[shape, Tag(f"<{kind}>")] for kind, shape in choices.items())
    return Annotated[Union[(*members, Annotated[Unsupported, Tag(OTHER)])], Discriminator(tag)]  # noqa: UP007


def string_or(choices: Any, strings: Any) -> Any:
    """A field that takes one of ``strings`` (a ``Literal``) or an object of ``choices``
    (:func:`by_type`), as ``tool_choice`` does."""
    return Annotated[
        Union[Annotated[strings, Tag(STRING)], Annotated[choices, Tag("<object>")]],  # noqa: UP007
        Discriminator(lambda v: STRING if isinstance(v, str) else "<object>"),
    ]


# -- checking a body ---------------------------------------------------------------------------

S = TypeVar("S", bound=RequestShape)

#: Our messages for pydantic's error types: ``{param}`` is the field's path; other fields come
#: from the error's context.
MESSAGES = {
    "missing": "'{param}': Field required.",
    "string_type": "'{param}' must be a string.",
    "bool_type": "'{param}' must be a boolean.",
    "int_type": "'{param}' must be an integer.",
    "float_type": "'{param}' must be a number.",
    "list_type": "'{param}' must be an array.",
    "dict_type": "'{param}' must be an object.",
    "model_type": "'{param}' must be an object.",
    "model_attributes_type": "'{param}' must be an object.",
    "too_long": "'{param}' has more than {max_length} items.",
    "string_too_long": "'{param}' is longer than {max_length} characters.",
    "too_short": "'{param}' must not be empty.",
    "string_too_short": "'{param}' must not be empty.",
    "string_pattern_mismatch": "'{param}' must match the pattern {pattern}.",
    "literal_error": "'{param}': must be {expected}.",
    "string_or_array": "'{param}' must be a string or an array.",
    "extra_forbidden": "'{param}': unknown field.",
}


def validate(shape: type[S], body: Any) -> S:
    """``body`` (parsed JSON) as ``shape``; raises :class:`DropinError` (400) naming the first
    field at fault: an unknown top-level parameter first (as OpenAI answers), else the first
    error in the shape's field order."""
    if not isinstance(body, dict):
        raise DropinError("The request body must be a JSON object.")
    try:
        return shape.model_validate(body)
    except ShapeError as exc:
        raise shape_error(exc) from None


def shape_error(exc: ShapeError) -> DropinError:
    """The :class:`DropinError` for a body's validation errors (see :func:`validate`)."""
    errors = exc.errors(include_url=False, include_input=False)
    unknown = sorted(
        str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden" and len(e["loc"]) == 1
    )
    if unknown:
        return DropinError(f"Unrecognized request argument supplied: {unknown[0]}", param=unknown[0])
    error = errors[0]
    context = error.get("ctx") or {}
    param = field_path(error["loc"], context.get("at", ""))
    template = MESSAGES.get(error["type"])
    if template is None:  # ours (already formatted) or a pydantic message we have no words for
        message = error["msg"] if error["type"] == "dropin" else f"'{{param}}': {error['msg']}."
        return DropinError(message.replace("{param}", param), param=param)
    return DropinError(template.format(**{**context, "param": param}), param=param)


def field_path(loc: tuple[int | str, ...], below: str = "") -> str:
    """A pydantic error location as OpenAI names fields: ``("messages", 2, "content")`` →
    ``messages[2].content``; union tags (``<...>``) left out; ``below`` (``.type``, ``[0]``)
    appended."""
    path = ""
    for item in loc:
        if isinstance(item, int):
            path += f"[{item}]"
        elif not item.startswith("<"):
            path += f".{item}" if path else item
    if below and not path:
        return below.lstrip(".")
    return path + below


# -- the validated call ------------------------------------------------------------------------


@dataclass(slots=True)
class DropinCall:
    """A drop-in request, validated and in our terms: what the view submits.

    ``model``: as sent (a routing alias or an endpoint id); ``messages`` / ``tools``: our stored
    shapes (``routing.pipeline.planning.build_request`` reads them); ``user`` / ``safety_identifier`` /
    ``metadata``: where the caller's ids may be (:func:`~.identity.identity`); output contracts
    (``output_format``, ``tool_choice``, ``parallel_tool_calls``) and ``contract_fields``: the
    vendor's name of each contract's field, for errors (``{"output_format": "response_format"}``).
    """

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    stream: bool = False
    include_usage: bool = False
    user: str | None = None
    safety_identifier: str | None = None
    metadata: Metadata | None = None
    output_format: OutputFormat | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    contract_fields: Mapping[str, str] = field(default_factory=dict)

    def stored_contracts(self) -> dict[str, Any]:
        """The output contracts as ``CompletionJob.request`` keeps them (only those sent; a
        parallel-calls flag only when it forbids them)."""
        stored: dict[str, Any] = {}
        if self.output_format is not None:
            stored["output_format"] = self.output_format.to_dict()
        if self.tool_choice is not None:
            stored["tool_choice"] = self.tool_choice.to_dict()
        if self.parallel_tool_calls is False:
            stored["parallel_tool_calls"] = False
        return stored


def tool_spec(name: str, description: str | None, parameters: dict[str, Any] | None) -> dict[str, Any]:
    """A tool as ``POST /api/v1/completions`` stores it."""
    return {"name": name, "description": description or "", "parameters": parameters or {}}


def choose_tools(
    *,
    mode: Literal["auto", "none", "required"],
    tools: list[dict[str, Any]],
    name: str | None = None,
    allowed: list[str] | None = None,
) -> ToolChoice | None:
    """The caller's tool choice as a :class:`ToolChoice` (``None``: plain ``auto``, the default),
    held to the vendors' rules: forcing a call (``required``, a named tool) or naming the allowed
    tools needs ``tools``, and every tool named must be among them. Raises :class:`DropinError`
    (400 naming ``tool_choice``)."""
    names = {t["name"] for t in tools}
    require(
        bool(names) or (mode != "required" and allowed is None),
        "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
        "tool_choice",
    )
    for named in ([name] if mode == "required" and name is not None else []) + (allowed or []):
        require(
            named in names,
            f"Invalid value for 'tool_choice': tool {named!r} is not among 'tools'.",
            "tool_choice",
        )
    if mode == "auto" and allowed is None:
        return None
    return ToolChoice(mode, name, tuple(allowed) if allowed is not None else None)


def output_format(
    kind: str, *, schema: JsonSchema | None = None, name: str | None = None, strict: bool | None = None,
    description: str | None = None,
) -> OutputFormat | None:  # fmt: skip
    """The caller's output format as an :class:`OutputFormat` (``None`` for plain text)."""
    if kind == "text":
        return None
    if kind == "json_object":
        return OutputFormat("json_object")
    return OutputFormat(
        "json_schema", schema=schema, name=name or "response", strict=strict, description=description
    )
