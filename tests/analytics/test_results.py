"""Results snapshots end to end: database rows → SQL → engine, checked against scipy/statsmodels
on the raw per-unit values; guardrail closed loop; JSON safety."""

from __future__ import annotations

import json
import random
from datetime import timedelta

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.proportion import proportions_ztest

from analytics.models import (
    ExperimentAnalysisSettings,
    GuardrailAction,
    MetricDefinition,
)
from analytics.services import results_compute
from muse_experiments.experiments.models import AuditEntry
from routing.models import KillSwitch
from tests.analytics.conftest import T0
from tests.factories import user_in_group


def _metric(result, name):
    return next(m for m in result["metrics"] if m["name"] == name)


def _cmp(metric, variant):
    return next(c for c in metric["comparisons"] if c["variant"] == variant)


def _simulate(raw, rng, units=90, slow=0.0):
    values = {"latency": {}, "success": {}, "calls": {}, "errors": {}}
    for i in range(units):
        unit, variant = f"u{i}", ["control", "fast", "cheap"][i % 3]
        raw.expose(unit, variant)
        lat, n_calls, n_err = [], rng.randint(1, 5), 0
        for k in range(n_calls):
            failed = rng.random() < (0.1 if variant != "cheap" else 0.3)
            latency = rng.gauss(
                200 + (slow if variant == "cheap" else 0) - (30 if variant == "fast" else 0), 40
            )
            raw.call(
                unit,
                variant,
                at=T0 + timedelta(minutes=k),
                status="failed" if failed else "succeeded",
                latency_ms=latency,
            )
            n_err += failed
            if not failed:
                lat.append(latency)
        if lat:
            values["latency"].setdefault(variant, []).append(sum(lat) / len(lat))
        success = rng.random() < (0.4 if variant == "control" else 0.6)
        raw.event(unit, "task_success", float(success))
        values["success"].setdefault(variant, []).append(float(success))
        values["calls"].setdefault(variant, []).append(n_calls)
        values["errors"].setdefault(variant, []).append(n_err)
    return values


@pytest.mark.django_db
def test_results_equal_scipy_and_statsmodels_on_the_raw_per_unit_values(three_arms):
    values = _simulate(three_arms, random.Random(5))
    experiment = three_arms.experiment
    experiment.guardrail_metrics = ["error_rate"]
    experiment.save(update_fields=["guardrail_metrics"])
    snapshot = results_compute(experiment=experiment)
    r = snapshot.results
    json.dumps(r, allow_nan=False)
    json.dumps(snapshot.inputs, allow_nan=False)

    latency = _metric(r, "latency_ms")
    for variant in ("fast", "cheap"):
        c = _cmp(latency, variant)
        want = sps.ttest_ind(values["latency"][variant], values["latency"]["control"], equal_var=False)
        assert c["status"] == "ok" and c["method"] == "welch_t"
        assert c["p_value"] == pytest.approx(want.pvalue, rel=1e-9)
        assert c["statistic"] == pytest.approx(want.statistic, rel=1e-9)
        ci = want.confidence_interval(0.95)
        assert c["absolute_ci"] == pytest.approx([ci.low, ci.high], rel=1e-9)

    success = _metric(r, "task_success")
    for variant in ("fast", "cheap"):
        t, ctl = values["success"][variant], values["success"]["control"]
        z, p = proportions_ztest([sum(t), sum(ctl)], [len(t), len(ctl)])
        c = _cmp(success, variant)
        assert c["p_value"] == pytest.approx(p, rel=1e-9) and c["statistic"] == pytest.approx(z, rel=1e-9)

    # Ratio (errors / calls) by the delta method on the raw per-unit numerators and denominators.
    rate = _metric(r, "error_rate")
    assert rate["role"] == "guardrail" and rate["type"] == "ratio"

    def ratio_mean_var(variant):
        m, d = np.array(values["errors"][variant], float), np.array(values["calls"][variant], float)
        n, mm, md = len(m), m.mean(), d.mean()
        cov = np.cov(m, d, ddof=1)
        var = cov[0, 0] / md**2 - 2 * mm * cov[0, 1] / md**3 + mm**2 * cov[1, 1] / md**4
        return mm / md, var / n, n

    mc, vc, nc = ratio_mean_var("control")
    mt, vt, nt = ratio_mean_var("cheap")
    c = _cmp(rate, "cheap")
    assert c["control_mean"] == pytest.approx(mc, rel=1e-12) and c["treatment_mean"] == pytest.approx(
        mt, rel=1e-12
    )
    assert c["std_error"] == pytest.approx(np.sqrt(vc + vt), rel=1e-9)
    df = (vc + vt) ** 2 / (vc**2 / (nc - 1) + vt**2 / (nt - 1))
    assert c["p_value"] == pytest.approx(2 * sps.t.sf(abs(mt - mc) / np.sqrt(vc + vt), df), rel=1e-9)
    rel_var = vt / mc**2 + mt**2 * vc / mc**4  # delta method on mt/mc
    assert c["relative_std_error"] == pytest.approx(np.sqrt(rel_var), rel=1e-9)

    # Every primary comparison carries sequential, Bayesian and adjusted p-values; SRM with it.
    family = [c for m in r["metrics"] for c in m["comparisons"]]
    assert r["multiple_comparisons"]["family_size"] == len(family) == 2 * 4
    from statsmodels.stats.multitest import multipletests

    raw_p = [c["p_value"] for c in family]
    assert [c["p_holm"] for c in family] == pytest.approx(list(multipletests(raw_p, method="holm")[1]))
    assert [c["p_bh"] for c in family] == pytest.approx(list(multipletests(raw_p, method="fdr_bh")[1]))
    for c in family:
        assert c["sequential"]["method"].startswith("sequential_")
        assert c["sequential"]["p_value"] >= c["p_value"]  # always-valid costs power
        assert 0 <= c["bayesian"]["chance_to_beat_control"] <= 1
    # lower-is-better: the faster arm beats control on latency with high probability
    assert _cmp(latency, "fast")["bayesian"]["chance_to_beat_control"] > 0.95
    assert r["srm"]["status"] == "ok" and "srm" in r["analyses"]["served"]
    assert [v["units"] for v in r["variants"]] == [30, 30, 30]


