"""Selectors: the routing snapshot, stickiness across phases, previews and the audit history.

Routing's ``decide()`` (:func:`routing.pipeline.planning.decide`) is ``route(assignment_snapshot(), ...,
sticky=sticky_variants(...))``, and routing records with ``exposure_record``; these tests drive
``decide`` itself on an unsaved job, then record (database path: the sticky cache is off here, see
test_sticky.py for Redis).
"""

from __future__ import annotations

import pytest

from muse_experiments.experiments import selectors
from muse_experiments.experiments.models import Exposure, Layer
from muse_experiments.experiments.services.edits import experiment_update
from muse_experiments.experiments.services.exposures import exposure_record
from muse_experiments.experiments.services.forced import ForcedInput, forced_assignments_replace
from muse_experiments.experiments.services.layers import platform_config_update
from muse_experiments.experiments.services.lifecycle import experiment_pause, experiment_rerandomise
from muse_experiments.infra.config_version import invalidate_all
from routing.models import CompletionJob
from routing.pipeline import planning
from tests.factories import make_experiment, variant_inputs
from tests.muse_experiments.conftest import V14, V15

pytestmark = pytest.mark.django_db


def decide(session_id: str, user_id: str = "", attributes=None):
    """routing.pipeline.planning.decide for this unit, then records the exposure as routing does."""
    job = CompletionJob(session_id=session_id, user_id=user_id, attributes=attributes or {}, request={})
    decision = planning.decide(job)
    if decision.in_experiment:
        exposure_record(
            experiment_id=decision.experiment_id,
            phase=decision.phase,
            unit_id=session_id,
            variant_key=decision.variant_key,
            reason=decision.reason,
        )
    return decision


def test_the_snapshot_holds_running_experiments_with_phase_seed_layer_and_pins(catalogue):
    layer = Layer.objects.create(key="checkout-layer")
    running = make_experiment(key="run", layer=layer, layer_start=0.2, layer_end=0.6, coverage=0.5)
    make_experiment(key="draft", start=False)
    forced_assignments_replace(experiment=running, pins=[ForcedInput("qa-1", "treatment")], actor="qa")
    experiment_rerandomise(experiment=running, actor="pm")
    invalidate_all()
    (spec,) = selectors.assignment_snapshot().experiments
    assert (spec.key, spec.phase, spec.coverage, spec.unit_type) == ("run", 2, 0.5, "session")
    assert spec.seed == running.phases.get(number=2).seed != "run"
    assert (spec.layer.key, spec.layer.start, spec.layer.end) == ("checkout-layer", 0.2, 0.6)
    assert dict(spec.forced) == {"qa-1": "treatment"}
    assert [(v.key, v.endpoint_id, v.is_control) for v in spec.variants] == [
        ("control", V14, True),
        ("treatment", V15, False),
    ]


def test_an_exposed_unit_keeps_its_variant_after_a_weight_change(catalogue):
    experiment = make_experiment(key="sticky")
    invalidate_all()
    first = {f"s-{i}": decide(f"s-{i}").variant_key for i in range(60)}
    assert set(first.values()) == {"control", "treatment"}
    experiment_update(
        experiment=experiment,
        actor="pm",
        variants=variant_inputs([("control", V14, 0.0), ("treatment", V15, 1.0)]),
    )
    invalidate_all()
    again = {u: decide(u) for u in first}
    assert {u: d.variant_key for u, d in again.items()} == first
    assert {d.reason for d in again.values()} == {"sticky"} and {d.phase for d in again.values()} == {2}
    # the new phase has its own exposure rows (analysis reads one phase); newcomers get the new weights
    assert Exposure.objects.filter(experiment=experiment, phase=2).count() == 60
    assert {decide(f"new-{i}").variant_key for i in range(20)} == {"treatment"}


def test_in_the_first_phase_of_a_seed_run_a_returning_unit_is_decided_without_a_sticky_lookup(
    catalogue, django_assert_num_queries
):
    experiment = make_experiment(key="one-phase")
    invalidate_all()
    first = {f"s-{i}": decide(f"s-{i}").variant_key for i in range(60)}
    assert set(first.values()) == {"control", "treatment"}
    assert Exposure.objects.filter(experiment=experiment, phase=1).count() == 60
    assert selectors.assignment_state().sticky_experiment_ids == frozenset()
    # the hash gives every exposed unit its exposed variant again: no exposure query per call
    with django_assert_num_queries(0):
        again = {u: planning.decide(CompletionJob(session_id=u, user_id="", request={})) for u in first}
    assert {u: d.variant_key for u, d in again.items()} == first
    assert {d.reason for d in again.values()} == {"assigned"}
    # after a weight change the earlier phase's exposures matter, and are looked up
    experiment_update(
        experiment=experiment,
        actor="pm",
        variants=variant_inputs([("control", V14, 0.0), ("treatment", V15, 1.0)]),
    )
    invalidate_all()
    assert selectors.assignment_state().sticky_experiment_ids == frozenset({experiment.id})
    assert {u: decide(u).variant_key for u in first} == first


