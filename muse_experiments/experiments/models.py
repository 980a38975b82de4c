"""Experiments: what product managers configure, and the durable record of who got what.

Business rules live in :mod:`muse_experiments.experiments.services`; reads in :mod:`muse_experiments.experiments.selectors`.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

key_validator = RegexValidator(r"^[a-z0-9][a-z0-9_-]*$", "Use lowercase letters, digits, '-' and '_'.")
#: Experiment keys that would collide with API paths under /api/v1/experiments/.
reserved_key_validator = RegexValidator(
    r"^(preview-assignment)$", "This key is reserved by the API; choose another.", inverse_match=True
)


class ExperimentStatus(models.TextChoices):
    DRAFT = "draft"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"
    ARCHIVED = "archived"


class ExperimentType(models.TextChoices):
    AB = "ab", "A/B test (fixed weights)"
    BANDIT = "bandit", "Bandit (Thompson sampling moves the weights)"


class UnitType(models.TextChoices):
    SESSION = "session", "Session id"
    USER = "user", "User id"


class LayerHash(models.IntegerChoices):
    """How a layer hashes units onto its [0, 1) space (see ``assignment.specs.LayerSpec``)."""

    GROWTHBOOK = 1, "GrowthBook namespace hash (compatible; correlated for similar layer keys)"
    UNBIASED = 2, "Unbiased hash (independent layers whatever their keys; the default)"


class Layer(models.Model):
    """A namespace: experiments in one layer take disjoint ranges of its hash space.

    ``hash_version`` 2 (the default for new layers) makes layers independent whatever their keys;
    1 is GrowthBook's namespace hash, kept for layers that must line up with GrowthBook namespaces
    (and for layers created before version 2 existed, so their units keep their assignment).
    """

    key = models.SlugField(max_length=64, unique=True, validators=[key_validator])
    description = models.TextField(blank=True)
    hash_version = models.PositiveSmallIntegerField(
        choices=LayerHash.choices,
        default=LayerHash.UNBIASED,
        help_text="Unbiased keeps layers independent. Choose the GrowthBook hash only to match units "
        "with a GrowthBook namespace of the same key; it correlates layers whose keys differ in a "
        "few characters (layer-a / layer-b). Fixed once an experiment uses the layer.",
    )

    def __str__(self) -> str:
        return self.key


class Experiment(models.Model):
    key = models.SlugField(max_length=100, unique=True, validators=[key_validator, reserved_key_validator])
    name = models.CharField(max_length=200)
    hypothesis = models.TextField(blank=True)
    owner = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=10, choices=ExperimentStatus.choices, default=ExperimentStatus.DRAFT)
    type = models.CharField(
        max_length=10,
        choices=ExperimentType.choices,
        default=ExperimentType.AB,
        help_text="A bandit recomputes the weights on schedule from the primary metric; fixed once started.",
    )
    bandit = models.JSONField(
        default=dict,
        blank=True,
        help_text='Bandit settings (type "bandit" only): {"metric", "update_every_minutes", '
        '"explore_minutes", "min_weight_per_arm", "stop_when_probability_best"}.',
    )
    unit_type = models.CharField(max_length=10, choices=UnitType.choices, default=UnitType.SESSION)
    seed = models.CharField(max_length=100, blank=True, help_text="Hash seed; blank means the key.")
    coverage = models.FloatField(
        default=1.0,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Share (0–1) of eligible units that enter the experiment.",
    )
    layer = models.ForeignKey(
        Layer, null=True, blank=True, on_delete=models.PROTECT, related_name="experiments"
    )
    layer_start = models.FloatField(default=0.0, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)])
    layer_end = models.FloatField(default=1.0, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)])
    condition = models.JSONField(
        default=dict, blank=True, help_text="GrowthBook targeting condition on request attributes."
    )
    primary_metric = models.CharField(max_length=100, default="task_success")
    guardrail_metrics = models.JSONField(default=list, blank=True)
    phase = models.PositiveIntegerField(
        default=0, help_text="Current phase number; 0 before the first start."
    )
    started_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    version = models.PositiveIntegerField(
        default=1,
        editable=False,
        help_text="Bumped by every change; an edit based on an older version is refused "
        "(optimistic concurrency, shared by the admin and the API).",
    )

    class Meta:
        ordering = ["key"]

    def __str__(self) -> str:
        return self.key

    @property
    def hash_seed(self) -> str:
        return self.seed or self.key


class Variant(models.Model):
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="variants")
    key = models.SlugField(max_length=100, validators=[key_validator])
    name = models.CharField(max_length=200, blank=True)
    weight = models.FloatField(
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)], help_text="Share 0–1."
    )
    endpoint = models.ForeignKey("routing.ModelEndpoint", on_delete=models.PROTECT, related_name="variants")
    is_control = models.BooleanField(default=False)
    overrides = models.JSONField(
        default=dict, blank=True, help_text="Routing overrides, e.g. reasoning_effort."
    )
    position = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["experiment", "position", "id"]
        constraints = [models.UniqueConstraint(fields=["experiment", "key"], name="unique_variant_key")]

    def __str__(self) -> str:
        return f"{self.experiment.key}:{self.key}"


class PhaseReason(models.TextChoices):
    START = "start", "First start"
    CHANGE = "change", "Weights, coverage, layer slice or variants changed"
    RERANDOMISE = "rerandomise", "Re-randomised (new seed)"
    BANDIT = "bandit", "Bandit update (weights recomputed)"


class ExperimentPhase(models.Model):
    """A period of constant configuration; analysis reads one phase.

    A new phase starts when weights, coverage, the layer slice or the variant set change while the
    experiment runs (or is paused): same seed, so units keep their bucket, but exposures of the
    new phase are a fresh sample. Re-randomising starts a phase with a new seed.
    """

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="phases")
    number = models.PositiveIntegerField()
    seed = models.CharField(max_length=100)
    coverage = models.FloatField()
    weights = models.JSONField(help_text="{variant key: weight} at the start of the phase.")
    reason = models.CharField(max_length=20, choices=PhaseReason.choices, default=PhaseReason.START)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["experiment", "number"]
        constraints = [models.UniqueConstraint(fields=["experiment", "number"], name="unique_phase_number")]

    def __str__(self) -> str:
        return f"{self.experiment_id} phase {self.number}"


class BanditUpdate(models.Model):
    """One scheduled update of a bandit: the probability that each arm is best and the weights
    decided (a weight change also opened a new :class:`ExperimentPhase`).

    ``slot`` numbers the update intervals since the start (``floor(minutes since start /
    update_every_minutes)``); one update per slot makes the schedule idempotent when it runs
    twice or late. ``decision``: ``explore`` (equal weights), ``update``, ``unchanged`` or
    ``winner`` (an arm reached the stopping probability; the experiment was stopped).
    """

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="bandit_updates")
    slot = models.PositiveIntegerField()
    at = models.DateTimeField()
    phase = models.PositiveIntegerField(help_text="The phase in force after this update.")
    decision = models.CharField(max_length=10)
    weights = models.JSONField(help_text="{variant key: weight} after the update.")
    probability_best = models.JSONField(help_text="{variant key: P(best)}.")
    units = models.JSONField(default=dict, help_text="{variant key: units analysed}.")
    winner = models.CharField(max_length=100, blank=True)
    message = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["experiment", "slot"]
        constraints = [models.UniqueConstraint(fields=["experiment", "slot"], name="unique_bandit_slot")]

    def __str__(self) -> str:
        return f"{self.experiment_id} bandit slot {self.slot}: {self.decision}"


class ForcedAssignment(models.Model):
    """QA pin of one unit id to a variant; kept apart from analysis."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="forced")
    unit_id = models.CharField(max_length=200)
    variant = models.ForeignKey(Variant, on_delete=models.CASCADE)
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["experiment", "unit_id"], name="unique_forced_unit")]

    def __str__(self) -> str:
        return f"{self.unit_id} → {self.variant_id}"