@pytest.mark.django_db
def test_cuped_adjusted_lift_equals_the_ols_treatment_coefficient_and_reports_variance_reduction(three_arms):
    rng = random.Random(2)
    MetricDefinition.objects.filter(name="output_tokens").update(covariate_lookback_days=14)
    xs, ys, arm = [], [], []
    for i in range(60):
        unit, variant = f"u{i}", ["control", "fast"][i % 2]
        habit = rng.randint(100, 1000)  # each unit's own level, visible before and after exposure
        three_arms.expose(unit, variant)
        pre = habit + rng.randint(-50, 50)
        three_arms.call(unit, None, in_experiment=False, at=T0 - timedelta(days=3), output_tokens=pre)
        post = habit + rng.randint(-50, 50) + (40 if variant == "fast" else 0)
        three_arms.call(unit, variant, output_tokens=post)
        xs.append(pre), ys.append(post), arm.append(1.0 if variant == "fast" else 0.0)
    experiment = three_arms.experiment
    experiment.primary_metric = "output_tokens"
    experiment.save(update_fields=["primary_metric"])
    r = results_compute(experiment=experiment).results
    c = _cmp(_metric(r, "output_tokens"), "fast")
    design = np.column_stack([np.ones(60), arm, xs])
    coef = np.linalg.lstsq(design, np.array(ys, float), rcond=None)[0]
    assert c["cuped"] is True and c["method"] == "cuped_welch_t"
    assert c["absolute_lift"] == pytest.approx(coef[1], rel=1e-9)
    assert c["variance_reduction"] > 0.8
    assert c["unadjusted"]["absolute_lift"] == pytest.approx(
        np.mean([y for y, a in zip(ys, arm, strict=True) if a])
        - np.mean([y for y, a in zip(ys, arm, strict=True) if not a])
    )
    assert c["p_value"] < c["unadjusted"]["p_value"]
    cheap = _cmp(_metric(r, "output_tokens"), "cheap")
    assert cheap["status"] == "insufficient_data"  # no units: explicit status, no NaN


def _cuped_units(raw, *, treatment_pre: bool, units: int = 60):
    """Units whose output tokens before and after exposure follow their own habit; the treatment
    arm's pre-period calls are left out (``treatment_pre=False``: its covariate is missing)."""
    rng = random.Random(3)
    MetricDefinition.objects.filter(name="output_tokens").update(covariate_lookback_days=14)
    for i in range(units):
        unit, variant = f"u{i}", ["control", "fast"][i % 2]
        habit = rng.randint(100, 1000)
        raw.expose(unit, variant)
        if variant == "control" or treatment_pre:
            pre = habit + rng.randint(-50, 50)
            raw.call(unit, None, in_experiment=False, at=T0 - timedelta(days=3), output_tokens=pre)
        raw.call(unit, variant, output_tokens=habit + rng.randint(-50, 50))
    experiment = raw.experiment
    experiment.primary_metric = "output_tokens"
    experiment.save(update_fields=["primary_metric"])
    return experiment


