"""Who a drop-in call is for: its session and user ids, from the X-Muse headers or the body.

The user comes from, in order: the ``X-Muse-User-Id`` header, the body's ``user``,
``safety_identifier`` (OpenAI's successor of ``user``), ``metadata.user_id``; the session from
``X-Muse-Session-Id``, else ``metadata.session_id``. Missing session → the user id; both missing
→ a fresh id per request (each call its own unit: no sticky lookup, and no encrypted reasoning
kept for it, since no later call can continue it; :func:`routing.pipeline.planning.is_anonymous`).
"""

from __future__ import annotations

import uuid

from muse_experiments.experiments.validation import unit_id_problem

from .errors import DropinError, require
from .shapes import Metadata


def header_text(request, name: str, *, max_len: int = 200) -> str:
    """A request header as the UTF-8 text the client sent ("" when absent).

    WSGI hands headers over as ISO-8859-1 (PEP 3333), so ``café`` would arrive as ``cafÃ©`` and
    never join the events that name ``café``; the bytes are decoded as UTF-8 instead. Raises
    :class:`DropinError` (400 naming the header) for bytes that are not UTF-8 or a value longer than
    ``max_len`` characters (refused, not cut: two keys sharing a prefix must not collide).
    """
    raw = request.headers.get(name) or ""
    try:
        value = raw.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        raise DropinError(f"The {name} header is not valid UTF-8.", param=name) from None
    require(len(value) <= max_len, f"The {name} header is longer than {max_len} characters.", name)
    return value


def identity(
    request,
    *,
    user: str | None = None,
    safety_identifier: str | None = None,
    metadata: Metadata | None = None,
) -> tuple[str, str, bool]:
    """``(session_id, user_id, anonymous)`` (see the module docstring). ``anonymous``: neither was
    given, so both are a unit id made for this call. The body's ids are strings already (the
    request shapes refuse anything else rather than ignoring it, which made the call an anonymous
    unit of its own). Raises :class:`DropinError` (400) naming where an ambiguous id
    (:func:`~muse_experiments.experiments.validation.unit_id_problem`) came from.
    """
    meta = metadata or Metadata()

    def first(*sources: tuple[str | None, str]) -> tuple[str, str]:
        return next(((value, param) for value, param in sources if value), ("", ""))

    user_id, user_param = first(
        (header_text(request, "X-Muse-User-Id"), "X-Muse-User-Id"),
        (user, "user"),
        (safety_identifier, "safety_identifier"),
        (meta.user_id, "metadata.user_id"),
    )
    session_id, session_param = first(
        (header_text(request, "X-Muse-Session-Id"), "X-Muse-Session-Id"),
        (meta.session_id, "metadata.session_id"),
    )
    for value, param in ((session_id, session_param), (user_id, user_param)):
        problem = unit_id_problem(value) if value else None
        require(problem is None, f"'{param}': {problem}", param)
    anonymous = not (session_id or user_id)
    session_id = session_id or user_id or f"anon-{uuid.uuid4().hex}"
    user_id = user_id or session_id
    return session_id, user_id, anonymous