class Exposure(models.Model):
    """First time a unit entered an experiment phase; also the durable sticky assignment."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="exposures")
    phase = models.PositiveIntegerField()
    unit_id = models.CharField(max_length=200)
    variant_key = models.CharField(max_length=100)
    reason = models.CharField(max_length=20, default="assigned")
    first_exposed_at = models.DateTimeField(
        default=timezone.now,
        help_text="When the unit was first routed into the phase (its earliest call's start), "
        "not when the row was written.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["experiment", "phase", "unit_id"], name="one_exposure_per_unit_phase"
            )
        ]
        indexes = [
            models.Index(fields=["unit_id"], name="exposure_unit_idx"),
            # the rollups' first exposure and "exposed since" scans (analytics/rollups.py)
            models.Index(fields=["first_exposed_at"], name="exposure_first_exposed_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.unit_id} in {self.experiment_id}/{self.phase}: {self.variant_key}"


def new_sticky_namespace() -> str:
    """A random namespace for the Redis sticky-assignment cache (see :mod:`muse_experiments.experiments.sticky`)."""
    return secrets.token_hex(8)


class PlatformConfig(models.Model):
    """Singleton (pk=1): programme-wide settings such as the global holdout."""

    holdout_share = models.FloatField(
        default=0.0,
        validators=[MinValueValidator(0.0), MaxValueValidator(0.5)],
        help_text="Share (0–0.5) of users that no experiment touches; they get the default model.",
    )
    holdout_seed = models.CharField(max_length=100, default="global-holdout")
    version = models.PositiveBigIntegerField(default=0, help_text="Bumped on every configuration change.")
    sticky_namespace = models.CharField(
        max_length=32,
        default=new_sticky_namespace,
        help_text="Prefix of the Redis sticky cache; a new value (after a database restore) drops it.",
    )

    class Meta:
        verbose_name = "platform configuration"

    def __str__(self) -> str:
        return "platform configuration"


class AuditEntry(models.Model):
    """Who changed what, when: every configuration change is recorded here."""

    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=60)
    object_type = models.CharField(max_length=60)
    object_id = models.CharField(max_length=100)
    changes = models.JSONField(default=dict)
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-at"]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor} {self.action} {self.object_type} {self.object_id}"


class ApiScope(models.TextChoices):
    COMPLETIONS = "completions"
    EVENTS = "events"
    ANALYTICS_READ = "analytics:read"
    EXPERIMENTS_WRITE = "experiments:write"  # edit experiments (PATCH, with the version read)
    OPS = "ops"
    TRAINING = "training"  # users' training opt-out
    TRAINING_EXPORT = "training:export"  # stream the training export
    TRAINING_INGEST = "training:ingest"  # the RL server's ingestion gate


class ApiKey(models.Model):
    """An API key, stored as its SHA-256 digest; the plain key is shown once at creation."""

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True, help_text="Public part used for look-up.")
    digest = models.CharField(max_length=64)
    scopes = models.JSONField(default=list)
    rate_limit_per_minute = models.PositiveIntegerField(default=6000)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_authenticated(self) -> bool:  # lets DRF treat the key as request.user-like when needed
        return True


class RolloutState(models.TextChoices):
    DRAFT = "draft", "Draft (not started)"
    RUNNING = "running", "Running (advances on clean checks)"
    PAUSED = "paused", "Paused (holds its step; guardrails still checked)"
    ROLLED_BACK = "rolled_back", "Rolled back to 0 %"
    COMPLETED = "completed", "Completed (candidate at 100 %)"


class Rollout(models.Model):
    """A progressive rollout: the ``candidate`` model replaces ``current`` step by step.

    It drives a two-variant experiment (``experiment``: control ``current``, treatment
    ``candidate``, coverage 1) whose weights are ``[100 − percent, percent] %``. The candidate's
    bucket range only grows with the percent, so a unit that got the candidate keeps it at the
    next step. Each step is a phase of that experiment, held at least ``step_min_minutes`` and
    until the candidate has ``step_min_units`` units; the scheduled check
    (:func:`analytics.rollouts.rollout_check`) rolls back to 0 % on a guardrail breach under the
    always-valid sequential test, and advances a clean step. ``step`` indexes ``steps`` (percent
    values, strictly increasing, ending at 100).
    """

    key = models.SlugField(max_length=100, unique=True, validators=[key_validator])
    experiment = models.OneToOneField(Experiment, on_delete=models.PROTECT, related_name="rollout")
    candidate = models.ForeignKey("routing.ModelEndpoint", on_delete=models.PROTECT, related_name="+")
    current = models.ForeignKey("routing.ModelEndpoint", on_delete=models.PROTECT, related_name="+")
    steps = models.JSONField(
        help_text="Percent of units on the candidate at each step, e.g. [1, 5, 25, 50, 100]."
    )
    step_min_minutes = models.PositiveIntegerField(default=60)
    step_min_units = models.PositiveIntegerField(default=100, help_text="Candidate units a step needs.")
    guardrails = models.JSONField(default=list, help_text="Metric names tested at every check.")
    state = models.CharField(max_length=12, choices=RolloutState.choices, default=RolloutState.DRAFT)
    step = models.PositiveSmallIntegerField(default=0, help_text="Index into steps.")
    percent = models.FloatField(default=0.0, help_text="Percent of units on the candidate now.")
    step_started_at = models.DateTimeField(null=True, blank=True)
    last_checked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["key"]

    def __str__(self) -> str:
        return f"{self.key} ({self.state}, {self.percent:g} %)"


class RolloutEvent(models.Model):
    """One decision of a rollout (the ramp's history): start, advance, hold, pause, rollback."""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="history")
    at = models.DateTimeField(db_index=True)
    from_percent = models.FloatField()
    to_percent = models.FloatField()
    reason = models.CharField(
        max_length=40,
        help_text="started, advanced, completed, paused, resumed, "
        "rolled_back_guardrail, rolled_back_manual, held_kill_switch, waiting_for_data",
    )
    message = models.CharField(max_length=500, blank=True)
    actor = models.CharField(max_length=200, blank=True)
    evidence = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.rollout_id}: {self.from_percent:g} → {self.to_percent:g} % ({self.reason})"


# shadow tests live in their own module (Django finds models through this one)
from .shadow_models import ShadowPair, ShadowStatus, ShadowTest, ShadowVerdict  # noqa: E402, F401
