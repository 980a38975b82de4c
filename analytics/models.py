"""Analytics data: outcome events, metric definitions, per-experiment analysis settings, result
snapshots and the guardrail decisions taken from them.

Business rules live in :mod:`analytics.services` (writes) and :mod:`analytics.selectors` (reads);
the SQL that reduces raw rows to sufficient statistics is in :mod:`analytics.queries`.
"""

from __future__ import annotations

import uuid

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

metric_name_validator = RegexValidator(
    r"^[a-z0-9][a-z0-9_]{0,99}$", "Use lowercase letters, digits and '_' (e.g. tokens_per_turn)."
)
event_name_validator = RegexValidator(r"^[A-Za-z0-9_.:-]{1,100}$", "Use the event name as posted to /events.")


class OutcomeEvent(models.Model):
    """An outcome for a unit (``task_success`` 0/1, ``rating`` 1–5, or a custom name).

    ``event_id`` is the client's idempotency key, scoped by ``source`` (the API key that posted it,
    ``key:<prefix>``, or ``user:<name>`` for a staff session): one source re-posting an id stores one
    row, two sources never collide. ``body_sha256`` is the digest of the event as posted, so the same
    id with a different body is recognised as a conflict rather than a duplicate.
    """

    source = models.CharField(max_length=120, default="", blank=True)
    event_id = models.CharField(max_length=200)
    body_sha256 = models.CharField(max_length=64, blank=True, default="")
    name = models.CharField(max_length=100)
    session_id = models.CharField(max_length=200, blank=True, db_index=True)
    user_id = models.CharField(max_length=200, blank=True, db_index=True)
    value = models.FloatField()
    occurred_at = models.DateTimeField()
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["name", "session_id"]), models.Index(fields=["name", "user_id"])]
        constraints = [models.UniqueConstraint(fields=["source", "event_id"], name="one_event_id_per_source")]

    def __str__(self) -> str:
        return f"{self.name}={self.value} ({self.event_id})"


class MetricSource(models.TextChoices):
    EVENT = "event", "Outcome event"
    CALL = "call", "Routing call record"


class CallValue(models.TextChoices):
    """What one routing call contributes to a call metric (whitelisted SQL expressions in
    :data:`analytics.queries.CALL_VALUE_SQL`; never free SQL)."""

    LATENCY_MS = "latency_ms", "Latency (ms; succeeded calls only, NULL otherwise)"
    TTFT_MS = "ttft_ms", "Time to first token (ms; succeeded streamed calls only, NULL otherwise)"
    COST_USD = "cost_usd", "Cost (USD)"
    INPUT_TOKENS = "input_tokens", "Input tokens"
    CACHED_INPUT_TOKENS = "cached_input_tokens", "Cached input tokens"
    OUTPUT_TOKENS = "output_tokens", "Output tokens"
    REASONING_TOKENS = "reasoning_tokens", "Reasoning tokens"
    TOOL_CALLS = "tool_calls", "Tool calls returned"
    CALLS = "calls", "1 per call (counts calls)"
    ERROR = "error", "1 if the call failed"
    FALLBACK = "fallback", "1 if served by a fallback (error_fallback, killed, circuit_open)"
    HAS_TOOL_CALL = "has_tool_call", "1 if the call returned a tool call"
    SUCCEEDED = "succeeded", "1 if the call succeeded"


class Aggregation(models.TextChoices):
    """How a unit's rows become its value. Units with no rows get 0 for sum/count/any and are
    left out of the metric for mean (there is nothing to average)."""

    SUM = "sum", "Sum per unit"
    MEAN = "mean", "Mean per unit"
    COUNT = "count", "Count of rows per unit"
    ANY = "any", "1 if any row has a value > 0, else 0"
    QUANTILE = "quantile", "Quantile (q) of the calls' values, clustered by unit (or of per-unit means)"


class MetricType(models.TextChoices):
    PROPORTION = "proportion", "Proportion (binary per unit; z-test)"
    MEAN = "mean", "Mean of per-unit values (Welch t-test)"
    RATIO = "ratio", "Ratio of two metrics' totals (delta method)"
    QUANTILE = "quantile", "Quantile, e.g. p95 latency (Woodruff standard error clustered by unit)"


