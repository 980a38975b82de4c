"""Pure validators for experiment configuration (no Django import).

Each function returns a list of human-readable error messages (empty = valid); services and
forms turn them into ``ValidationError`` field errors.

* :func:`condition_errors` -- a GrowthBook targeting condition must be a JSON object that
  :func:`~muse_experiments.experiments.assignment.growthbook.conditions.eval_condition` can evaluate *meaningfully*:
  the evaluator never raises and treats an unknown operator or an invalid regex as "matches
  nobody", so a typo (``$gte`` written ``$gteq``) would silently exclude every unit. We refuse
  those up front instead.
* :func:`overrides_errors` -- routing overrides of a variant, the keys of
  ``routing.pipeline.planning.OVERRIDE_FIELDS`` with the types ``CompletionRequest`` accepts.
* :func:`unit_id_problem` -- the one rule for session and user ids (the strings the engine
  hashes), applied by every entry point: REST API, drop-ins, events, preview, QA pins.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

# Operators of the GrowthBook condition spec that this platform supports on a value.
VALUE_OPERATORS = frozenset(
    {
        "$eq",
        "$ne",
        "$lt",
        "$lte",
        "$gt",
        "$gte",
        "$veq",
        "$vne",
        "$vgt",
        "$vgte",
        "$vlt",
        "$vlte",
        "$exists",
        "$in",
        "$nin",
        "$ini",
        "$nini",
        "$all",
        "$alli",
        "$not",
        "$size",
        "$elemMatch",
        "$regex",
        "$regexi",
        "$notRegex",
        "$notRegexi",
        "$type",
    }
)
# Condition-level (logical) operators.
LOGICAL_OPERATORS = frozenset({"$or", "$nor", "$and", "$not"})
# Saved groups need a payload this platform does not manage; refuse rather than match nobody.
UNSUPPORTED_OPERATORS = frozenset({"$inGroup", "$notInGroup", "$savedGroup", "$savedGroups"})
JS_TYPES = frozenset({"string", "number", "boolean", "array", "object", "null", "undefined"})
MAX_CONDITION_DEPTH = 16
MAX_CONDITION_CHARS = 20_000

REASONING_EFFORTS = ("minimal", "low", "medium", "high")
MAX_OUTPUT_TOKENS_LIMIT = 200_000
TEMPERATURE_RANGE = (0.0, 2.0)
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
OVERRIDE_KEYS = (
    "reasoning_effort",
    "temperature",
    "max_output_tokens",
    "allowed_tools",
    "system_prompt_version",
)


def is_finite_number(value: Any) -> bool:
    """True for an int/float (not bool) that is neither NaN nor ±inf."""
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def condition_errors(condition: Any) -> list[str]:
    """Errors in a targeting condition; ``[]`` when it is valid.

    Accepted: ``{}`` (everyone) or a JSON object of ``{attribute path: value condition}`` and the
    logical keys ``$and``/``$or``/``$nor`` (lists of conditions) and ``$not`` (a condition). A
    value condition is a literal (string, finite number, bool, null, list, object without ``$``
    keys) or an operator object whose keys are all in :data:`VALUE_OPERATORS`, each with an
    operand of the right type (lists for ``$in``..., strings for version operators, compilable
    patterns for ``$regex``...). Nesting is limited to :data:`MAX_CONDITION_DEPTH` levels.
    """
    if not isinstance(condition, Mapping):
        return ['The condition must be a JSON object, e.g. {"tier": {"$in": ["pro"]}}.']
    errors: list[str] = []
    _check_condition(condition, "", 0, errors)
    return errors


def _where(path: str) -> str:
    return f" at {path}" if path else ""


def _check_condition(condition: Any, path: str, depth: int, errors: list[str]) -> None:
    if depth > MAX_CONDITION_DEPTH:
        errors.append(f"Condition nested deeper than {MAX_CONDITION_DEPTH} levels{_where(path)}.")
        return
    if not isinstance(condition, Mapping):
        errors.append(f"Expected a condition object{_where(path)}, got {_type_name(condition)}.")
        return
    for key, value in condition.items():
        here = f"{path}.{key}" if path else str(key)
        if not isinstance(key, str) or not key:
            errors.append(f"Attribute names must be non-empty strings{_where(path)}.")
        elif key in UNSUPPORTED_OPERATORS:
            errors.append(f"Saved groups ({key}) are not supported{_where(here)}.")
        elif key in ("$and", "$or", "$nor"):
            if not isinstance(value, list):
                errors.append(f"{key} needs a list of conditions{_where(here)}.")
                continue
            for i, sub in enumerate(value):
                _check_condition(sub, f"{here}[{i}]", depth + 1, errors)
        elif key == "$not":
            _check_condition(value, here, depth + 1, errors)
        elif key.startswith("$"):
            errors.append(f"Unknown operator {key}{_where(path)}.")
        else:
            _check_value_condition(value, here, depth + 1, errors)


def _check_literal(value: Any, path: str, errors: list[str], depth: int = 0) -> None:
    if depth > MAX_CONDITION_DEPTH:
        errors.append(f"Value nested too deeply{_where(path)}.")
    elif isinstance(value, float) and not math.isfinite(value):
        errors.append(f"Numbers must be finite{_where(path)}.")
    elif isinstance(value, list):
        for item in value:
            _check_literal(item, path, errors, depth + 1)
    elif isinstance(value, Mapping):
        for item in value.values():
            _check_literal(item, path, errors, depth + 1)
    elif not (value is None or isinstance(value, str | int | float | bool)):
        errors.append(f"Unsupported value {_type_name(value)}{_where(path)}.")


def _check_value_condition(value: Any, path: str, depth: int, errors: list[str]) -> None:
    if depth > MAX_CONDITION_DEPTH:
        errors.append(f"Condition nested deeper than {MAX_CONDITION_DEPTH} levels{_where(path)}.")
        return
    if not isinstance(value, Mapping) or not value:
        _check_literal(value, path, errors)
        return
    dollar = [k for k in value if isinstance(k, str) and k.startswith("$")]
    if not dollar:
        _check_literal(value, path, errors)
        return
    if len(dollar) != len(value):
        errors.append(f"An operator object cannot mix operators and plain keys{_where(path)}.")
        return
    for op, operand in value.items():
        _check_operator(op, operand, f"{path}.{op}", depth, errors)


def _check_operator(op: str, operand: Any, path: str, depth: int, errors: list[str]) -> None:
    if op in UNSUPPORTED_OPERATORS:
        errors.append(f"Saved groups ({op}) are not supported{_where(path)}.")
    elif op not in VALUE_OPERATORS:
        errors.append(f"Unknown operator {op}{_where(path.rsplit('.', 1)[0])}.")
    elif op in ("$eq", "$ne"):
        _check_literal(operand, path, errors)
    elif op in ("$lt", "$lte", "$gt", "$gte"):
        if not (isinstance(operand, str) or is_finite_number(operand)):
            errors.append(f"{op} needs a string or a finite number{_where(path)}.")
    elif op.startswith("$v"):
        if not isinstance(operand, str):
            errors.append(f'{op} needs a version string such as "1.2.0"{_where(path)}.')
    elif op == "$exists":
        if not isinstance(operand, bool):
            errors.append(f"$exists needs true or false{_where(path)}.")
    elif op in ("$in", "$nin", "$ini", "$nini"):
        if not isinstance(operand, list):
            errors.append(f"{op} needs a list{_where(path)}.")
        else:
            _check_literal(operand, path, errors)
    elif op in ("$all", "$alli"):
        if not isinstance(operand, list):
            errors.append(f"{op} needs a list{_where(path)}.")
        else:
            for i, item in enumerate(operand):
                _check_value_condition(item, f"{path}[{i}]", depth + 1, errors)
    elif op in ("$not", "$size"):
        if op == "$size" and not (is_finite_number(operand) or isinstance(operand, Mapping)):
            errors.append(f"$size needs a number or an operator object{_where(path)}.")
        else:
            _check_value_condition(operand, path, depth + 1, errors)
    elif op == "$elemMatch":
        if not isinstance(operand, Mapping) or not operand:
            errors.append(f"$elemMatch needs a non-empty object{_where(path)}.")
        elif all(isinstance(k, str) and k.startswith("$") for k in operand) and not (
            set(operand) <= LOGICAL_OPERATORS
        ):
            _check_value_condition(operand, path, depth + 1, errors)
        else:
            _check_condition(operand, path, depth + 1, errors)
    elif op in ("$regex", "$regexi", "$notRegex", "$notRegexi"):
        if not isinstance(operand, str):
            errors.append(f"{op} needs a pattern string{_where(path)}.")
        else:
            try:
                re.compile(operand)
            except re.error as exc:
                errors.append(f"Invalid regular expression for {op}{_where(path)}: {exc}.")
    elif op == "$type" and operand not in JS_TYPES:
        errors.append(f"$type must be one of {', '.join(sorted(JS_TYPES))}{_where(path)}.")


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def overrides_errors(overrides: Any) -> list[str]:
    """Errors in a variant's routing overrides; ``[]`` when valid.

    Schema (every key optional, no other key allowed):

    * ``reasoning_effort``: one of ``minimal``, ``low``, ``medium``, ``high``;
    * ``temperature``: finite number in [0, 2];
    * ``max_output_tokens``: integer in [1, 200000] (tokens);
    * ``allowed_tools``: list of distinct tool names (``[A-Za-z0-9_.-]{1,64}``);
    * ``system_prompt_version``: non-empty string of at most 100 characters.
    """
    if not isinstance(overrides, Mapping):
        return ["Overrides must be a JSON object."]
    errors = []
    for key in overrides:
        if key not in OVERRIDE_KEYS:
            errors.append(f"Unknown override {key!r}; allowed: {', '.join(OVERRIDE_KEYS)}.")
    if "reasoning_effort" in overrides and overrides["reasoning_effort"] not in REASONING_EFFORTS:
        errors.append(f"reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}.")
    if "temperature" in overrides:
        t = overrides["temperature"]
        low, high = TEMPERATURE_RANGE
        if not is_finite_number(t) or not low <= t <= high:
            errors.append("temperature must be a finite number between 0 and 2.")
    if "max_output_tokens" in overrides:
        m = overrides["max_output_tokens"]
        if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= MAX_OUTPUT_TOKENS_LIMIT:
            errors.append(f"max_output_tokens must be a whole number from 1 to {MAX_OUTPUT_TOKENS_LIMIT}.")
    if "allowed_tools" in overrides:
        tools = overrides["allowed_tools"]
        if not isinstance(tools, list) or not all(isinstance(t, str) and TOOL_NAME.match(t) for t in tools):
            errors.append("allowed_tools must be a list of tool names (letters, digits, '_', '.', '-').")
        elif len(set(tools)) != len(tools):
            errors.append("allowed_tools lists a tool twice.")
    if "system_prompt_version" in overrides:
        v = overrides["system_prompt_version"]
        if not isinstance(v, str) or not v.strip() or len(v) > 100:
            errors.append("system_prompt_version must be a non-empty string of at most 100 characters.")
    return errors


#: Longest session or user id (characters).
UNIT_ID_MAX = 200


def unit_id_problem(value: str) -> str | None:
    """Why ``value`` cannot be a session/user id, or ``None`` when it can.

    Unit ids are hashed exactly as given, so nothing is trimmed or normalised anywhere; ids that
    could differ invisibly are refused instead (HTTP 400 / form error): whitespace at either
    end, control or format characters (Unicode categories Cc, Cf, Zl, Zp, e.g. NUL, zero-width
    space), text not in Unicode NFC (``"e\u0301"`` must be sent as ``"\u00e9"``), or more than
    :data:`UNIT_ID_MAX` characters. The empty string is not judged here (callers decide whether
    an id is required).
    """
    if len(value) > UNIT_ID_MAX:
        return f"At most {UNIT_ID_MAX} characters."
    if value != value.strip():
        return "Remove the whitespace at the start or end: ids are used exactly as sent."
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in value):
        return "Control and invisible format characters are not allowed in ids."
    if not unicodedata.is_normalized("NFC", value):
        return "Send the id in Unicode NFC (composed) form: ids are used exactly as sent."
    return None


def tool_parameters_problem(parameters: dict[str, Any]) -> tuple[str, str] | None:
    """``(path, message)`` of the first thing in a tool's ``parameters`` that no provider accepts
    as a function's JSON Schema, or ``None``. ``path`` is relative to ``parameters`` ("" for the
    object itself, else ``.type``, ``.properties``, ``.properties.<name>``, ``.required``).

    The shape OpenAI (function ``parameters``) and Anthropic (``input_schema``) both require: an
    object schema (``type``, when given, is ``"object"`` or a list naming it), ``properties`` an
    object of schemas (a schema is an object or a boolean, JSON Schema 2020-12 §4.3.2),
    ``required`` a list of names. Anything deeper is the provider's to judge.
    """
    kind = parameters.get("type", "object")
    if kind != "object" and not (isinstance(kind, list) and "object" in kind):
        return ".type", 'A tool\'s parameters must be a JSON Schema of "type": "object".'
    properties = parameters.get("properties", {})
    if not isinstance(properties, dict):
        return ".properties", "properties must be an object mapping each parameter to its schema."
    for name, schema in properties.items():
        if not isinstance(schema, dict | bool):
            return f".properties.{name}", "Each property's schema must be an object (or true/false)."
    required = parameters.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return ".required", "required must be a list of parameter names."
    return None