@pytest.mark.django_db
def test_cuped_with_a_covariate_missing_in_one_arm_reports_the_unadjusted_result_and_why(three_arms, client):
    """Issue 32: pre-period data for the control arm only. CUPED would turn a null difference into
    a huge 'significant' one; the snapshot keeps the unadjusted result, says why, and the page
    shows it (CUPED column and a warning)."""

    from analytics.models import LiftPoint

    experiment = _cuped_units(three_arms, treatment_pre=False)
    snapshot = results_compute(experiment=experiment)
    c = _cmp(_metric(snapshot.results, "output_tokens"), "fast")
    assert c["cuped"] is False and c["cuped_status"] == "covariate_missing" and c["method"] == "welch_t"
    assert c["absolute_lift"] == pytest.approx(c["unadjusted"]["absolute_lift"], rel=1e-12)
    assert c["p_value"] == pytest.approx(c["unadjusted"]["p_value"], rel=1e-12)
    assert c["p_value"] > 0.05 and "treatment arm" in c["warning"]
    assert c["sequential"]["cuped_status"] == "covariate_missing"
    # the CUPED-on lift series keeps its point (the fallback), next to the unadjusted one
    points = LiftPoint.objects.filter(
        snapshot=snapshot, analysis="itt", metric="output_tokens", variant_key="fast"
    )
    assert sorted(points.values_list("cuped", flat=True)) == [False, True]
    client.force_login(user_in_group("Analyst"))
    rows = client.get(f"/results/{experiment.key}/", {"export": "json", "table": "metrics"}).json()["rows"]
    row = next(r for r in rows if r["metric_name"] == "output_tokens" and r["variant"] == "fast")
    assert row["cuped"] == "no: covariate missing in the treatment arm"
    assert row["cuped_status"] == "covariate_missing"
    page = client.get(f"/results/{experiment.key}/").content.decode()
    assert "no: covariate missing in the treatment arm" in page
    assert "CUPED not applied to Output tokens per unit for fast" in page


@pytest.mark.django_db
def test_cuped_with_an_imbalanced_covariate_says_so_with_the_balance_p_value(three_arms, client):

    MetricDefinition.objects.filter(name="output_tokens").update(covariate_lookback_days=14)
    rng = random.Random(4)
    for i in range(80):
        unit, variant = f"u{i}", ["control", "fast"][i % 2]
        three_arms.expose(unit, variant)
        shift = 800 if variant == "fast" else 0  # the treatment's pre-period counted other traffic
        pre = rng.randint(100, 200) + shift
        three_arms.call(unit, None, in_experiment=False, at=T0 - timedelta(days=3), output_tokens=pre)
        three_arms.call(unit, variant, output_tokens=pre - shift + rng.randint(-20, 20))
    experiment = three_arms.experiment
    experiment.primary_metric = "output_tokens"
    experiment.save(update_fields=["primary_metric"])
    c = _cmp(_metric(results_compute(experiment=experiment).results, "output_tokens"), "fast")
    assert c["cuped_status"] == "covariate_imbalanced" and c["cuped"] is False
    assert c["extra"]["covariate_balance"]["p_value"] < 1e-10
    client.force_login(user_in_group("Analyst"))
    page = client.get(f"/results/{experiment.key}/").content.decode()
    assert "no: covariate imbalanced (p &lt; 0.001)" in page
    assert "differs between arms (p &lt; 0.001" in page
    off = client.get(f"/results/{experiment.key}/", {"cuped": "off", "export": "json", "table": "metrics"})
    row = next(
        r for r in off.json()["rows"] if r["metric_name"] == "output_tokens" and r["variant"] == "fast"
    )
    assert row["cuped"] == "no: covariate imbalanced (p < 0.001)"


