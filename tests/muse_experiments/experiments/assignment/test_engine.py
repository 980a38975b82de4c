"""Behaviour of the assignment engine (muse_experiments.experiments.assignment.engine)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from muse_experiments.experiments.assignment.engine import assign, bucket, route
from muse_experiments.experiments.assignment.growthbook import hashing
from muse_experiments.experiments.assignment.specs import (
    REASONS,
    ConfigSnapshot,
    Decision,
    ExperimentSpec,
    HoldoutSpec,
    LayerSpec,
    VariantSpec,
)
from muse_experiments.experiments.assignment.vectorised import assign_many

REPO = Path(__file__).resolve().parents[4]
P_FLOOR = 1e-6  # statistical checks fail only if p < 1e-6: deterministic ids, essentially never flaky
IDS_1M = [f"user-{i}" for i in range(1_000_000)]
IDS_200K = IDS_1M[:200_000]


def variants(*weights: float) -> tuple[VariantSpec, ...]:
    return tuple(
        VariantSpec(
            key=f"v{i}", weight=w, endpoint_id=f"ep{i}", is_control=i == 0, overrides={"temperature": i / 10}
        )
        for i, w in enumerate(weights)
    )


def experiment(eid: int = 1, **kw) -> ExperimentSpec:
    base = {
        "id": eid,
        "key": f"exp-{eid}",
        "seed": f"seed-{eid}",
        "phase": 0,
        "unit_type": "session",
        "variants": variants(1, 1),
    }
    base.update(kw)
    return ExperimentSpec(**base)


def snapshot(*exps: ExperimentSpec, holdout: HoldoutSpec | None = None) -> ConfigSnapshot:
    return ConfigSnapshot(version=1, experiments=tuple(exps), holdout=holdout)


def binomial_ok(k: int, n: int, p: float) -> bool:
    return stats.binomtest(k, n, p).pvalue > P_FLOOR


# ----------------------------------------------------------------------------- GrowthBook parity


def test_assignment_is_growthbook_hash_v2_on_bucket_ranges():
    exp = experiment(variants=variants(0.2, 0.3, 0.5), coverage=0.8)
    ranges = hashing.get_bucket_ranges(3, 0.8, [0.2, 0.3, 0.5])
    for i in range(2000):
        uid = f"s-{i}"
        assert bucket(exp, uid) == hashing.choose_variation(hashing.hash(exp.seed, uid, 2), ranges)


def test_layer_membership_is_growthbook_in_namespace_on_the_unit_id():
    exp = experiment(layer=LayerSpec("llm", 0.25, 0.6))
    for i in range(2000):
        uid = f"s-{i}"
        d = assign(snapshot(exp), session_id=uid, user_id="u")[0]
        assert (d.reason != "not_in_layer") is hashing.in_namespace(uid, ("llm", 0.25, 0.6))


def test_route_and_assign_agree_with_the_hash_only_bucket_when_nothing_else_applies():
    exp = experiment(variants=variants(1, 2, 1), coverage=0.7, layer=LayerSpec("L", 0.1, 0.8))
    snap = snapshot(exp)
    for i in range(3000):
        sid = f"sess-{i}"
        expected = bucket(exp, sid)
        d = route(snap, session_id=sid, user_id="")
        assert (d.variant_index if d.in_experiment else -1) == expected
        a = assign(snap, session_id=sid, user_id="")[0]
        assert (a.variant_index if a.in_experiment else -1) == expected


# ----------------------------------------------------------------------------- vectorised path


def test_vectorised_assignment_equals_scalar_path_on_ascii_ids():
    exp = experiment(variants=variants(0.1, 0.6, 0.3), coverage=0.9, layer=LayerSpec("L", 0.3, 0.95))
    ids = [f"id-{i}-{i * 7919 % 1000}" for i in range(20_000)] + ["", "0", "x" * 64]
    assert assign_many(exp, ids).tolist() == [bucket(exp, u) for u in ids]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=12), max_size=40), st.sampled_from([1, 2]))
def test_vectorised_assignment_equals_scalar_path_on_any_text(ids, layer_hash_version):
    exp = experiment(
        variants=variants(1, 1, 2), coverage=0.8, layer=LayerSpec("lay", 0.0, 0.7, layer_hash_version)
    )
    out = assign_many(exp, ids)
    assert out.dtype == np.int64 and out.shape == (len(ids),)
    assert out.tolist() == [bucket(exp, u) for u in ids]


# ----------------------------------------------------------------------------- determinism


def test_same_unit_gets_same_answer_in_another_process():
    code = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from muse_experiments.experiments.assignment.engine import *
from muse_experiments.experiments.assignment.specs import *
exps = (
    ExperimentSpec(id=1, key="a", seed="sa", phase=0, unit_type="session",
        variants=(VariantSpec("c", 1, "e0"), VariantSpec("t", 1, "e1")), coverage=0.6,
        layer=LayerSpec("L1", 0.0, 0.5)),
    ExperimentSpec(id=2, key="b", seed="sb", phase=1, unit_type="user",
        variants=(VariantSpec("c", 1, "e0"), VariantSpec("t", 3, "e1")), layer=LayerSpec("L2", 0.2, 1.0)),
)
snap = ConfigSnapshot(version=1, experiments=exps, holdout=HoldoutSpec(0.1))
out = []
for i in range(3000):
    d = route(snap, session_id=f"s-{i}-é", user_id=f"u-{i % 700}-😀")
    out.append([d.experiment_key, d.variant_key, d.reason])
print(json.dumps(out))
"""
    env = dict(os.environ, PYTHONHASHSEED="4242")
    proc = subprocess.run(
        [sys.executable, "-c", code, str(REPO)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    theirs = json.loads(proc.stdout)
    exps = (
        experiment(
            1,
            key="a",
            seed="sa",
            variants=(VariantSpec("c", 1, "e0"), VariantSpec("t", 1, "e1")),
            coverage=0.6,
            layer=LayerSpec("L1", 0.0, 0.5),
        ),
        experiment(
            2,
            key="b",
            seed="sb",
            phase=1,
            unit_type="user",
            variants=(VariantSpec("c", 1, "e0"), VariantSpec("t", 3, "e1")),
            layer=LayerSpec("L2", 0.2, 1.0),
        ),
    )
    snap = snapshot(*exps, holdout=HoldoutSpec(0.1))
    ours = []
    for i in range(3000):
        d = route(snap, session_id=f"s-{i}-é", user_id=f"u-{i % 700}-😀")
        ours.append([d.experiment_key, d.variant_key, d.reason])
    assert ours == theirs
    assert {r[2] for r in ours} >= {"assigned", "holdout"}


# ----------------------------------------------------------------------------- statistics


def test_splits_are_within_binomial_tolerance_on_a_million_ids():
    exp = experiment(variants=variants(0.2, 0.3, 0.5))
    out = assign_many(exp, IDS_1M)
    counts = np.bincount(out[out >= 0], minlength=3)
    assert counts.sum() == len(IDS_1M)
    assert stats.chisquare(counts, f_exp=np.array([0.2, 0.3, 0.5]) * len(IDS_1M)).pvalue > P_FLOOR


@settings(max_examples=30, deadline=None)
@given(
    st.floats(0, 1),
    st.floats(0, 1),
    st.lists(st.floats(0.01, 10), min_size=2, max_size=5),
)
def test_raising_coverage_never_moves_an_included_unit_to_another_variant(c1, c2, weights):
    low, high = sorted((c1, c2))
    ids = IDS_1M[:3000]
    small = assign_many(experiment(variants=variants(*weights), coverage=low), ids)
    large = assign_many(experiment(variants=variants(*weights), coverage=high), ids)
    included = small >= 0
    assert np.array_equal(large[included], small[included])


@settings(max_examples=30, deadline=None)
@given(st.floats(0, 1), st.floats(0, 1))
def test_lowering_coverage_only_moves_units_out(c1, c2):
    high, low = max(c1, c2), min(c1, c2)
    ids = IDS_1M[:3000]
    before = assign_many(experiment(variants=variants(1, 1, 1), coverage=high), ids)
    after = assign_many(experiment(variants=variants(1, 1, 1), coverage=low), ids)
    changed = before != after
    assert np.all(after[changed] == -1)


def test_coverage_gate_and_variant_choice_are_independent():
    out = assign_many(experiment(coverage=0.1), IDS_1M)
    included = out[out >= 0]
    assert binomial_ok(included.size, len(IDS_1M), 0.1)
    assert binomial_ok(int((included == 1).sum()), included.size, 0.5)


def _membership_table(in_a: np.ndarray, in_b: np.ndarray) -> np.ndarray:
    return np.array(
        [[np.sum(in_a & in_b), np.sum(in_a & ~in_b)], [np.sum(~in_a & in_b), np.sum(~in_a & ~in_b)]]
    )


@pytest.mark.parametrize(
    ("key_a", "key_b", "hash_version"),
    [("llm-routing", "prompting", 1), ("coder", "planner", 1), ("layer-a", "layer-b", 2)],
)
def test_different_layers_are_independent(key_a, key_b, hash_version):
    a = experiment(1, layer=LayerSpec(key_a, 0.0, 1.0, hash_version), variants=variants(1, 1, 1))
    b = experiment(2, layer=LayerSpec(key_b, 0.0, 1.0, hash_version), variants=variants(1, 1))
    va, vb = assign_many(a, IDS_200K), assign_many(b, IDS_200K)
    table = np.zeros((3, 2))
    np.add.at(table, (va, vb), 1)
    assert stats.chi2_contingency(table).pvalue > P_FLOOR
    # slice membership: first half of layer A vs first third of layer B
    in_a = assign_many(experiment(1, layer=LayerSpec(key_a, 0.0, 0.5, hash_version)), IDS_200K) >= 0
    in_b = assign_many(experiment(2, layer=LayerSpec(key_b, 0.0, 0.33, hash_version)), IDS_200K) >= 0
    assert stats.chi2_contingency(_membership_table(in_a, in_b)).pvalue > P_FLOOR


def test_growthbook_v1_layers_with_near_identical_keys_are_correlated_but_v2_layers_are_not():
    """Documents a property of GrowthBook's legacy namespace hash (FNV-1a of id + "__" + key,
    mod 1000): keys differing only in the last character give correlated layer hashes."""
    ids = IDS_200K[:100_000]
    a1 = np.array([hashing.hash("__layer-a", u, 1) for u in ids])
    b1 = np.array([hashing.hash("__layer-b", u, 1) for u in ids])
    assert stats.chi2_contingency(_membership_table(a1 < 0.5, b1 < 0.33)).pvalue < 1e-9
    a2 = assign_many(experiment(1, layer=LayerSpec("layer-a", 0.0, 0.5, 2)), ids) >= 0
    b2 = assign_many(experiment(2, layer=LayerSpec("layer-b", 0.0, 0.33, 2)), ids) >= 0
    assert stats.chi2_contingency(_membership_table(a2, b2)).pvalue > P_FLOOR


def test_experiments_in_one_layer_with_disjoint_ranges_are_mutually_exclusive():
    a = experiment(1, layer=LayerSpec("one-layer", 0.0, 0.4))
    b = experiment(2, layer=LayerSpec("one-layer", 0.4, 1.0))
    va, vb = assign_many(a, IDS_200K), assign_many(b, IDS_200K)
    assert not np.any((va >= 0) & (vb >= 0))
    assert np.all((va >= 0) | (vb >= 0))
    assert binomial_ok(int((va >= 0).sum()), len(IDS_200K), 0.4)


def test_coverage_zero_means_nobody():
    exp = experiment(coverage=0.0)
    assert np.all(assign_many(exp, IDS_200K) == -1)
    decisions = [route(snapshot(exp), session_id=u, user_id=u) for u in IDS_200K[:2000]]
    assert all(not d.in_experiment for d in decisions)
    assert {d.trace[-1] for d in decisions} == {"exp-1:not_in_coverage"}


def test_holdout_share_is_respected_and_holdout_units_get_no_experiment():
    snap = snapshot(experiment(unit_type="user"), holdout=HoldoutSpec(share=0.15))
    n = 40_000
    held = 0
    for i in range(n):
        d = route(snap, session_id=f"s{i}", user_id=f"user-{i}")
        if d.reason == "holdout":
            held += 1
            assert not d.in_experiment and d.variant_key is None and d.experiment_key is None
        else:
            assert d.in_experiment
    assert binomial_ok(held, n, 0.15)


# ----------------------------------------------------------------------------- reasons


def test_forced_unit_wins_and_says_so():
    exp = experiment(
        coverage=0.0, layer=LayerSpec("L", 0.0, 0.001), forced={"qa-1": "v1"}, condition={"never": True}
    )
    snap = snapshot(exp, holdout=HoldoutSpec(share=1.0))
    d = route(snap, session_id="qa-1", user_id="qa-user")
    assert (d.in_experiment, d.reason, d.variant_key, d.endpoint_id) == (True, "forced", "v1", "ep1")
    assert d.is_forced
    other = route(snap, session_id="someone", user_id="u")
    assert other.reason == "holdout" and not other.is_forced


def test_sticky_assignment_wins_and_says_so():
    exp = experiment(phase=3, coverage=0.0, condition={"plan": "pro"})
    d = route(snapshot(exp), session_id="s", user_id="u", attributes={"plan": "pro"}, sticky={(1, 3): "v1"})
    assert (d.in_experiment, d.reason, d.variant_key, d.phase) == (True, "sticky", "v1", 3)
    assert not d.is_forced


def test_sticky_never_serves_a_call_outside_the_experiments_targeting_or_layer_slice():
    exp = experiment(phase=3, condition={"plan": "pro"})
    d = route(snapshot(exp), session_id="s", user_id="u", attributes={"plan": "free"}, sticky={(1, 3): "v1"})
    assert (d.in_experiment, d.trace) == (False, ("exp-1:not_targeted",))
    sliced = experiment(phase=3, layer=LayerSpec("L", 0.0, 1e-9))
    d = route(snapshot(sliced), session_id="s", user_id="u", sticky={(1, 3): "v1"})
    assert (d.in_experiment, d.trace) == (False, ("exp-1:not_in_layer",))


def test_sticky_in_an_older_scoped_experiment_does_not_take_calls_of_another_scope():
    """Issue 11 §4: exp-s (older, coder) and exp-t (researcher), user units, u1 exposed in both."""
    exp_s = experiment(1, unit_type="user", match={"subagent": "coder"})
    exp_t = experiment(2, unit_type="user", match={"subagent": "researcher"})
    snap = snapshot(exp_s, exp_t)
    sticky = {(1, 0): "v1", (2, 0): "v0"}
    researcher = route(
        snap, session_id="x", user_id="u1", attributes={"subagent": "researcher"}, sticky=sticky
    )
    assert (researcher.experiment_key, researcher.variant_key, researcher.reason) == ("exp-2", "v0", "sticky")
    coder = route(snap, session_id="y", user_id="u1", attributes={"subagent": "coder"}, sticky=sticky)
    assert (coder.experiment_key, coder.variant_key, coder.reason) == ("exp-1", "v1", "sticky")
    neither = route(snap, session_id="z", user_id="u1", attributes={"subagent": "planner"}, sticky=sticky)
    assert not neither.in_experiment


def test_sticky_entry_for_another_phase_or_a_removed_variant_is_ignored():
    exp = experiment(phase=2)
    snap = snapshot(exp)
    assert route(snap, session_id="s", user_id="u", sticky={(1, 1): "v1"}).reason == "assigned"
    d = route(snap, session_id="s", user_id="u", sticky={(1, 2): "gone"})
    assert d.reason == "assigned" and "exp-1:sticky_stale" in d.trace


def test_targeting_uses_growthbook_conditions():
    exp = experiment(condition={"plan": {"$in": ["pro", "team"]}, "app_version": {"$vgte": "2.0.0"}})
    snap = snapshot(exp)
    ok = route(snap, session_id="s", user_id="u", attributes={"plan": "pro", "app_version": "2.1.0"})
    no = route(snap, session_id="s", user_id="u", attributes={"plan": "pro", "app_version": "1.9.9"})
    assert ok.in_experiment and ok.reason == "assigned"
    assert not no.in_experiment and no.trace == ("exp-1:not_targeted",)


def test_route_returns_the_first_including_experiment_by_ascending_id():
    late = experiment(7, match={"subagent": "coder"})
    early = experiment(3, match={"subagent": "coder"})
    other = experiment(1, match={"subagent": "planner"})
    snap = snapshot(late, other, early)
    d = route(snap, session_id="s", user_id="u", attributes={"subagent": "coder"})
    assert d.experiment_key == "exp-3" and d.trace == ("exp-3:assigned",)
    assert [x.experiment_id for x in assign(snap, session_id="s", user_id="u")] == [1, 3, 7]


def test_route_skips_out_of_scope_and_excluded_experiments_and_explains_itself():
    gated = experiment(1, layer=LayerSpec("L", 0.0, 1.0), coverage=0.0)
    complex_scope = experiment(2, match={"subagent": {"$in": ["planner"]}})
    fallback = experiment(3)
    snap = snapshot(gated, complex_scope, fallback)
    d = route(snap, session_id="s", user_id="u", attributes={"subagent": "coder"})
    assert d.experiment_key == "exp-3"
    assert d.trace == ("exp-1:not_in_coverage", "exp-2:not_in_scope", "exp-3:assigned")


def test_route_without_an_including_experiment_says_no_experiment():
    snap = snapshot(experiment(match={"subagent": "coder"}))
    d = route(snap, session_id="s", user_id="u", attributes={"subagent": "writer"})
    assert (d.in_experiment, d.reason, d.experiment_key, d.trace) == (False, "no_experiment", None, ())
    assert route(snapshot(), session_id="s", user_id="u").reason == "no_experiment"


def test_scope_lookup_uses_the_same_coercion_as_growthbook_conditions():
    snap = snapshot(experiment(match={"tier": "2"}))
    assert route(snap, session_id="s", user_id="u", attributes={"tier": 2}).in_experiment
    assert not route(snap, session_id="s", user_id="u", attributes={"tier": "3"}).in_experiment


def test_missing_unit_id_is_not_assigned():
    snap = snapshot(experiment(unit_type="user"))
    d = assign(snap, session_id="s", user_id="")[0]
    assert (d.in_experiment, d.reason) == (False, "missing_unit_id")


def test_user_experiments_hash_the_user_id_and_session_experiments_the_session_id():
    u = experiment(1, unit_type="user", variants=variants(1, 1, 1, 1))
    s = experiment(2, unit_type="session", variants=variants(1, 1, 1, 1))
    snap = snapshot(u, s)
    for i in range(200):
        du, ds = assign(snap, session_id=f"sess-{i}", user_id=f"user-{i}")
        assert du.variant_index == bucket(u, f"user-{i}")
        assert ds.variant_index == bucket(s, f"sess-{i}")


def test_every_decision_carries_a_known_reason_and_variant_details():
    snap = snapshot(
        experiment(1, layer=LayerSpec("L", 0, 0.5)),
        experiment(2, layer=LayerSpec("L", 0.5, 1), coverage=0.5),
        experiment(3, condition={"x": 1}),
        experiment(4, match={"subagent": "z"}),
        holdout=HoldoutSpec(0.1),
    )
    for i in range(500):
        for d in assign(snap, session_id=f"s{i}", user_id=f"u{i}"):
            assert isinstance(d, Decision) and d.reason in REASONS
            assert d.trace and d.trace[-1] == f"{d.experiment_key}:{d.reason}"
            if d.in_experiment:
                assert d.variant_key == f"v{d.variant_index}" and d.endpoint_id == f"ep{d.variant_index}"
                assert d.overrides["temperature"] == d.variant_index / 10
            else:
                assert d.variant_key is None and d.endpoint_id is None


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "build",
    [
        lambda: VariantSpec("a", math.nan, "e"),
        lambda: VariantSpec("a", math.inf, "e"),
        lambda: VariantSpec("a", -0.1, "e"),
        lambda: VariantSpec("a", "1", "e"),
        lambda: VariantSpec("", 1, "e"),
        lambda: VariantSpec("a", 1, ""),
        lambda: LayerSpec("L", -0.1, 0.5),
        lambda: LayerSpec("L", 0.5, 0.5),
        lambda: LayerSpec("L", 0.2, 1.1),
        lambda: LayerSpec("L", math.nan, 0.5),
        lambda: LayerSpec("L", 0.0, 0.5, hash_version=3),
        lambda: experiment(coverage=1.5),
        lambda: experiment(coverage=-0.01),
        lambda: experiment(coverage=math.nan),
        lambda: experiment(unit_type="device"),
        lambda: experiment(variants=variants(1)),
        lambda: experiment(variants=variants(0, 0)),
        lambda: experiment(variants=(VariantSpec("a", 1, "e"), VariantSpec("a", 1, "f"))),
        lambda: experiment(variants=(VariantSpec("a", 1, "e", True), VariantSpec("b", 1, "f", True))),
        lambda: experiment(forced={"u": "nope"}),
        lambda: experiment(phase=-1),
        lambda: experiment(seed=""),
        lambda: experiment(condition=["not", "a", "mapping"]),
        lambda: HoldoutSpec(share=1.01),
        lambda: HoldoutSpec(share=math.nan),
        lambda: snapshot(experiment(1), experiment(1, key="other")),
        lambda: snapshot(experiment(1), experiment(2, key="exp-1")),
    ],
)
def test_invalid_specs_raise_value_error(build):
    with pytest.raises(ValueError):
        build()


def test_specs_are_immutable_and_weights_are_normalised():
    exp = experiment(variants=variants(50, 30, 20))
    assert exp.weights == pytest.approx((0.5, 0.3, 0.2))
    assert exp.ranges[-1][1] == pytest.approx(1.0)
    with pytest.raises(AttributeError):
        exp.coverage = 0.5  # type: ignore[misc]
    with pytest.raises(TypeError):
        exp.variants[0].overrides["temperature"] = 1  # type: ignore[index]


def test_assignment_modules_import_only_stdlib_numpy_and_each_other():
    import ast

    allowed_roots = {"numpy", "muse_experiments"} | set(sys.stdlib_module_names)
    pkg = REPO / "muse_experiments" / "experiments" / "assignment"
    for path in pkg.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] in allowed_roots, (path.name, name)
                if name.startswith("muse_experiments"):
                    assert name.startswith("muse_experiments.experiments.assignment"), (path.name, name)
