"""REST plumbing for resources addressed by a unique ``key`` (rollouts, shadow tests): the audit
actor of a call, Django ``ValidationError`` → 400 with field errors, and one view for a state
transition (``POST /<things>/{key}/<action>``).

Generic: it names no model and imports no app; each app's API passes its own model, transition
and payload (:mod:`muse_experiments.experiments.apis_rollouts`, :mod:`routing.shadow.apis`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Model
from django.shortcuts import get_object_or_404
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from .auth import HasScope


def api_actor(user) -> str:
    """Audit actor of an API call, one spelling for every API: ``api-key:<key name> (<prefix>)``
    for an API key, else the username of the staff session (as the admin records it)."""
    key = getattr(user, "key", None)
    if key is not None:
        return f"api-key:{key.name} ({key.prefix})"
    return getattr(user, "get_username", lambda: "")() or "unknown"


@contextlib.contextmanager
def field_errors() -> Iterator[None]:
    """Turn a service's Django ``ValidationError`` into DRF's, so the API answers 400 with
    ``{"field": ["message", ...]}`` (a message without a field goes under ``non_field_errors``)
    instead of a 500."""
    try:
        yield
    except ValidationError as exc:
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        raise serializers.ValidationError(detail) from None


class KeyedTransitionApi(APIView):
    """``POST`` on one object found by its ``key`` (404 when there is none): run
    :meth:`transition` with the caller as actor and answer 200 with :meth:`payload` of the result;
    a transition the object's state does not allow (the service's ``ValidationError``) is a 400
    with field errors. Subclasses set ``model`` and implement both methods; the scope is
    ``experiments:write``. Document the responses with ``extend_schema_view(post=...)``."""

    permission_classes = [HasScope]
    required_scope = "experiments:write"
    model: type[Model]

    def transition(self, obj: Any, actor: str) -> Any:
        """Apply the state change; returns the changed object. Raises ``ValidationError``."""
        raise NotImplementedError

    def payload(self, obj: Any) -> dict:
        """The response body for the changed object."""
        raise NotImplementedError

    def post(self, request, key: str) -> Response:
        obj = get_object_or_404(self.model, key=key)
        with field_errors():
            obj = self.transition(obj, api_actor(request.user))
        return Response(self.payload(obj))
