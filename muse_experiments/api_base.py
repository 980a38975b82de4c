"""Shared pieces of the REST API: strict serializers and an attributes field."""

from __future__ import annotations

import math

from rest_framework import serializers


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
