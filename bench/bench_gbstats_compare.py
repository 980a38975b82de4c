"""Our statistics engine next to GrowthBook's ``gbstats`` 0.8.0 on the same sufficient statistics.

Run:  .venv/bin/python bench/bench_gbstats_compare.py [--cases 200] [--venv /tmp/gbstats-venv]

gbstats 0.8.0 pins ``pandas<2`` so it cannot live in the project's venv: this script creates its
own virtualenv (``python -m venv`` + ``pip install gbstats==0.8.0``, once) and re-runs itself there
with ``--worker``, passing the cases as JSON on stdin and reading gbstats' answers and timings
back. ``bench/bench_analytics.py`` uses the same helpers on the sums from PostgreSQL.

Where the methods coincide the numbers must agree to floating-point rounding, and do:

* **means** (``SampleMeanStatistic`` / our ``MeanStatistic``): Welch t with Welch–Satterthwaite
  df, absolute difference, CI and p-value; relative lift ``(μt−μc)/μc`` with the delta-method
  variance ``vt/(nt μc²) + μt² vc/(nc μc⁴)`` and the same t critical value.
* **ratios** (``RatioStatistic``): delta-method per-arm variance (Deng et al. 2018), same Welch t.
* **sequential** (``SequentialTwoSidedTTest``): asymptotic confidence sequences (Waudby-Smith et al.,
  eq. 9 / 155 / 161) with ``sequential_tuning_parameter`` = 5000: same half-width and p-value.
* **Bayesian** for means and ratios (``EffectBayesianABTest``, improper flat prior, relative
  effect): chance to win is Φ(μ/σ) on the same Gaussian — identical; the credible interval too.

Where and why they differ (by design, printed as "differs" rows):

* **proportions**: gbstats runs the Welch *t*-test with unpooled (Wald) variances for the p-value
  and every interval; we use the two-proportion *z*-test with the pooled null variance for the
  p-value (statsmodels' ``proportions_ztest``) and intervals that stay valid when an arm has 0 or n
  successes, where a Wald variance is 0 (issue 32): Newcombe's hybrid score interval for the
  difference, MOVER-R on Wilson limits for the relative lift, Agresti–Caffo estimates in the
  confidence sequence, Beta(1, 1)-per-arm posteriors in the Bayesian engine (gbstats: a Gaussian
  on the relative effect). On these arms (n 2,000–200,000, rate ~0.3) the absolute differences
  stay small — CI bounds ≤ 8e-5 (absolute) / 7e-4 (relative), sequential ≤ 1.3e-4, credible
  interval ≤ 7e-4, chance to win ≤ 0.002 — but the printed *relative* differences are large where
  the values are near 0 (a bound next to 0; a chance to win of 7e-10 vs 2e-10).
* **relative p-value**: not compared. Ours is the test dual to the relative CI shown (delta method
  for means and ratios, as gbstats; for proportions the p-value at which the Newcombe / MOVER-R
  intervals touch "no effect").
* **CUPED**: gbstats' ``compute_theta`` pools the two arms into one sample (total covariance /
  total pre-period variance, so the arm difference leaks into θ); we use the within-arm pooled θ =
  ΣS_xy / ΣS_xx, the OLS coefficient of x in ``y ~ 1 + treatment + x`` (Lin 2013), which is
  exactly shift-invariant and unbiased. The adjusted lifts differ by O(effect × corr); the
  variance reduction is reported by us only.
* **risk**: gbstats' risk uses the relative effect scaled differently (``risk`` = [control,
  treatment] expected losses on the relative scale); ours is the same normal partial expectation
  E[max(−δ, 0)] — identical when both are relative; printed for inspection.
* **tiny p-values**: gbstats computes ``2 (1 − F(|t|))``, which cancels to 0 below ~1e-12; we use
  the survival function directly. p-values are therefore compared by absolute difference (< 1e-12).
* **zero control mean**: gbstats returns an uninformative default (p = 1, CI [0, 0]); we return an
  explicit ``relative_status`` and keep the absolute test.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_VENV = Path(os.environ.get("GBSTATS_VENV", "/tmp/gbstats-venv"))
GBSTATS_VERSION = "0.8.0"


# ----------------------------------------------------------------------------------------------
# gbstats side (runs inside the gbstats venv; imports nothing from the project)
# ----------------------------------------------------------------------------------------------
def _gb_stat(kind: str, arm: dict):
    from gbstats.models.statistics import (
        ProportionStatistic,
        RatioStatistic,
        RegressionAdjustedStatistic,
        SampleMeanStatistic,
    )

    if kind == "proportion":
        return ProportionStatistic(n=arm["n"], sum=arm["sum"])
    if kind == "mean":
        return SampleMeanStatistic(n=arm["n"], sum=arm["sum"], sum_squares=arm["sum_squares"])
    if kind == "ratio":
        return RatioStatistic(
            n=arm["n"],
            m_statistic=SampleMeanStatistic(n=arm["n"], sum=arm["m_sum"], sum_squares=arm["m_ss"]),
            d_statistic=SampleMeanStatistic(n=arm["n"], sum=arm["d_sum"], sum_squares=arm["d_ss"]),
            m_d_sum_of_products=arm["md"],
        )
    return RegressionAdjustedStatistic(
        n=arm["n"],
        post_statistic=SampleMeanStatistic(n=arm["n"], sum=arm["sum"], sum_squares=arm["sum_squares"]),
        pre_statistic=SampleMeanStatistic(n=arm["n"], sum=arm["x_sum"], sum_squares=arm["x_ss"]),
        post_pre_sum_of_products=arm["xy"],
        theta=0,
    )


def _gb_one(case: dict) -> dict:
    from gbstats.bayesian.tests import EffectBayesianABTest, EffectBayesianConfig
    from gbstats.frequentist.tests import (
        FrequentistConfig,
        SequentialConfig,
        SequentialTwoSidedTTest,
        TwoSidedTTest,
    )
    from gbstats.models.statistics import compute_theta

    a, b = _gb_stat(case["kind"], case["control"]), _gb_stat(case["kind"], case["treatment"])
    if case["kind"] == "cuped":
        theta = compute_theta(a, b)
        a.theta = b.theta = theta
    absolute = TwoSidedTTest(a, b, FrequentistConfig(difference_type="absolute")).compute_result()
    relative = TwoSidedTTest(a, b, FrequentistConfig(difference_type="relative")).compute_result()
    seq = SequentialTwoSidedTTest(
        a, b, SequentialConfig(difference_type="relative", sequential_tuning_parameter=case["tuning"])
    ).compute_result()
    bayes = EffectBayesianABTest(a, b, EffectBayesianConfig(difference_type="relative")).compute_result()
    return {
        "absolute_lift": absolute.expected,
        "absolute_ci": list(absolute.ci),
        "p_value": absolute.p_value,
        "relative_lift": relative.expected,
        "relative_ci": list(relative.ci),
        "relative_p_value": relative.p_value,
        "sequential_relative_ci": list(seq.ci),
        "chance_to_win": bayes.chance_to_win,
        "bayes_ci": list(bayes.ci),
        "risk": list(bayes.risk),
    }


def worker() -> None:
    """Entry point inside the gbstats venv: JSON ``{cases, repeat}`` on stdin → results + timings."""
    payload = json.load(sys.stdin)
    cases, repeat = payload["cases"], payload.get("repeat", 3)
    results = [_gb_one(c) for c in cases]
    full = freq = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        for c in cases:
            _gb_one(c)
        full = min(full, time.perf_counter() - t0)
        from gbstats.frequentist.tests import FrequentistConfig, TwoSidedTTest

        t0 = time.perf_counter()
        for c in cases:
            a, b = _gb_stat(c["kind"], c["control"]), _gb_stat(c["kind"], c["treatment"])
            TwoSidedTTest(a, b, FrequentistConfig(difference_type="relative")).compute_result()
        freq = min(freq, time.perf_counter() - t0)
    import gbstats

    json.dump(
        {
            "version": getattr(gbstats, "__version__", GBSTATS_VERSION),
            "results": results,
            "seconds_full": full,
            "seconds_frequentist": freq,
        },
        sys.stdout,
    )


# ----------------------------------------------------------------------------------------------
# our side
# ----------------------------------------------------------------------------------------------
def ensure_venv(path: Path = DEFAULT_VENV) -> Path:
    """The gbstats venv's python, creating the venv and installing gbstats on first use."""
    import benchlib  # not at the top: the --worker process runs in the gbstats venv, without the project

    return benchlib.ensure_venv(
        path,
        requirement=f"gbstats=={GBSTATS_VERSION}",
        probe=f"import gbstats.gbstats; assert '{GBSTATS_VERSION}'",
    )