def test_a_user_id_equal_to_another_units_session_id_does_not_inherit_its_sticky_variant(catalogue):
    experiment = make_experiment(key="session-unit")
    invalidate_all()
    exposed = next(f"s-{i}" for i in range(100) if decide(f"s-{i}").variant_key == "control")
    experiment_update(
        experiment=experiment,
        actor="pm",
        variants=variant_inputs([("control", V14, 0.0), ("treatment", V15, 1.0)]),
    )
    invalidate_all()
    # a new session whose *user* id happens to equal the exposed session id: it is a new unit
    decision = decide("fresh-session", user_id=exposed)
    assert (decision.variant_key, decision.reason) == ("treatment", "assigned")
    assert decide(exposed).reason == "sticky"


def test_rerandomising_moves_units_into_a_fresh_phase_without_stickiness(catalogue):
    experiment = make_experiment(key="rr")
    invalidate_all()
    first = {f"s-{i}": decide(f"s-{i}").variant_key for i in range(100)}
    experiment_rerandomise(experiment=experiment, actor="pm")
    invalidate_all()
    after = {u: decide(u) for u in first}
    assert {d.reason for d in after.values()} == {"assigned"} and {d.phase for d in after.values()} == {2}
    moved = sum(after[u].variant_key != v for u, v in first.items())
    assert 25 <= moved <= 75  # a fresh 50/50 draw moves about half (binomial(100, .5), ±5 sd)
    assert Exposure.objects.filter(experiment=experiment, phase=2).count() == 100


def test_a_qa_pin_is_not_sticky_once_removed(catalogue):
    experiment = make_experiment(key="pin")
    invalidate_all()
    natural = decide("qa-unit").variant_key
    Exposure.objects.all().delete()
    other = "control" if natural == "treatment" else "treatment"
    forced_assignments_replace(experiment=experiment, pins=[ForcedInput("qa-unit", other)], actor="qa")
    invalidate_all()
    assert (decide("qa-unit").variant_key, decide("qa-unit").reason) == (other, "forced")
    forced_assignments_replace(experiment=experiment, pins=[], actor="qa")
    invalidate_all()
    assert decide("qa-unit").variant_key == natural
    assert Exposure.objects.get().reason == "forced"  # the unit stays out of analysis for this phase


def test_sticky_lookups_without_redis_make_one_query(catalogue, django_assert_num_queries):
    experiment = make_experiment()
    invalidate_all()
    decide("s-1")
    selectors.assignment_snapshot()
    with django_assert_num_queries(1):
        stored = selectors.sticky_variants(experiment_ids=[experiment.id], session_id="s-1", user_id="u-1")
    assert list(stored) == [(experiment.id, 1)]


def test_the_preview_explains_holdout_forcing_targeting_layer_and_coverage(catalogue):
    layer = Layer.objects.create(key="preview-layer")
    experiment = make_experiment(
        key="pv", condition={"tier": "pro"}, layer=layer, layer_start=0.0, layer_end=0.5, coverage=0.5
    )
    forced_assignments_replace(experiment=experiment, pins=[ForcedInput("qa", "treatment")], actor="qa")
    invalidate_all()

    def reason(session_id, **attrs):
        preview = selectors.assignment_preview(
            session_id=session_id, user_id="u-" + session_id, attributes=attrs, experiment=experiment
        )
        assert preview.experiment.trace == (f"pv:{preview.experiment.reason}",)
        return preview.experiment.reason

    assert reason("qa") == "forced"
    assert reason("s-1", tier="free") in ("not_targeted", "not_in_layer")
    reasons = {reason(f"s-{i}", tier="pro") for i in range(60)}
    assert reasons == {"assigned", "not_in_layer", "not_in_coverage"}
    platform_config_update(actor="pm", holdout_share=0.5)
    invalidate_all()
    reasons = {reason(f"s-{i}", tier="pro") for i in range(60)}
    assert "holdout" in reasons
    assert not Exposure.objects.exists()  # previews record nothing


def test_the_preview_of_a_draft_with_one_variant_explains_why_it_cannot_run(catalogue):
    experiment = make_experiment(start=False)
    experiment.variants.filter(key="treatment").delete()
    preview = selectors.assignment_preview(session_id="s", user_id="u", experiment=experiment)
    assert preview.experiment is None and "at least two variants" in preview.experiment_error
    assert preview.routing.reason == "no_experiment"


def test_the_audit_history_lists_the_experiments_changes_newest_first(catalogue):
    experiment = make_experiment()
    experiment_pause(experiment=experiment, actor="pm")
    history = selectors.experiment_audit_history(experiment)
    assert [(e.action, e.actor) for e in history] == [("pause", "pm"), ("start", "test"), ("create", "test")]