@pytest.mark.django_db
def test_edge_cases_give_statuses_and_json_without_nan(three_arms):
    three_arms.expose("a", "control")
    three_arms.call("a", "control", latency_ms=100.0)
    three_arms.expose("b", "control")
    three_arms.call("b", "control", latency_ms=100.0)
    three_arms.expose("c", "fast")
    three_arms.call("c", "fast", latency_ms=100.0)
    three_arms.expose("d", "fast")
    three_arms.call("d", "fast", latency_ms=100.0)
    experiment = three_arms.experiment
    experiment.primary_metric = "no_such_metric"
    experiment.save(update_fields=["primary_metric"])
    snapshot = results_compute(experiment=experiment)
    text = json.dumps(snapshot.results, allow_nan=False)
    assert "NaN" not in text and "Infinity" not in text
    r = snapshot.results
    assert _metric(r, "no_such_metric")["status"] == "undefined_metric"
    assert _cmp(_metric(r, "latency_ms"), "fast")["status"] == "constant_identical"
    assert _cmp(_metric(r, "latency_ms"), "cheap")["status"] == "insufficient_data"
    # no success in either arm (0/2 vs 0/2): still an interval (Newcombe), no relative lift
    success = _cmp(_metric(r, "task_success"), "fast")
    assert success["status"] == "ok" and success["interval_method"] == "newcombe"
    assert success["absolute_ci"][0] < 0 < success["absolute_ci"][1] and success["p_value"] == 1.0
    assert success["relative_status"] == "control_mean_zero"
    assert r["srm"]["flagged"] is False or r["srm"]["status"] in ("ok", "no_data")


def _slow_treatment(raw, units=300):  # 100 per arm: the default guardrail_min_units
    rng = random.Random(9)
    for i in range(units):
        unit, variant = f"g{i}", ["control", "fast", "cheap"][i % 3]
        raw.expose(unit, variant)
        latency = rng.gauss(300 if variant == "cheap" else 200, 20)
        raw.call(unit, variant, latency_ms=latency)


@pytest.mark.django_db
def test_a_significantly_worse_guardrail_pauses_the_variant_through_the_kill_switch(three_arms):
    _slow_treatment(three_arms)
    experiment = three_arms.experiment
    experiment.guardrail_metrics = ["latency_ms"]
    experiment.save(update_fields=["guardrail_metrics"])
    ExperimentAnalysisSettings.objects.create(
        experiment=experiment, auto_pause_guardrails=True, guardrail_min_units=50
    )
    snapshot = results_compute(experiment=experiment)
    breaches = [g for g in snapshot.results["guardrails"] if g["worse"]]
    assert [(g["metric"], g["variant"]) for g in breaches] == [("latency_ms", "cheap")]
    action = GuardrailAction.objects.get()
    assert (action.variant_key, action.metric, action.decision) == ("cheap", "latency_ms", "paused")
    assert "sequential test" in action.message and action.snapshot == snapshot
    switch = KillSwitch.objects.get(scope="variant", target="ana/cheap")
    assert switch.active and switch.updated_by == "analytics:guardrails"
    assert AuditEntry.objects.filter(action="guardrail_paused", object_id="ana/cheap").count() == 1
    # Running again neither pauses twice nor records the breach twice.
    results_compute(experiment=experiment)
    assert GuardrailAction.objects.count() == 1


@pytest.mark.django_db
def test_without_opt_in_a_guardrail_breach_is_recorded_but_nothing_is_paused(three_arms):
    _slow_treatment(three_arms)
    experiment = three_arms.experiment
    experiment.guardrail_metrics = ["latency_ms"]
    experiment.save(update_fields=["guardrail_metrics"])
    results_compute(experiment=experiment)
    assert list(GuardrailAction.objects.values_list("variant_key", "decision")) == [("cheap", "detected")]
    assert not KillSwitch.objects.exists()


@pytest.mark.django_db
def test_snapshots_are_per_phase_and_hold_their_inputs(three_arms):
    _slow_treatment(three_arms, units=30)
    first = results_compute(experiment=three_arms.experiment)
    assert first.phase == three_arms.experiment.phase
    groups = first.inputs["groups"]
    assert sum(g["units"] for g in groups) == 30
    assert set(first.inputs["metrics"]) == {"itt", "served"}
    assert first.inputs["metrics"]["itt"]["latency_ms"]["control"]["n"] == 10


def test_results_recreate_missing_builtin_metrics_instead_of_reporting_them_undefined(three_arms):
    # e.g. a flushed database that never re-ran its data migrations (ratios first: they protect parts)
    MetricDefinition.objects.filter(metric_type="ratio").delete()
    MetricDefinition.objects.all().delete()
    three_arms.expose("u1", "control")
    three_arms.event("u1", "task_success", 1.0)
    snapshot = results_compute(experiment=three_arms.experiment)
    success = _metric(snapshot.results, "task_success")
    assert {v["key"] for v in success["variants"]} >= {"control"}
    assert MetricDefinition.objects.filter(name="task_success", is_builtin=True).exists()