def run_gbstats(cases: list[dict], *, repeat: int = 3, venv: Path = DEFAULT_VENV) -> dict:
    """Run gbstats on ``cases`` in its own venv; returns ``{version, results, seconds_full, seconds_frequentist}``."""
    python = ensure_venv(venv)
    proc = subprocess.run(
        [str(python), str(Path(__file__).resolve()), "--worker"],
        input=json.dumps({"cases": cases, "repeat": repeat}),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"gbstats worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def our_statistic(kind: str, arm: dict):
    """Our engine's input for a case arm (same JSON shape as the gbstats side)."""
    from analytics.stats import CovariateStatistic, MeanStatistic, ProportionStatistic, RatioStatistic

    if kind == "proportion":
        return ProportionStatistic(arm["n"], arm["sum"])
    if kind == "mean":
        return MeanStatistic(arm["n"], arm["sum"], arm["sum_squares"])
    if kind == "ratio":
        n = arm["n"]
        return RatioStatistic(
            n,
            MeanStatistic(n, arm["m_sum"], arm["m_ss"]),
            MeanStatistic(n, arm["d_sum"], arm["d_ss"]),
            arm["md"],
        )
    return CovariateStatistic(arm["n"], arm["sum"], arm["sum_squares"], arm["x_sum"], arm["x_ss"], arm["xy"])


def ours_one(case: dict) -> dict:
    """Everything the results service computes for one comparison: fixed-horizon, sequential, Bayesian."""
    from analytics.stats import compare, compare_bayesian, compare_sequential

    c, t = our_statistic(case["kind"], case["control"]), our_statistic(case["kind"], case["treatment"])
    fixed = compare(c, t)
    seq = compare_sequential(c, t, tuning_parameter=case["tuning"])
    bayes = compare_bayesian(c, t, relative=True)
    return {
        "absolute_lift": fixed.absolute_lift,
        "absolute_ci": list(fixed.absolute_ci or (None, None)),
        "p_value": fixed.p_value,
        "relative_lift": fixed.relative_lift,
        "relative_ci": list(fixed.relative_ci or (None, None)),
        "sequential_relative_ci": list(seq.relative_ci or (None, None)),
        "chance_to_win": bayes.chance_to_win,
        "bayes_ci": list(bayes.credible_interval or (None, None)),
        "risk": [bayes.expected_loss_control, bayes.expected_loss_treatment],
    }


def time_ours(cases: list[dict], repeat: int = 3) -> dict:
    """Best-of-``repeat`` seconds for all cases: scalar full path, scalar frequentist, vectorised frequentist."""
    import numpy as np

    from analytics.stats import compare, compare_many

    stats = [
        (our_statistic(c["kind"], c["control"]), our_statistic(c["kind"], c["treatment"])) for c in cases
    ]
    vec = {}
    for kind in ("mean", "proportion"):
        sel = [c for c in cases if c["kind"] == kind]
        if sel:
            vec[kind] = {
                "control_n": np.array([c["control"]["n"] for c in sel], float),
                "control_sum": np.array([c["control"]["sum"] for c in sel]),
                "treatment_n": np.array([c["treatment"]["n"] for c in sel], float),
                "treatment_sum": np.array([c["treatment"]["sum"] for c in sel]),
                **(
                    {
                        "control_sum_squares": np.array([c["control"]["sum_squares"] for c in sel]),
                        "treatment_sum_squares": np.array([c["treatment"]["sum_squares"] for c in sel]),
                    }
                    if kind == "mean"
                    else {}
                ),
            }
    vectorisable = sum(1 for c in cases if c["kind"] in vec)

    def best(fn):
        out = math.inf
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            out = min(out, time.perf_counter() - t0)
        return out

    return {
        "seconds_full": best(lambda: [ours_one(c) for c in cases]),
        "seconds_frequentist": best(lambda: [compare(a, b) for a, b in stats]),
        "seconds_vectorised": best(lambda: [compare_many(kind=k, **v) for k, v in vec.items()]),
        "vectorised_cases": vectorisable,
    }


FIELDS = (
    "absolute_lift",
    "absolute_ci",
    "p_value",
    "relative_lift",
    "relative_ci",
    "sequential_relative_ci",
    "chance_to_win",
    "bayes_ci",
)
#: (kind, field) pairs that differ by design (see the module docstring).
EXPECTED_DIFFERENCES = {
    ("proportion", "p_value"),
    ("proportion", "absolute_ci"),
    ("proportion", "relative_ci"),
    ("proportion", "sequential_relative_ci"),
    ("proportion", "chance_to_win"),
    ("proportion", "bayes_ci"),
    ("cuped", "absolute_lift"),
    ("cuped", "absolute_ci"),
    ("cuped", "p_value"),
    ("cuped", "relative_lift"),
    ("cuped", "relative_ci"),
    ("cuped", "sequential_relative_ci"),
    ("cuped", "chance_to_win"),
    ("cuped", "bayes_ci"),
}


def _flat(v):
    return v if isinstance(v, list) else [v]


def max_rel_diff(a, b) -> float:
    out = 0.0
    for x, y in zip(_flat(a), _flat(b), strict=True):
        if x is None or y is None:
            continue
        out = max(out, abs(x - y) / max(abs(x), abs(y), 1e-12))
    return out


def compare_report(
    cases: list[dict], ours: list[dict], theirs: list[dict]
) -> list[tuple[str, str, float, str]]:
    """``[(kind, field, max relative difference, "agrees" | "differs (by design)" | "DISAGREES")]``."""
    rows = []
    for kind in sorted({c["kind"] for c in cases}):
        idx = [i for i, c in enumerate(cases) if c["kind"] == kind]
        for f in FIELDS:
            d = max((max_rel_diff(ours[i][f], theirs[i][f]) for i in idx), default=0.0)
            if f == "p_value":  # gbstats computes 2(1 − F(|t|)): no relative precision below ~1e-12
                d = max((abs(ours[i][f] - theirs[i][f]) for i in idx), default=0.0)
            verdict = (
                "agrees"
                if d < 1e-6
                else ("differs (by design)" if (kind, f) in EXPECTED_DIFFERENCES else "DISAGREES")
            )
            rows.append((kind, f, d, verdict))
    return rows


def synthetic_cases(k: int, seed: int = 0, tuning: float = 5000.0) -> list[dict]:
    """``k`` seeded cases spread over the four kinds, large enough arms (n in 2,000–200,000)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    cases = []
    for i in range(k):
        kind = ("mean", "proportion", "ratio", "cuped")[i % 4]
        arms = []
        for shift in (0.0, rng.normal(0, 0.03)):
            n = int(rng.integers(2_000, 200_000))
            if kind == "proportion":
                arms.append({"n": n, "sum": float(rng.binomial(n, 0.3 * (1 + shift)))})
                continue
            x = rng.gamma(2.0, 50.0, n)
            y = 0.6 * x + rng.gamma(2.0, 30.0, n) * (1 + shift)
            d = rng.integers(1, 6, n).astype(float)
            if kind == "ratio":
                arms.append(
                    {
                        "n": n,
                        "m_sum": float(y.sum()),
                        "m_ss": float((y * y).sum()),
                        "d_sum": float(d.sum()),
                        "d_ss": float((d * d).sum()),
                        "md": float((y * d).sum()),
                    }
                )
            else:
                arms.append(
                    {
                        "n": n,
                        "sum": float(y.sum()),
                        "sum_squares": float((y * y).sum()),
                        "x_sum": float(x.sum()),
                        "x_ss": float((x * x).sum()),
                        "xy": float((x * y).sum()),
                    }
                )
        cases.append({"kind": kind, "control": arms[0], "treatment": arms[1], "tuning": tuning})
    return cases


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    args = ap.parse_args()
    if args.worker:
        worker()
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    cases = synthetic_cases(args.cases)
    gb = run_gbstats(cases, venv=args.venv)
    ours = [ours_one(c) for c in cases]
    print(
        f"gbstats {gb['version']} vs analytics.stats on {len(cases)} comparisons (same sufficient statistics)\n"
    )
    print(f"{'kind':<11}{'field':<24}{'max diff':>14}  verdict   (relative; absolute for p_value)")
    for kind, f, d, verdict in compare_report(cases, ours, gb["results"]):
        print(f"{kind:<11}{f:<24}{d:>14.2e}  {verdict}")
    mine = time_ours(cases)
    n = len(cases)
    print("\nper comparison (best of 3):")
    print(
        f"  full (fixed + sequential + Bayesian): ours {mine['seconds_full'] / n * 1e6:8.1f} µs   "
        f"gbstats {gb['seconds_full'] / n * 1e6:8.1f} µs   ×{gb['seconds_full'] / mine['seconds_full']:.1f}"
    )
    print(
        f"  frequentist only:                     ours {mine['seconds_frequentist'] / n * 1e6:8.1f} µs   "
        f"gbstats {gb['seconds_frequentist'] / n * 1e6:8.1f} µs   ×{gb['seconds_frequentist'] / mine['seconds_frequentist']:.1f}"
    )
    if mine["vectorised_cases"]:
        per_vec = mine["seconds_vectorised"] / mine["vectorised_cases"]
        per_gb = gb["seconds_frequentist"] / n
        print(
            f"  frequentist vectorised (means+props): ours {per_vec * 1e6:8.2f} µs   "
            f"gbstats {per_gb * 1e6:8.1f} µs   ×{per_gb / per_vec:.0f}"
        )


if __name__ == "__main__":
    main()
