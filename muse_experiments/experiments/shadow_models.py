"""Shadow tests: a candidate model answers a sample of live sessions' calls beside the model that
served them, its answers compared and never returned to anyone.

A :class:`ShadowTest` is configured by a product manager (REST, admin); a :class:`ShadowPair` is one
primary call with the shadow call made for it (written by the ``shadow`` Celery queue's worker,
off the caller's path). Business rules: :mod:`muse_experiments.experiments.services.shadow`.
"""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models


class ShadowStatus(models.TextChoices):
    DRAFT = "draft"
    RUNNING = "running"
    STOPPED = "stopped"


class ShadowTest(models.Model):
    """A candidate model mirrored on ``sample_percent`` % of sessions (hashed with the key).

    Source: the traffic a model served (``source_model``), or one experiment variant's traffic
    (``source_experiment`` + ``source_variant``). ``judge``: a model comparing the two answers
    pairwise (optional). ``max_usd_per_day``: the candidate's and the judge's calls together, per
    UTC day. ``allow_external``: a candidate or judge at an external provider is allowed.
    """

    key = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200)
    status = models.CharField(max_length=10, choices=ShadowStatus.choices, default=ShadowStatus.DRAFT)
    candidate = models.ForeignKey(
        "routing.ModelEndpoint", on_delete=models.PROTECT, related_name="shadow_tests_as_candidate"
    )
    source_model = models.ForeignKey(
        "routing.ModelEndpoint",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="shadow_tests_as_source",
    )
    source_experiment = models.ForeignKey(
        "muse_experiments.Experiment",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="shadow_tests",
    )
    source_variant = models.CharField(max_length=100, blank=True)
    sample_percent = models.FloatField(validators=[MinValueValidator(0.0), MaxValueValidator(100.0)])
    judge = models.ForeignKey(
        "routing.ModelEndpoint",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="shadow_tests_as_judge",
    )
    judge_instructions = models.TextField(blank=True)
    max_usd_per_day = models.DecimalField(max_digits=14, decimal_places=6, validators=[MinValueValidator(0)])
    allow_external = models.BooleanField(default=False)
    created_by = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(sample_percent__gte=0.0, sample_percent__lte=100.0),
                name="shadow_sample_percent_0_100",
            ),
            models.CheckConstraint(
                condition=models.Q(max_usd_per_day__gte=0), name="shadow_budget_non_negative"
            ),
        ]

    def __str__(self) -> str:
        return self.key


class ShadowVerdict(models.TextChoices):
    CANDIDATE = "candidate"
    PRIMARY = "primary"
    TIE = "tie"
    INVALID = "invalid"


class ShadowPair(models.Model):
    """One primary call and the shadow call made for it (never shown to anyone, never trained on).

    Latencies in ms, costs in USD, tokens as billed. ``*_tool_calls``: ``[{"name", "arguments"}]``.
    ``candidate_ok`` false: the candidate failed (``error`` says how; its figures are null).
    ``judge_candidate_first``: the order the judge saw the answers in (randomised per pair);
    ``judge_verdict`` blank when no judge ran.
    """

    test = models.ForeignKey(ShadowTest, on_delete=models.CASCADE, related_name="pairs")
    job_id = models.CharField(max_length=64)
    session_id = models.CharField(max_length=200)
    user_id = models.CharField(max_length=200)
    primary_model = models.CharField(max_length=200)
    primary_latency_ms = models.FloatField()
    primary_cost_usd = models.DecimalField(max_digits=14, decimal_places=8)
    primary_output_tokens = models.PositiveIntegerField()
    primary_tool_calls = models.JSONField(default=list)
    candidate_model = models.CharField(max_length=200)
    candidate_ok = models.BooleanField(default=True)
    candidate_latency_ms = models.FloatField(null=True)
    candidate_cost_usd = models.DecimalField(max_digits=14, decimal_places=8, default=0)
    candidate_output_tokens = models.PositiveIntegerField(null=True)
    candidate_tool_calls = models.JSONField(default=list)
    candidate_text = models.TextField(blank=True)
    error = models.CharField(max_length=300, blank=True)
    judge_model = models.CharField(max_length=200, blank=True)
    judge_candidate_first = models.BooleanField(null=True)
    judge_verdict = models.CharField(max_length=10, choices=ShadowVerdict.choices, blank=True)
    judge_cost_usd = models.DecimalField(max_digits=14, decimal_places=8, default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["test", "job_id"], name="shadow_pair_once_per_job")]
        indexes = [models.Index(fields=["test", "session_id"], name="shadow_pair_session_idx")]

    def __str__(self) -> str:
        return f"{self.test_id}:{self.job_id}"