class QuantileOf(models.TextChoices):
    """What a quantile metric ranks: every call (its variance clustered by unit), or one value per
    unit (the mean of the unit's call values)."""

    CALL = "call", "Every call (clustered by unit)"
    UNIT = "unit", "One value per unit (mean of its calls)"


class Capping(models.TextChoices):
    NONE = "none", "No capping"
    FIXED = "fixed", "Cap per-unit values at a fixed value"
    PERCENTILE = "percentile", "Cap per-unit values at a percentile of all analysed units"


class MetricDefinition(models.Model):
    """How to turn raw rows into one number per unit, and how to compare arms.

    * ``source=event``: rows are :class:`OutcomeEvent` named ``event_name`` for the unit (joined
      on session or user id, per the experiment's unit type) at or after its first exposure.
    * ``source=call``: rows are the unit's :class:`routing.models.CallRecord` in the experiment
      phase; each row contributes ``call_value`` (e.g. ``latency_ms``, ``error``).
    * ``metric_type=ratio``: ``numerator`` and ``denominator`` are other (non-ratio, non-mean
      aggregated) metrics; the ratio is Σnumerator / Σdenominator per arm, compared by the
      delta method (Deng et al. 2018).
    * Capping (winsorisation, upper tail only): per-unit values above ``cap_value`` (fixed) or
      above the ``cap_value`` quantile (0 < q < 1, nearest rank, computed in SQL over all analysed
      units of all arms) are replaced by the cap. The covariate uses the same cap.
    * ``metric_type=quantile`` (with ``aggregation=quantile``, call metrics only): the
      ``quantile`` level q (0.95 = p95) of every call value of the arm (``quantile_of=call``;
      standard error clustered by unit) or of the units' mean values (``quantile_of=unit``);
      see :mod:`analytics.stats.quantiles`. No capping, no CUPED.
    * CUPED: ``covariate_lookback_days`` > 0 adds the same metric measured on the unit's rows
      in the window ``[first exposure − lookback, first exposure)`` as a pre-exposure covariate.
    """

    name = models.CharField(max_length=100, unique=True, validators=[metric_name_validator])
    label = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    source = models.CharField(max_length=10, choices=MetricSource.choices, default=MetricSource.EVENT)
    event_name = models.CharField(max_length=100, blank=True, validators=[event_name_validator])
    call_value = models.CharField(max_length=30, choices=CallValue.choices, blank=True)
    aggregation = models.CharField(max_length=10, choices=Aggregation.choices, default=Aggregation.SUM)
    metric_type = models.CharField(max_length=12, choices=MetricType.choices, default=MetricType.MEAN)
    numerator = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    denominator = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    higher_is_better = models.BooleanField(default=True)
    quantile = models.FloatField(
        null=True, blank=True, help_text="Quantile metrics: the level q in (0, 1), e.g. 0.95 for p95."
    )
    quantile_of = models.CharField(max_length=4, choices=QuantileOf.choices, default=QuantileOf.CALL)
    capping = models.CharField(max_length=12, choices=Capping.choices, default=Capping.NONE)
    cap_value = models.FloatField(null=True, blank=True, help_text="Fixed cap, or quantile in (0, 1).")
    covariate_lookback_days = models.PositiveIntegerField(
        default=0, validators=[MaxValueValidator(365)], help_text="0 disables CUPED for this metric."
    )
    is_builtin = models.BooleanField(default=False, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Field errors for inconsistent definitions (the admin shows them on the form)."""
        errors: dict[str, str] = {}
        if self.metric_type == MetricType.RATIO:
            if not self.numerator_id:
                errors["numerator"] = "A ratio metric needs a numerator metric."
            if not self.denominator_id:
                errors["denominator"] = "A ratio metric needs a denominator metric."
            for field in ("numerator", "denominator"):
                part = getattr(self, field) if getattr(self, f"{field}_id") else None
                if part is None:
                    continue
                if self.pk and part.pk == self.pk:
                    errors[field] = "A ratio cannot use itself."
                elif part.metric_type == MetricType.RATIO:
                    errors[field] = "Use a metric that is not itself a ratio."
                elif part.aggregation in (Aggregation.MEAN, Aggregation.QUANTILE):
                    errors[field] = "Ratio parts must be sum, count or any per unit (not mean or quantile)."
            if self.capping != Capping.NONE:
                errors["capping"] = "Cap the numerator and denominator metrics instead."
            if self.covariate_lookback_days:
                errors["covariate_lookback_days"] = "CUPED is not available for ratio metrics."
        else:
            if self.numerator_id or self.denominator_id:
                errors["numerator"] = "Only ratio metrics have a numerator and denominator."
            if self.source == MetricSource.EVENT and not self.event_name:
                errors["event_name"] = "Name the outcome event."
            if self.source == MetricSource.CALL and not self.call_value:
                errors["call_value"] = "Choose what each call contributes."
            if self.source == MetricSource.CALL and self.event_name:
                errors["event_name"] = "Call metrics have no event name."
            if self.source == MetricSource.EVENT and self.call_value:
                errors["call_value"] = "Event metrics have no call value."
            if self.metric_type == MetricType.PROPORTION and self.aggregation != Aggregation.ANY:
                errors["aggregation"] = "A proportion needs a 0/1 value per unit: use 'any'."
        self._clean_quantile(errors)
        if self.capping == Capping.FIXED and self.cap_value is None:
            errors["cap_value"] = "Give the cap."
        if self.capping == Capping.PERCENTILE and not (
            self.cap_value is not None and 0.0 < self.cap_value < 1.0
        ):
            errors["cap_value"] = "Give the quantile as a fraction in (0, 1), e.g. 0.99."
        if self.capping == Capping.NONE and self.cap_value is not None:
            errors["cap_value"] = "Leave empty without capping."
        if self.capping != Capping.NONE and self.metric_type == MetricType.PROPORTION:
            errors["capping"] = "Proportions are 0/1 and need no capping."
        if errors:
            raise ValidationError(errors)

    def _clean_quantile(self, errors: dict[str, str]) -> None:
        """Field errors of quantile metrics (metric type and aggregation go together)."""
        is_quantile = self.metric_type == MetricType.QUANTILE
        if is_quantile != (self.aggregation == Aggregation.QUANTILE):
            errors.setdefault(
                "aggregation", "Quantile metrics use the 'quantile' aggregation, and only they do."
            )
        if not is_quantile:
            if self.quantile is not None:
                errors.setdefault("quantile", "Only quantile metrics have a quantile level.")
            return
        if self.quantile is None or not 0.0 < self.quantile < 1.0:
            errors.setdefault("quantile", "Give the level as a fraction in (0, 1), e.g. 0.95 for p95.")
        if self.source != MetricSource.CALL:
            errors.setdefault("source", "Quantile metrics rank call values (e.g. latency_ms).")
        if self.capping != Capping.NONE:
            errors.setdefault("capping", "A quantile needs no capping.")
        if self.covariate_lookback_days:
            errors.setdefault("covariate_lookback_days", "CUPED is not available for quantile metrics.")


class ExperimentAnalysisSettings(models.Model):
    """Per-experiment analysis options (kept here so analytics never edits experiment models).

    Experiments without a row use the defaults below (:func:`analytics.selectors.analysis_settings_for`).
    """

    experiment = models.OneToOneField(
        "muse_experiments.Experiment", on_delete=models.CASCADE, related_name="analysis_settings"
    )
    alpha = models.FloatField(
        default=0.05,
        validators=[MinValueValidator(0.0001), MaxValueValidator(0.5)],
        help_text="Significance level; intervals have coverage 1 − alpha.",
    )
    sequential_tuning = models.FloatField(
        default=5000.0,
        validators=[MinValueValidator(1.0)],
        help_text="Total units at which the confidence sequence is tightest (set to the expected "
        "sample size); any value keeps the false-positive rate ≤ alpha under peeking.",
    )
    secondary_metrics = models.JSONField(
        default=list, blank=True, help_text="Extra metric names to report besides primary and guardrails."
    )
    include_multiple_exposures = models.BooleanField(
        default=False, help_text="Analyse units seen in several variants under their first variant."
    )
    auto_pause_guardrails = models.BooleanField(
        default=False,
        help_text="Pause a treatment through the kill switch when a guardrail metric is significantly "
        "worse under the sequential test.",
    )
    guardrail_min_units = models.PositiveIntegerField(
        default=100, help_text="Units each arm needs before the guardrail loop may act."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "experiment analysis settings"

    def __str__(self) -> str:
        return f"analysis settings of {self.experiment_id}"

    def clean(self) -> None:
        names = self.secondary_metrics
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValidationError({"secondary_metrics": "A list of metric names."})


class SnapshotTrigger(models.TextChoices):
    MANUAL = "manual"
    API = "api"
    SCHEDULE = "schedule"


class ResultSnapshot(models.Model):
    """Results of one experiment phase, with the sufficient statistics that produced them."""

    experiment = models.ForeignKey(
        "muse_experiments.Experiment", on_delete=models.CASCADE, related_name="results"
    )
    phase = models.PositiveIntegerField()
    computed_at = models.DateTimeField(auto_now_add=True, db_index=True)
    request_id = models.UUIDField(null=True, blank=True, unique=True, default=None)
    trigger = models.CharField(max_length=10, choices=SnapshotTrigger.choices, default=SnapshotTrigger.MANUAL)
    duration_ms = models.FloatField(null=True, blank=True, help_text="SQL + statistics time.")
    inputs = models.JSONField(help_text="Per-variant sufficient statistics per metric.")
    results = models.JSONField(help_text="Comparisons, SRM; JSON without NaN/Infinity.")

    class Meta:
        ordering = ["-computed_at", "-id"]
        get_latest_by = "computed_at"
        indexes = [
            models.Index(fields=["experiment", "phase", "-computed_at"], name="snapshot_exp_phase_latest")
        ]

    def __str__(self) -> str:
        return f"{self.experiment_id} phase {self.phase} @ {self.computed_at:%Y-%m-%d %H:%M}"


class GuardrailDecision(models.TextChoices):
    PAUSED = "paused", "Variant paused through the kill switch"
    DETECTED = "detected", "Detected; auto-pause is off for this experiment"
    KILL_SWITCH_UNAVAILABLE = "kill_switch_unavailable", "Detected; no kill switch service to call"
    FAILED = "failed", "Detected; the kill switch call failed"


class GuardrailAction(models.Model):
    """A guardrail breach found in a snapshot, and what the platform did about it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    experiment = models.ForeignKey(
        "muse_experiments.Experiment", on_delete=models.CASCADE, related_name="guardrail_actions"
    )
    phase = models.PositiveIntegerField()
    variant_key = models.CharField(max_length=100)
    metric = models.CharField(max_length=100)
    decision = models.CharField(max_length=30, choices=GuardrailDecision.choices)
    snapshot = models.ForeignKey(ResultSnapshot, null=True, on_delete=models.SET_NULL, related_name="+")
    evidence = models.JSONField(help_text="Sequential test result that triggered the action.")
    message = models.CharField(max_length=500)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["experiment", "phase", "variant_key", "metric", "decision"],
                name="one_guardrail_decision_per_breach",
            )
        ]

    def __str__(self) -> str:
        return f"{self.decision}: {self.variant_key} on {self.metric} ({self.experiment_id}/{self.phase})"


