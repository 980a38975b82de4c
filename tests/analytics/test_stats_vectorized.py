"""compare_many(): identical to the scalar compare() row by row, incl. edge cases."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analytics.stats import MeanStatistic, ProportionStatistic, compare, compare_many

FIELDS = (
    "control_mean",
    "treatment_mean",
    "absolute_lift",
    "std_error",
    "relative_lift",
    "relative_std_error",
    "relative_p_value",
    "p_value",
    "statistic",
    "df",
)


def _same(a, b):
    assert a.status == b.status
    assert a.relative_status == b.relative_status
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert (x is None) == (y is None), f
        if x is not None:
            assert x == pytest.approx(y, rel=1e-9, abs=1e-15), f
    for f in ("absolute_ci", "relative_ci"):
        x, y = getattr(a, f), getattr(b, f)
        assert (x is None) == (y is None), f
        if x is not None:
            assert x == pytest.approx(y, rel=1e-9, abs=1e-15), f


def _mean_cases(rng, k=300):
    rows = []
    for _ in range(k):
        arms = []
        for _arm in range(2):
            n = int(rng.choice([0, 1, 2, 5, 50, 500]))
            x = rng.normal(rng.choice([-5.0, 0.0, 3.0]), rng.choice([0.0, 1.0, 10.0]), n)
            arms.append((n, float(x.sum()), float((x * x).sum())))
        rows.append(arms)
    rows.append([(10, 10.0, 10.0), (10, 20.0, 40.0)])  # zero variance
    rows.append([(10, 10.0, 10.0), (12, 12.0, 12.0)])  # constant identical
    return rows


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_compare_many_means_equals_scalar_compare(alternative):
    rows = _mean_cases(np.random.default_rng(0))
    c = np.array([r[0] for r in rows])
    t = np.array([r[1] for r in rows])
    many = compare_many(
        control_n=c[:, 0],
        control_sum=c[:, 1],
        control_sum_squares=c[:, 2],
        treatment_n=t[:, 0],
        treatment_sum=t[:, 1],
        treatment_sum_squares=t[:, 2],
        alternative=alternative,
    )
    assert len(many) == len(rows)
    for i, (rc, rt) in enumerate(rows):
        _same(many.result(i), compare(MeanStatistic(*rc), MeanStatistic(*rt), alternative=alternative))
    json.dumps(many.to_dicts(), allow_nan=False)


@pytest.mark.parametrize("alternative", ["two-sided", "greater"])
def test_compare_many_proportions_equals_scalar_compare(alternative):
    rng = np.random.default_rng(1)
    nc = rng.choice([0, 1, 2, 100, 5000], 300)
    nt = rng.choice([0, 1, 2, 100, 5000], 300)
    xc = np.floor(nc * rng.choice([0, 0.001, 0.1, 0.5, 1.0], 300))
    xt = np.floor(nt * rng.choice([0, 0.001, 0.1, 0.5, 1.0], 300))
    many = compare_many(
        kind="proportion",
        control_n=nc,
        control_sum=xc,
        treatment_n=nt,
        treatment_sum=xt,
        alternative=alternative,
    )
    for i in range(300):
        _same(
            many.result(i),
            compare(
                ProportionStatistic(int(nc[i]), xc[i]),
                ProportionStatistic(int(nt[i]), xt[i]),
                alternative=alternative,
            ),
        )
    json.dumps(many.to_dicts(), allow_nan=False)


def test_compare_many_broadcasts_shared_control():
    many = compare_many(
        control_n=1000,
        control_sum=100,
        treatment_n=[1000, 1000, 1000],
        treatment_sum=[90, 100, 130],
        kind="proportion",
    )
    assert len(many) == 3
    assert many.p_value[1] == pytest.approx(1.0)


def test_compare_many_validates_input():
    with pytest.raises(ValueError, match="finite"):
        compare_many(
            control_n=[10],
            control_sum=[np.nan],
            control_sum_squares=[1],
            treatment_n=[10],
            treatment_sum=[1],
            treatment_sum_squares=[1],
        )
    with pytest.raises(ValueError, match="inconsistent"):
        compare_many(
            control_n=[10],
            control_sum=[10],
            control_sum_squares=[1],
            treatment_n=[10],
            treatment_sum=[1],
            treatment_sum_squares=[1],
        )
    with pytest.raises(ValueError, match="kind"):
        compare_many(control_n=[10], control_sum=[1], treatment_n=[10], treatment_sum=[1], kind="ratio")
    with pytest.raises(ValueError, match="sum_squares is required"):
        compare_many(control_n=[10], control_sum=[1], treatment_n=[10], treatment_sum=[1])
