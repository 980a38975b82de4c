"""OpenAPI schema generation settings (kept apart from :mod:`.base`: drf-spectacular imports DRF views,
which import the parser classes named in settings)."""

from __future__ import annotations

from drf_spectacular.openapi import AutoSchema


class MuseAutoSchema(AutoSchema):
    """drf-spectacular schema whose component names stay unique with nested serializers.

    Views declare ``InputSerializer``/``OutputSerializer`` inside themselves; by default every one
    becomes the component ``Input``/``Output`` and they overwrite each other. Nested serializers are
    named after their view instead: ``CompletionCreateApi.InputSerializer`` → ``CompletionCreateInput``.
    """

    def get_serializer_name(self, serializer, direction):
        name = super().get_serializer_name(serializer, direction)
        cls = serializer if isinstance(serializer, type) else type(serializer)
        parts = cls.__qualname__.split(".")
        if len(parts) >= 2 and name == parts[-1]:
            return parts[-2].removesuffix("Api") + name
        return name