class RollupSpan(models.TextChoices):
    HOUR = "hour"
    DAY = "day"


class CallRollup(models.Model):
    """Routing call records pre-aggregated per hour (and per day of the reporting time zone) ×
    endpoint × experiment phase × variant.

    ``span="hour"`` rows are summed from raw records: UTC hours, cut at the reporting zone's
    midnight when its offset is not whole hours, so each lies inside one local day. ``span="day"``
    rows are the sums of a local day's hour rows (``bucket`` = the instant the day starts in
    ``zone``, DST included), so an experiment page reads one row per day × variant × endpoint
    whatever the length of the experiment, and routing health reads the last 24 hour rows.
    ``zone`` is the IANA zone (``MUSE_REPORTING_TIME_ZONE``) the days were cut in: rows of another
    zone are rebuilt by the next refresh.

    Written only by :func:`analytics.rollups.call_rollup_refresh` (the analytics task), read by the
    dashboards, which never scan raw call records. ``endpoint`` is the endpoint that served the
    call, else the one it was assigned to (failed calls). ``experiment_id = 0`` and ``phase = 0``
    for calls outside any experiment. ``tokens`` = input + output tokens (output includes
    reasoning). Histograms are counts per bin of the grids in :mod:`analytics.histograms` (latency
    over succeeded calls only; time to first token on the latency grid, over succeeded streamed
    calls; empty in rows written before call records had it). ``exposures`` counts units first exposed in the hour (from the
    exposure table; ``endpoint`` is then empty).
    """

    span = models.CharField(max_length=4, choices=RollupSpan.choices, default=RollupSpan.HOUR)
    bucket = models.DateTimeField(help_text="Start of the hour, or of the day in the reporting zone.")
    zone = models.CharField(
        max_length=64, blank=True, help_text="Reporting time zone the days were cut in (IANA name)."
    )
    endpoint = models.CharField(max_length=200, blank=True)
    experiment_id = models.BigIntegerField(default=0)
    phase = models.PositiveIntegerField(default=0)
    variant_key = models.CharField(max_length=100, blank=True)
    calls = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    fallbacks = models.PositiveIntegerField(default=0, help_text="Served by a fallback or circuit_open.")
    killed = models.PositiveIntegerField(default=0, help_text="Rerouted by a kill switch.")
    cost_unknown = models.PositiveIntegerField(
        default=0, help_text="Calls with an attempt that died with its worker: billed, cost unknown."
    )
    exposures = models.PositiveIntegerField(default=0)
    cost_usd = models.FloatField(default=0.0)
    tokens = models.BigIntegerField(default=0)
    latency_hist = models.JSONField(default=list)
    ttft_hist = models.JSONField(default=list)
    cost_hist = models.JSONField(default=list)
    tokens_hist = models.JSONField(default=list)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["span", "bucket", "endpoint", "experiment_id", "phase", "variant_key"],
                name="one_call_rollup_per_span_key",
            )
        ]
        indexes = [
            models.Index(
                fields=["experiment_id", "phase", "span", "bucket"], name="rollup_experiment_span_idx"
            ),
            models.Index(fields=["span", "bucket", "endpoint"], name="rollup_span_bucket_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.bucket:%Y-%m-%d %H:00} {self.endpoint or '-'} {self.experiment_id}/{self.variant_key}"


class RollupMark(models.Model):
    """The highest call record and exposure ids a :class:`CallRollup` refresh could see when it
    started (``taken_at``). The next refreshes find the rows written since (late rows of hours
    already rolled up: a call record drained after its hour, an exposure recorded late) by id and
    recompute their hours (:func:`analytics.rollups.call_rollup_refresh`). Written and pruned only
    there."""

    taken_at = models.DateTimeField(db_index=True)
    call_record_id = models.BigIntegerField(default=0)
    exposure_id = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.taken_at:%Y-%m-%d %H:%M:%S}: call records ≤ {self.call_record_id}, exposures ≤ {self.exposure_id}"


class LiftPoint(models.Model):
    """One point of the cumulative-lift chart: a snapshot's lift of one metric × treatment.

    Written with every :class:`ResultSnapshot` (:func:`analytics.services.results_compute`) so the
    chart reads a few small rows, not every snapshot's JSON. ``analysis``: itt | served; ``cuped``:
    the row is the series read with CUPED on (the adjusted numbers, or the unadjusted fallback when
    the covariate failed the balance check; unadjusted rows are stored too).
    Relative values are fractions (0.05 = +5 %).
    """

    snapshot = models.ForeignKey(ResultSnapshot, on_delete=models.CASCADE, related_name="lift_points")
    experiment = models.ForeignKey("muse_experiments.Experiment", on_delete=models.CASCADE, related_name="+")
    phase = models.PositiveIntegerField()
    computed_at = models.DateTimeField()
    analysis = models.CharField(max_length=10)
    metric = models.CharField(max_length=100)
    variant_key = models.CharField(max_length=100)
    cuped = models.BooleanField(default=False)
    units = models.PositiveIntegerField(default=0)
    relative_lift = models.FloatField(null=True)
    ci_low = models.FloatField(null=True)
    ci_high = models.FloatField(null=True)
    sequential_low = models.FloatField(null=True)
    sequential_high = models.FloatField(null=True)

    class Meta:
        ordering = ["computed_at"]
        indexes = [
            models.Index(fields=["experiment", "phase", "metric", "computed_at"], name="liftpoint_idx")
        ]

    def __str__(self) -> str:
        return f"{self.metric}/{self.variant_key} @ {self.computed_at:%Y-%m-%d %H:%M}"
