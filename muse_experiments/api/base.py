"""Shared pieces of the REST API: a size-bounded strict JSON parser, strict serializers and an
attributes field."""

from __future__ import annotations

import codecs
import contextlib
import io
import json
import math
from typing import Any

from django.conf import settings
from django.core.handlers.wsgi import LimitedStream
from django.utils.http import parse_header_parameters
from rest_framework import exceptions, parsers, serializers, status

from muse_experiments.infra.storage_text import unstorable_paths


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
        refuse_unknown_charset(meta.get("CONTENT_TYPE", ""))
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
            data = json.loads(
                text, parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_bounded_int
            )
        except (ValueError, LookupError) as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None
        except RecursionError:
            raise exceptions.ParseError("JSON parse error - nested too deeply.") from None
        if depth_exceeds(data, MAX_JSON_DEPTH):
            raise exceptions.ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels.")
        refuse_nul(data)
        return data


def refuse_unknown_charset(content_type: str) -> None:
    """Raise a 415 ``UnsupportedMediaType`` naming the charset when ``content_type`` (the raw
    ``Content-Type`` header) names one Python does not know (``application/json; charset=foo``).
    Django silently falls back to UTF-8 for an unknown charset; we refuse it instead."""
    _, params = parse_header_parameters(content_type or "")
    charset = params.get("charset")
    if charset is None:
        return
    try:
        codecs.lookup(charset)
    except LookupError:
        raise exceptions.UnsupportedMediaType(
            content_type,
            detail=f"Unsupported charset {charset!r} in Content-Type; send JSON as UTF-8 (charset=utf-8).",
        ) from None


def refuse_nul(data, path: str = "") -> None:
    """Raise a 400 ``ValidationError`` naming the first field of client input that holds a NUL
    character (PostgreSQL cannot store one) or a lone surrogate (no UTF-8 encoding, so no
    database can); see :mod:`muse_experiments.infra.storage_text`."""
    nul, surrogate = unstorable_paths(data, path)
    if nul is not None:
        raise exceptions.ValidationError({nul: [NUL_MESSAGE]})
    if surrogate is not None:
        raise exceptions.ValidationError({surrogate: [SURROGATE_MESSAGE]})


NUL_MESSAGE = "NUL characters (\\u0000) are not allowed."
SURROGATE_MESSAGE = "Lone surrogate characters (\\ud800-\\udfff) are not allowed."


#: Longest integer a request body may hold (Python's own limit for converting text to int).
MAX_INT_DIGITS = 4300


def _bounded_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS:
        raise ValueError(f"a number has more than {MAX_INT_DIGITS} digits")
    return int(text)


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
    """Rejects fields it does not declare (a typo never silently drops data), and JSON values of
    the wrong type: DRF on its own turns ``123`` into ``"123"`` for a string field and ``"yes"``
    into ``True`` for a boolean one, so a client's bug would be stored as if it were meant. The
    items of a ``ListField`` are checked against its child the same way (``[true, "5"]`` is not a
    list of numbers): the error is ``{field: {index: [message]}}``, DRF's shape for list items.
    Serializers of query strings (where every value is text) set ``json_types = False``."""

    json_types = True

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
            wrong = {
                name: message if isinstance(message, dict) else [message]
                for name, value in data.items()
                if self.json_types
                and value is not None
                and (message := _json_type_error(self.fields[name], value))
            }
            if wrong:  # reported with the other fields' errors, this field's own check replaced
                try:
                    super().to_internal_value(data)
                except serializers.ValidationError as exc:
                    others = exc.detail if isinstance(exc.detail, dict) else {}
                    raise serializers.ValidationError({**others, **wrong}) from None
                raise serializers.ValidationError(wrong)
        return super().to_internal_value(data)


def _json_type_error(field: serializers.Field, value: object) -> str | dict[int, Any] | None:
    """The error for a JSON ``value`` of the wrong type for ``field``, else None. For a list of a
    ``ListField``, ``{index: [message]}`` of its wrong items (nested lists nest the same way)."""
    if isinstance(field, serializers.ListField):
        if not isinstance(value, list):
            return None  # not a list at all: the field's own check says so
        items = {
            i: message if isinstance(message, dict) else [message]
            for i, item in enumerate(value)
            if item is not None and (message := _json_type_error(field.child, item))
        }
        return items or None
    if isinstance(field, serializers.BooleanField):
        return None if isinstance(value, bool) else "Must be a JSON boolean (true or false)."
    if isinstance(field, serializers.CharField):
        return None if isinstance(value, str) else "Must be a JSON string."
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(field, serializers.IntegerField):
        ok = number and isinstance(value, int)
        return None if ok else "Must be a JSON integer (not a string or a boolean)."
    if isinstance(field, serializers.FloatField):
        return None if number else "Must be a JSON number (not a string or a boolean)."
    return None


