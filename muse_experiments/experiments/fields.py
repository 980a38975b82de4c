"""Serializer fields for the experiments' vocabulary, used by every app's API (the unit ids that
assignment hashes: a session or user id)."""

from __future__ import annotations

from rest_framework import serializers

from .validation import UNIT_ID_MAX, unit_id_problem


class UnitIdField(serializers.CharField):
    """A session or user id: kept exactly as sent (no trimming) and refused with a field error
    when :func:`~muse_experiments.experiments.validation.unit_id_problem` finds it ambiguous."""

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
