"""Outcome events posted by clients and the result snapshots computed from them."""

from __future__ import annotations

from django.db import models


class OutcomeEvent(models.Model):
    """An outcome for a unit (``task_success`` 0/1, ``rating`` 1–5, or a custom name).

    ``event_id`` is the client's idempotency key: posting the same id twice stores one row.
    """

    event_id = models.CharField(max_length=200, unique=True)
    name = models.CharField(max_length=100)
    session_id = models.CharField(max_length=200, blank=True, db_index=True)
    user_id = models.CharField(max_length=200, blank=True, db_index=True)
    value = models.FloatField()
    occurred_at = models.DateTimeField()
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["name", "session_id"]), models.Index(fields=["name", "user_id"])]

    def __str__(self) -> str:
        return f"{self.name}={self.value} ({self.event_id})"


class ResultSnapshot(models.Model):
    """Results of one experiment phase, with the sufficient statistics that produced them."""

    experiment = models.ForeignKey(
        "muse_experiments.Experiment", on_delete=models.CASCADE, related_name="results"
    )
    phase = models.PositiveIntegerField()
    computed_at = models.DateTimeField(auto_now_add=True, db_index=True)
    inputs = models.JSONField(help_text="Per-variant sufficient statistics per metric.")
    results = models.JSONField(help_text="Comparisons, SRM; JSON without NaN/Infinity.")

    class Meta:
        ordering = ["-computed_at"]
        get_latest_by = "computed_at"

    def __str__(self) -> str:
        return f"{self.experiment_id} phase {self.phase} @ {self.computed_at:%Y-%m-%d %H:%M}"