class FiniteFloatField(serializers.FloatField):
    """A float that refuses NaN and ±Infinity."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not math.isfinite(value):
            raise serializers.ValidationError("Must be a finite number.")
        return value


#: The one 400 message for an id, key or label sent with white space around it.
SURROUNDING_SPACE_MESSAGE = "Remove the spaces around it: ids and labels are matched exactly."


class IdentifierField(serializers.CharField):
    """An id, key or version label exactly as sent: white space before or after it is refused
    (400, :data:`SURROUNDING_SPACE_MESSAGE`), never trimmed, so what is looked up is what the
    caller wrote; white space inside it is left to the lookup, which finds nothing. Other
    ``CharField`` options (``max_length``, ``allow_blank``, ``required``) apply as usual."""

    def __init__(self, **kwargs) -> None:
        kwargs["trim_whitespace"] = False
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if value != value.strip():
            raise serializers.ValidationError(SURROUNDING_SPACE_MESSAGE)
        return value


class KeyField(serializers.SlugField):
    """A key (experiment, variant, rollout, shadow test) exactly as sent: DRF's slug check
    (letters, digits, ``-``, ``_``), with white space before or after it refused (400,
    :data:`SURROUNDING_SPACE_MESSAGE`) instead of trimmed, like every other id and label
    (:class:`IdentifierField`). Extra ``validators`` (a lowercase-only rule) apply after it."""

    def __init__(self, **kwargs) -> None:
        kwargs["trim_whitespace"] = False
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, str) and data != data.strip():
            raise serializers.ValidationError(SURROUNDING_SPACE_MESSAGE)
        return super().to_internal_value(data)


class AttributesField(serializers.DictField):
    """Targeting attributes: a flat or nested JSON object of at most 64 keys."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if len(value) > 64:
            raise serializers.ValidationError("At most 64 attributes.")
        return value


class ChunkedBodyMiddleware:
    """Give Django a chunked request body (``Transfer-Encoding: chunked``, no ``Content-Length``).

    gunicorn de-chunks the body into ``wsgi.input`` but sets no ``CONTENT_LENGTH``; Django then
    reads the body as empty (``LimitedStream`` of length 0) and DRF never calls the parser, so a
    proxy that re-chunks an SDK's request would turn it into a confusing "field required" 400.
    This middleware reads the de-chunked body, at most ``DATA_UPLOAD_MAX_MEMORY_SIZE`` + 1 bytes,
    and hands it on with its real ``CONTENT_LENGTH``. Over the limit it discards the rest (up to
    :data:`DRAIN_MAX_BYTES`, keeping keep-alive usable) and hands on the first limit + 1 bytes,
    so the view answers its usual (provider-shaped, for drop-ins) 413. Must come first in
    ``MIDDLEWARE``. A server that passes the raw chunked framing through is not supported
    (gunicorn, the production server, de-chunks).
    """

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        meta = request.META
        if "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower() and not meta.get("CONTENT_LENGTH"):
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            stream = meta["wsgi.input"]
            try:
                raw = _read_up_to(stream, limit + 1 if limit is not None else None)
            except Exception as exc:  # noqa: BLE001 - whatever the server raises for a broken body
                # (gunicorn: InvalidChunkSize, ChunkMissingTerminator, InvalidChunkExtension,
                # NoMoreData): the view's parser answers its usual 400, in the API's shape
                meta["CONTENT_LENGTH"] = "1"
                request._stream = _BrokenBody(f"Malformed chunked request body ({type(exc).__name__}).")
                return self.get_response(request)
            if limit is not None and len(raw) > limit:
                with contextlib.suppress(OSError, ValueError):  # the client went away
                    _drain(stream)
            meta["CONTENT_LENGTH"] = str(len(raw))
            meta["wsgi.input"] = io.BytesIO(raw)  # what is left to drain is already drained
            request._stream = LimitedStream(io.BytesIO(raw), len(raw))
        return self.get_response(request)


class _BrokenBody:
    """A request body that could not be read: reading it raises DRF's ``ParseError`` (a 400)."""

    def __init__(self, message: str) -> None:
        self.message = message

    def read(self, *args, **kwargs) -> bytes:
        raise exceptions.ParseError(self.message)

    readline = read

    def close(self) -> None:
        pass


def _read_up_to(stream, size: int | None) -> bytes:
    """Read ``stream`` to its end or to ``size`` bytes, whichever comes first (a short read is
    not the end: gunicorn returns a chunk at a time)."""
    parts, got = [], 0
    while size is None or got < size:
        chunk = stream.read(65536 if size is None else min(65536, size - got))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


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
