"""The OpenAPI description of a results snapshot (``GET /api/v1/experiments/{key}/results``).

Documentation only: the view returns the stored snapshot (:func:`analytics.services.results_compute`
builds it; :func:`analytics.analysis.analyse_population` builds each analysis). Nested statistics
whose fields depend on the metric type (a comparison's CIs, sequential and Bayesian blocks) are
objects with named keys documented in ``analytics.stats``.
"""

from __future__ import annotations

from rest_framework import serializers


class SrmSchema(serializers.Serializer):
    chi2 = serializers.FloatField(allow_null=True)
    p_value = serializers.FloatField(allow_null=True, help_text="Chi-square p-value against the weights.")
    df = serializers.IntegerField()
    flagged = serializers.BooleanField(help_text="p < 0.001 or units in a zero-weight arm.")
    status = serializers.CharField(
        help_text="ok (not flagged) | mismatch (flagged, p < 0.001) | units_in_zero_weight_arm (flagged) | "
        "no_data | single_arm"
    )
    expected_counts = serializers.ListField(child=serializers.FloatField())
    reason = serializers.CharField(allow_null=True)


class VariantSchema(serializers.Serializer):
    key = serializers.CharField()
    is_control = serializers.BooleanField()
    weight = serializers.FloatField(help_text="Share of traffic in this phase (0..1).")
    endpoint = serializers.CharField(help_text="Model endpoint public id.")
    units = serializers.IntegerField(help_text="Units analysed.")
    exposed = serializers.IntegerField(required=False)
    forced = serializers.IntegerField(required=False)
    multiple_exposure = serializers.IntegerField(required=False)
    deviating = serializers.IntegerField(required=False)


class MetricVariantSchema(serializers.Serializer):
    key = serializers.CharField()
    n = serializers.IntegerField()
    mean = serializers.FloatField(allow_null=True)
    units_with_data = serializers.IntegerField(
        required=False,
        help_text="Units with an observation of the metric (an event of its name, a call with its value); "
        "units without one count in n with value 0 for sums, counts and yes/no metrics.",
    )


class MetricSchema(serializers.Serializer):
    name = serializers.CharField()
    label = serializers.CharField()
    role = serializers.CharField(help_text="primary | secondary | guardrail")
    type = serializers.CharField(help_text="proportion | mean | ratio")
    higher_is_better = serializers.BooleanField()
    status = serializers.CharField(help_text="ok, or why the metric could not be analysed.")
    reason = serializers.CharField(allow_null=True)
    variants = MetricVariantSchema(many=True)
    comparisons = serializers.ListField(
        child=serializers.DictField(),
        help_text="Per treatment vs control: variant, lifts, CIs, interval_method / "
        "relative_interval_method (how absolute_ci / relative_ci were built: wald, delta; newcombe and "
        "mover_r for proportions, valid with 0 or n successes in an arm; confidence_sequence[_agresti_caffo] "
        "in sequential), p_value (absolute scale: pooled z for proportions, Welch t otherwise), "
        "relative_p_value (the test dual to relative_ci: p < alpha iff it excludes 0; null with "
        "relative_status zero_width_interval / control_mean_zero / control_mean_near_zero), p_holm, "
        "p_bh, cuped (true when the CUPED adjustment was applied), cuped_status (applied | "
        "covariate_imbalanced | covariate_missing; null without a covariate), warning (why CUPED was "
        "not applied), extra.covariate_balance (the Welch test of the pre-period covariate), unadjusted, "
        "sequential, bayesian (model gaussian | beta_binomial), verdict.",
    )


class GuardrailSchema(serializers.Serializer):
    metric = serializers.CharField()
    variant = serializers.CharField()
    worse = serializers.BooleanField()
    status = serializers.CharField()
    sequential_p_value = serializers.FloatField(allow_null=True)
    relative_lift = serializers.FloatField(allow_null=True)
    absolute_lift = serializers.FloatField(allow_null=True)
    sequential_ci = serializers.ListField(child=serializers.FloatField(allow_null=True), allow_null=True)
    control_n = serializers.IntegerField(allow_null=True)
    treatment_n = serializers.IntegerField(allow_null=True)


class ResultsSnapshotSchema(serializers.Serializer):
    """One results snapshot; the top level is the analysis asked for (``itt`` by default)."""

    snapshot_id = serializers.IntegerField()
    computed_at = serializers.DateTimeField()
    trigger = serializers.CharField()
    duration_ms = serializers.FloatField(allow_null=True)
    experiment = serializers.CharField()
    phase = serializers.IntegerField()
    unit_type = serializers.CharField()
    analysis = serializers.ChoiceField(choices=["itt", "served"])
    alpha = serializers.FloatField()
    sequential_tuning = serializers.FloatField()
    include_multiple_exposures = serializers.BooleanField()
    population = serializers.DictField(
        help_text="Unit totals (exposed, forced, multiple_exposure, deviating)."
    )
    caps = serializers.DictField(help_text="Winsorisation caps applied per metric.")
    srm = SrmSchema()
    variants = VariantSchema(many=True)
    metrics = MetricSchema(many=True)
    guardrails = GuardrailSchema(many=True)
    multiple_comparisons = serializers.DictField(help_text="family_size and the p-value adjustments used.")
    analyses = serializers.DictField(
        help_text="The other analyses (served-as-assigned) with srm, variants, metrics, guardrails."
    )