def test_a_metric_with_no_successes_in_one_arm_keeps_the_snapshot(three_arms):
    """10/20 vs 0/20 (and guardrail errors in one arm only): statuses, never a lost snapshot."""
    for i in range(20):
        for variant in ("control", "fast"):
            unit = f"{variant}-{i}"
            three_arms.expose(unit, variant)
            three_arms.call(
                unit,
                variant,
                latency_ms=100.0 + i,
                status="failed" if variant == "control" and i % 2 else "succeeded",
            )
            three_arms.event(unit, "task_success", float(variant == "control" and i % 2 == 0))
    snapshot = results_compute(experiment=three_arms.experiment)
    json.dumps(snapshot.results, allow_nan=False)
    fast = _cmp(_metric(snapshot.results, "task_success"), "fast")
    # the 0/20 arm is not "known exactly": intervals valid at the boundary (issue 32)
    assert fast["status"] == "ok" and fast["relative_status"] == "ok" and fast["relative_lift"] == -1.0
    assert fast["relative_interval_method"] == "mover_r" and fast["interval_method"] == "newcombe"
    assert fast["relative_ci"][0] == -1.0 and -1.0 < fast["relative_ci"][1] < 0
    assert fast["relative_p_value"] < 0.05
    assert fast["bayesian"]["status"] == "ok" and fast["bayesian"]["model"] == "beta_binomial"
    assert fast["sequential"]["interval_method"] == "confidence_sequence_agresti_caffo"
    assert fast["p_value"] == pytest.approx(proportions_ztest([0, 10], [20, 20])[1], rel=1e-9)


def test_values_at_the_accepted_bound_keep_the_metric_valid(three_arms):
    """|value| ≤ 1e9 (the events API bound): sums and squares stay finite, the metric is analysed."""
    from analytics.events import MAX_EVENT_VALUE

    experiment = three_arms.experiment
    experiment.primary_metric = "rating"
    experiment.save(update_fields=["primary_metric"])
    for i in range(10):
        for variant in ("control", "fast"):
            unit = f"{variant}-{i}"
            three_arms.expose(unit, variant)
            three_arms.call(unit, variant, latency_ms=100.0)
            three_arms.event(unit, "rating", MAX_EVENT_VALUE * (1 if i % 2 else -1))
            three_arms.event(unit, "rating", MAX_EVENT_VALUE)
    snapshot = results_compute(experiment=experiment)
    rating = _metric(snapshot.results, "rating")
    assert rating["status"] == "ok", rating["reason"]
    fast = _cmp(rating, "fast")
    assert fast["status"] in ("ok", "constant_identical") and fast["control_n"] == 10


@pytest.mark.django_db
def test_a_guardrail_constant_in_both_arms_and_worse_is_a_certain_breach(three_arms):
    """Every call of an arm costs the same (standard error 0, no test): the dearer arm's
    difference is certain, so it is a breach, worded as such; the cheaper one is better."""
    for i in range(150):  # 50 units per arm, one call each
        unit, variant = f"k{i}", ["control", "fast", "cheap"][i % 3]
        three_arms.expose(unit, variant)
        three_arms.call(
            unit, variant, cost_usd={"control": "0.002", "fast": "0.003", "cheap": "0.001"}[variant]
        )
    experiment = three_arms.experiment
    experiment.guardrail_metrics = ["cost_usd"]
    experiment.save(update_fields=["guardrail_metrics"])
    ExperimentAnalysisSettings.objects.create(experiment=experiment, guardrail_min_units=50)
    snapshot = results_compute(experiment=experiment)
    rows = {g["variant"]: g for g in snapshot.results["guardrails"]}
    assert rows["fast"]["status"] == "zero_variance" and rows["fast"]["certain"] is True
    assert (rows["fast"]["worse"], rows["cheap"]["worse"]) == (True, False)
    metric = next(m for m in snapshot.results["metrics"] if m["name"] == "cost_usd")
    verdicts = {c["variant"]: c["sequential_verdict"] for c in metric["comparisons"]}
    assert verdicts == {"fast": "worse", "cheap": "better"}
    action = GuardrailAction.objects.get()
    assert (action.variant_key, action.metric, action.decision) == ("fast", "cost_usd", "detected")
    assert "with certainty (both arms constant, standard error 0)" in action.message
