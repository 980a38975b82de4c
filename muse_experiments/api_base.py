"""Shared pieces of the REST API: a size-bounded strict JSON parser, strict serializers and an
attributes field."""

from __future__ import annotations

import codecs
import contextlib
import json
import math

from django.conf import settings
from rest_framework import exceptions, parsers, serializers, status

from .storage_text import nul_path, surrogate_path
from .validation import UNIT_ID_MAX, unit_id_problem


class RequestTooLarge(exceptions.APIException):
    """413: the body is larger than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` bytes (``MAX_REQUEST_BYTES``)."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "request_too_large"
    default_detail = "Request body too large."


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


class BoundedJSONParser(parsers.JSONParser):
    """JSON bodies up to ``settings.DATA_UPLOAD_MAX_MEMORY_SIZE`` bytes; NaN/Infinity and numbers that overflow a float (``1e400``) refused;
    a NUL character in any string or key refused with a 400 naming the field (:func:`refuse_nul`).

    Raises :class:`RequestTooLarge` (413) when ``Content-Length`` — or, for a chunked body, the
    bytes actually read — exceed the limit, and ``ParseError`` (400) for malformed JSON. DRF's own
    parser reads the stream without a limit, which Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` does
    not cover.
    """

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        request = (parser_context or {}).get("request")
        meta = getattr(request, "META", {}) if request is not None else {}
        try:
            declared = int(meta.get("CONTENT_LENGTH") or 0)
        except (TypeError, ValueError):
            declared = 0
        if limit is not None and declared > limit:
            _drain(stream)
            raise RequestTooLarge(f"Request body too large: {declared} bytes; the limit is {limit}.")
        raw = stream.read(limit + 1) if limit is not None else stream.read()
        if limit is not None and len(raw) > limit:
            _drain(stream)
            raise RequestTooLarge(f"Request body too large; the limit is {limit} bytes.")
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.decode(raw, encoding)
            data = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
        except (ValueError, LookupError) as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None
        except RecursionError:
            raise exceptions.ParseError("JSON parse error - nested too deeply.") from None
        if depth_exceeds(data, MAX_JSON_DEPTH):
            raise exceptions.ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels.")
        refuse_nul(data)
        return data


def refuse_nul(data, path: str = "") -> None:
    """Raise a 400 ``ValidationError`` naming the first field of client input that holds a NUL
    character (PostgreSQL cannot store one) or a lone surrogate (no UTF-8 encoding, so no
    database can); see :mod:`muse_experiments.storage_text`."""
    where = nul_path(data, path)
    if where is not None:
        raise exceptions.ValidationError({where: [NUL_MESSAGE]})
    where = surrogate_path(data, path)
    if where is not None:
        raise exceptions.ValidationError({where: [SURROGATE_MESSAGE]})


NUL_MESSAGE = "NUL characters (\\u0000) are not allowed."
SURROGATE_MESSAGE = "Lone surrogate characters (\\ud800-\\udfff) are not allowed."


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range (larger than a 64-bit float)")
    return value


#: Deepest nesting of objects/arrays a request body may have (conditions, attributes, tool schemas).
MAX_JSON_DEPTH = 64
#: Most bytes of an oversize body read and discarded so the connection stays usable (keep-alive).
DRAIN_MAX_BYTES = 64 * 1024 * 1024


def _drain(stream) -> None:
    """Read and discard what is left of a refused body, so the server does not parse its tail as
    the next request on a kept-alive connection."""
    remaining = DRAIN_MAX_BYTES
    while remaining > 0:
        chunk = stream.read(min(65536, remaining))
        if not chunk:
            return
        remaining -= len(chunk)


def depth_exceeds(value, limit: int) -> bool:
    """True when ``value`` nests dicts/lists deeper than ``limit`` (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


class StrictSerializer(serializers.Serializer):
    """Rejects fields it does not declare (a typo never silently drops data)."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class FiniteFloatField(serializers.FloatField):
    """A float that refuses NaN and ±Infinity."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not math.isfinite(value):
            raise serializers.ValidationError("Must be a finite number.")
        return value


class AttributesField(serializers.DictField):
    """Targeting attributes: a flat or nested JSON object of at most 64 keys."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if len(value) > 64:
            raise serializers.ValidationError("At most 64 attributes.")
        return value


class UnitIdField(serializers.CharField):
    """A session or user id: kept exactly as sent (no trimming) and refused with a field error
    when :func:`muse_experiments.validation.unit_id_problem` finds it ambiguous."""

    def __init__(self, **kwargs):
        kwargs.setdefault("max_length", UNIT_ID_MAX)
        kwargs["trim_whitespace"] = False
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        problem = unit_id_problem(value)
        if problem:
            raise serializers.ValidationError(problem)
        return value


class DrainRefusedBodyMiddleware:
    """After a 413, read and discard what is left of the request body (up to
    :data:`DRAIN_MAX_BYTES`) so a kept-alive connection stays usable: otherwise the server can
    take the body's unread tail for the next request and drop the connection, and the client's
    next pooled request fails ("Server disconnected"). Django refuses an oversize
    ``Content-Length`` without reading the body (``RequestDataTooBig``)."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code == status.HTTP_413_REQUEST_ENTITY_TOO_LARGE:
            stream = request.META.get("wsgi.input")
            try:
                declared = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                declared = 0
            if stream is not None and declared <= DRAIN_MAX_BYTES:
                with contextlib.suppress(OSError, ValueError):  # the client went away: nothing to keep
                    if declared:
                        stream.read()  # the rest of a declared body (the server bounds it by its length)
                    else:
                        _drain(stream)  # chunked: in bounded pieces
        return response
