"""Experiment services: lifecycle, phases, audit diffs, validation (nothing half-written)."""

from __future__ import annotations

import math

import pytest
from django.core.exceptions import ValidationError

from muse_experiments.experiments.models import (
    AuditEntry,
    Experiment,
    ExperimentPhase,
    ForcedAssignment,
    Layer,
    PlatformConfig,
    Variant,
)
from muse_experiments.experiments.services.edits import experiment_create, experiment_update
from muse_experiments.experiments.services.forced import ForcedInput, forced_assignments_replace
from muse_experiments.experiments.services.layers import platform_config_update
from muse_experiments.experiments.services.lifecycle import (
    experiment_archive,
    experiment_pause,
    experiment_rerandomise,
    experiment_start,
    experiment_stop,
)
from muse_experiments.experiments.services.variants import VariantInput
from routing.models import ModelEndpoint
from tests.factories import make_experiment, variant_inputs
from tests.muse_experiments.conftest import V2, V14, V15

pytestmark = pytest.mark.django_db

ARMS = [("control", V14, 0.5), ("treatment", V15, 0.5)]


def version() -> int:
    return PlatformConfig.objects.get(pk=1).version


def audit(experiment, action):
    return AuditEntry.objects.filter(object_type="Experiment", object_id=str(experiment.pk), action=action)


# --------------------------------------------------------------------------- lifecycle

TRANSITIONS = {
    "draft": {"running", "archived"},
    "running": {"paused", "stopped"},
    "paused": {"running", "stopped"},
    "stopped": {"archived"},
    "archived": set(),
}
SERVICE_FOR = {
    "running": experiment_start,
    "paused": experiment_pause,
    "stopped": experiment_stop,
    "archived": experiment_archive,
}


def _in_status(status: str) -> Experiment:
    experiment = make_experiment(start=False)
    path = {
        "draft": [],
        "running": ["running"],
        "paused": ["running", "paused"],
        "stopped": ["running", "stopped"],
        "archived": ["archived"],
    }[status]
    for step in path:
        experiment = SERVICE_FOR[step](experiment=experiment, actor="pm")
    return experiment


@pytest.mark.parametrize("source", list(TRANSITIONS))
@pytest.mark.parametrize("target", list(SERVICE_FOR))
def test_every_status_transition_is_allowed_or_refused_as_the_state_machine_says(catalogue, source, target):
    experiment = _in_status(source)
    before_version = version()
    if target in TRANSITIONS[source]:
        result = SERVICE_FOR[target](experiment=experiment, actor="pm")
        assert result.status == target
        assert Experiment.objects.get(pk=experiment.pk).status == target
        assert version() == before_version + 1
        entry = AuditEntry.objects.filter(object_id=str(experiment.pk)).first()
        assert entry.actor == "pm" and entry.changes["status"] == [source, target]
    else:
        with pytest.raises(ValidationError) as exc:
            SERVICE_FOR[target](experiment=experiment, actor="pm")
        assert exc.value.message_dict["status"] == [f"Cannot go from {source} to {target}."]
        assert Experiment.objects.get(pk=experiment.pk).status == source
        assert version() == before_version


def test_the_first_start_opens_phase_one_with_the_key_as_seed_and_resume_keeps_the_phase(catalogue):
    experiment = make_experiment(key="checkout", start=False)
    assert experiment.phase == 0 and not ExperimentPhase.objects.exists()
    experiment = experiment_start(experiment=experiment, actor="pm")
    phase = ExperimentPhase.objects.get(experiment=experiment)
    assert (phase.number, phase.seed, phase.coverage, phase.weights, phase.reason, phase.ended_at) == (
        1,
        "checkout",
        1.0,
        {"control": 0.5, "treatment": 0.5},
        "start",
        None,
    )
    experiment_pause(experiment=experiment, actor="pm")
    experiment = experiment_start(experiment=experiment, actor="pm")
    assert experiment.phase == 1 and ExperimentPhase.objects.filter(experiment=experiment).count() == 1
    assert audit(experiment, "resume").get().changes == {"status": ["paused", "running"]}


def test_stopping_closes_the_open_phase(catalogue):
    experiment = make_experiment()
    experiment = experiment_stop(experiment=experiment, actor="pm")
    phase = ExperimentPhase.objects.get(experiment=experiment)
    assert phase.ended_at == experiment.stopped_at is not None


def test_starting_with_a_disabled_model_is_refused(catalogue):
    experiment = make_experiment(start=False)
    ModelEndpoint.objects.filter(public_id=V15).update(enabled=False)
    with pytest.raises(ValidationError) as exc:
        experiment_start(experiment=experiment, actor="pm")
    assert V15 in exc.value.message_dict["endpoint"][0]
    assert Experiment.objects.get(pk=experiment.pk).status == "draft"


def test_starting_with_a_disabled_provider_is_refused(catalogue):
    experiment = make_experiment(start=False)
    catalogue[V15].provider.__class__.objects.filter(pk=catalogue[V15].provider_id).update(enabled=False)
    with pytest.raises(ValidationError, match="Disabled model"):
        experiment_start(experiment=experiment, actor="pm")


# --------------------------------------------------------------------------- phases


def test_changing_weights_while_running_opens_a_new_phase_with_the_same_seed(catalogue):
    experiment = make_experiment(key="w")
    experiment = experiment_update(
        experiment=experiment,
        actor="pm",
        variants=variant_inputs([("control", V14, 0.2), ("treatment", V15, 0.8)]),
    )
    assert experiment.phase == 2
    p1, p2 = ExperimentPhase.objects.filter(experiment=experiment).order_by("number")
    assert p1.ended_at is not None and p1.ended_at == p2.started_at
    assert (p2.seed, p2.weights, p2.reason, p2.ended_at) == (
        "w",
        {"control": 0.2, "treatment": 0.8},
        "change",
        None,
    )
    entry = audit(experiment, "update").get()
    assert entry.changes == {
        "variants": {"changed": {"control": {"weight": [0.5, 0.2]}, "treatment": {"weight": [0.5, 0.8]}}},
        "phase": [1, 2],
    }


@pytest.mark.parametrize(
    "change",
    [
        {"coverage": 0.5},
        {"variants": [("control", V14, 0.5), ("treatment", V2, 0.5)]},
        {"variants": [("control", V14, 0.4), ("treatment", V15, 0.3), ("third", V2, 0.3)]},
    ],
    ids=["coverage", "model", "new variant"],
)
@pytest.mark.parametrize("status", ["running", "paused"])
def test_config_changes_while_live_start_a_new_phase(catalogue, change, status):
    experiment = _in_status(status)
    if "variants" in change:
        change = {"variants": variant_inputs(change["variants"])}
    experiment = experiment_update(experiment=experiment, actor="pm", **change)
    assert experiment.phase == 2
    assert list(ExperimentPhase.objects.filter(experiment=experiment).values_list("number", "reason")) == [
        (1, "start"),
        (2, "change"),
    ]


def test_descriptive_changes_while_running_keep_the_phase_and_record_a_diff(catalogue):
    experiment = make_experiment()
    experiment = experiment_update(
        experiment=experiment,
        actor="pm",
        name="Checkout v2",
        hypothesis="faster",
        guardrail_metrics=["latency_ms"],
        condition={"tier": {"$in": ["pro"]}},
    )
    assert experiment.phase == 1
    assert audit(experiment, "update").get().changes == {
        "name": ["exp", "Checkout v2"],
        "hypothesis": ["", "faster"],
        "condition": [{}, {"tier": {"$in": ["pro"]}}],
        "guardrail_metrics": [[], ["latency_ms"]],
    }


def test_changes_to_a_draft_never_open_a_phase(catalogue):
    experiment = make_experiment(start=False)
    experiment = experiment_update(experiment=experiment, actor="pm", coverage=0.3, seed="s2", key="exp2")
    assert (experiment.phase, experiment.coverage, experiment.seed, experiment.key) == (0, 0.3, "s2", "exp2")
    assert not ExperimentPhase.objects.exists()


def test_a_no_op_update_writes_nothing(catalogue):
    experiment = make_experiment()
    before = version()
    experiment_update(experiment=experiment, actor="pm", coverage=1.0, variants=variant_inputs(ARMS))
    assert version() == before and not audit(experiment, "update").exists()


def test_renaming_a_variant_keeps_its_row_and_swapping_keys_works(catalogue):
    experiment = make_experiment(start=False)
    ids = {v.key: v.pk for v in experiment.variants.all()}
    inputs = variant_inputs([("treatment", V14, 0.5), ("control", V15, 0.5)])
    inputs = [
        VariantInput(key=i.key, weight=i.weight, endpoint=i.endpoint, is_control=i.is_control, id=ids[other])
        for i, other in zip(inputs, ["control", "treatment"], strict=True)
    ]
    experiment_update(experiment=experiment, actor="pm", variants=inputs)
    assert dict(Variant.objects.filter(experiment=experiment).values_list("pk", "key")) == {
        ids["control"]: "treatment",
        ids["treatment"]: "control",
    }


def test_rerandomising_opens_a_phase_with_a_new_seed(catalogue):
    experiment = make_experiment(key="rr")
    experiment = experiment_rerandomise(experiment=experiment, actor="pm")
    p2 = ExperimentPhase.objects.get(experiment=experiment, number=2)
    assert p2.reason == "rerandomise" and p2.seed.startswith("rr-") and p2.seed != "rr"
    assert experiment.seed == p2.seed
    assert audit(experiment, "rerandomise").get().changes == {"seed": ["rr", p2.seed], "phase": [1, 2]}
    # a later weight change keeps the re-randomised seed
    experiment = experiment_update(experiment=experiment, actor="pm", coverage=0.9)
    assert ExperimentPhase.objects.get(experiment=experiment, number=3).seed == p2.seed


@pytest.mark.parametrize("status", ["draft", "stopped", "archived"])
def test_rerandomising_is_refused_unless_running_or_paused(catalogue, status):
    experiment = _in_status(status)
    with pytest.raises(ValidationError, match="re-randomised"):
        experiment_rerandomise(experiment=experiment, actor="pm")


# --------------------------------------------------------------------------- validation


def test_key_unit_type_and_seed_are_fixed_after_the_start(catalogue):
    experiment = make_experiment()
    with pytest.raises(ValidationError) as exc:
        experiment_update(experiment=experiment, actor="pm", key="other", unit_type="user", seed="x")
    assert set(exc.value.message_dict) == {"key", "unit_type", "seed"}
    assert "re-randomise" in exc.value.message_dict["seed"][0]


def test_a_stopped_experiment_only_accepts_descriptive_changes(catalogue):
    experiment = _in_status("stopped")
    experiment_update(experiment=experiment, actor="pm", hypothesis="it worked")
    with pytest.raises(ValidationError) as exc:
        experiment_update(
            experiment=experiment,
            actor="pm",
            coverage=0.5,
            variants=variant_inputs([("control", V14, 0.1), ("treatment", V15, 0.9)]),
        )
    assert set(exc.value.message_dict) == {"coverage", "variants"}


@pytest.mark.parametrize(
    "arms, field, message",
    [
        (
            [("control", V14, 0.5), ("treatment", V15, 0.4)],
            "weight",
            "Weights must sum to 100% (they sum to 90%).",
        ),
        ([("control", V14, math.nan), ("treatment", V15, 0.5)], "weight", "weight must be a finite number"),
        ([("control", V14, math.inf), ("treatment", V15, 0.5)], "weight", "weight must be a finite number"),
        ([("control", V14, 1.0)], "variants", "at least two variants"),
    ],
)
def test_invalid_variant_sets_are_refused_with_field_errors(catalogue, arms, field, message):
    with pytest.raises(ValidationError) as exc:
        experiment_create(key="bad", name="bad", actor="pm", variants=variant_inputs(arms))
    assert message in " ".join(exc.value.message_dict[field])
    assert not Experiment.objects.exists() and not AuditEntry.objects.exists()


@pytest.mark.parametrize("controls", [0, 2])
def test_exactly_one_control_is_required(catalogue, controls):
    inputs = [
        VariantInput(key=k, weight=0.5, endpoint=catalogue[pid], is_control=i < controls)
        for i, (k, pid, _) in enumerate(ARMS)
    ]
    with pytest.raises(ValidationError) as exc:
        experiment_create(key="c", name="c", actor="pm", variants=inputs)
    assert exc.value.message_dict["is_control"] == [
        f"Exactly one variant must be the control (found {controls})."
    ]


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"reasoning_effort": "max"}, "reasoning_effort must be one of minimal, low, medium, high."),
        ({"temperature": math.nan}, "temperature must be a finite number between 0 and 2."),
        ({"temperature": 2.5}, "temperature must be a finite number between 0 and 2."),
        ({"max_output_tokens": 0}, "max_output_tokens must be a whole number from 1 to 200000."),
        ({"max_output_tokens": 200001}, "max_output_tokens must be a whole number from 1 to 200000."),
        ({"max_output_tokens": 12.5}, "max_output_tokens must be a whole number from 1 to 200000."),
        ({"allowed_tools": "search"}, "allowed_tools must be a list of tool names"),
        ({"system_prompt_version": ""}, "system_prompt_version must be a non-empty string"),
        ({"top_p": 0.9}, "Unknown override 'top_p'"),
    ],
)
def test_invalid_routing_overrides_are_refused(catalogue, overrides, message):
    with pytest.raises(ValidationError) as exc:
        experiment_create(key="o", name="o", actor="pm", variants=variant_inputs(ARMS, treatment=overrides))
    assert message in exc.value.message_dict["overrides"][0]


def test_valid_overrides_are_stored_for_the_router(catalogue):
    overrides = {
        "reasoning_effort": "low",
        "temperature": 0.2,
        "max_output_tokens": 2048,
        "allowed_tools": ["search", "read_file"],
        "system_prompt_version": "v7",
    }
    experiment = experiment_create(
        key="o", name="o", actor="pm", variants=variant_inputs(ARMS, treatment=overrides)
    )
    assert experiment.variants.get(key="treatment").overrides == overrides


@pytest.mark.parametrize(
    "condition, message",
    [
        ([{"tier": "pro"}], "must be a JSON object"),
        ({"tier": {"$gteq": 3}}, "Unknown operator $gteq at tier"),
        ({"$xor": []}, "Unknown operator $xor"),
        ({"tier": {"$in": "pro"}}, "$in needs a list at tier.$in"),
        ({"name": {"$regex": "("}}, "Invalid regular expression for $regex"),
        ({"v": {"$vgt": 2}}, "$vgt needs a version string"),
        ({"tier": {"$inGroup": "beta"}}, "Saved groups ($inGroup) are not supported"),
        ({"$or": {"tier": "pro"}}, "$or needs a list of conditions"),
        ({"tier": {"$eq": "pro", "plan": "x"}}, "cannot mix operators and plain keys"),
        ({"n": {"$gt": math.inf}}, "$gt needs a string or a finite number"),
    ],
)
def test_invalid_targeting_conditions_are_refused(catalogue, condition, message):
    with pytest.raises(ValidationError) as exc:
        experiment_create(key="t", name="t", actor="pm", variants=variant_inputs(ARMS), condition=condition)
    assert message in " ".join(exc.value.message_dict["condition"])


def test_a_rich_growthbook_condition_is_accepted(catalogue):
    condition = {
        "$and": [
            {"subagent": {"$in": ["coder", "reviewer"]}},
            {"$or": [{"tier": "pro"}, {"seats": {"$gte": 10}}]},
            {"client_version": {"$vgte": "2.3.0"}},
            {"locale": {"$regex": "^en"}},
            {"$not": {"country": {"$exists": False}}},
            {"tags": {"$elemMatch": {"$eq": "beta"}}},
            {"flags": {"$size": {"$gt": 0}}},
        ]
    }
    experiment = experiment_create(
        key="t", name="t", actor="pm", variants=variant_inputs(ARMS), condition=condition
    )
    assert experiment.condition == condition


@pytest.mark.parametrize("coverage", [math.nan, math.inf, -0.1, 1.5])
def test_coverage_must_be_finite_in_zero_to_one(catalogue, coverage):
    with pytest.raises(ValidationError) as exc:
        experiment_create(key="c", name="c", actor="pm", variants=variant_inputs(ARMS), coverage=coverage)
    assert "coverage" in exc.value.message_dict


def test_overlapping_layer_ranges_are_refused_and_archived_experiments_free_their_range(catalogue):
    layer = Layer.objects.create(key="checkout-layer")
    a = make_experiment(key="a", layer=layer, layer_start=0.0, layer_end=0.5, start=False)
    make_experiment(key="b", layer=layer, layer_start=0.5, layer_end=1.0, start=False)  # touching is fine
    with pytest.raises(ValidationError) as exc:
        make_experiment(key="c", layer=layer, layer_start=0.4, layer_end=0.6, start=False)
    assert exc.value.message_dict["layer_start"] == [
        "Layer range [40 %, 60 %) overlaps experiment a [0 %, 50 %).",
        "Layer range [40 %, 60 %) overlaps experiment b [50 %, 100 %).",
    ]
    experiment_archive(experiment=a, actor="pm")
    c = make_experiment(key="c", layer=layer, layer_start=0.1, layer_end=0.4, start=False)
    assert c.layer_id == layer.pk


def test_an_empty_or_inverted_layer_range_is_refused(catalogue):
    layer = Layer.objects.create(key="l1")
    with pytest.raises(ValidationError) as exc:
        make_experiment(key="x", layer=layer, layer_start=0.5, layer_end=0.5, start=False)
    assert "0 % ≤ start < end ≤ 100 %" in exc.value.message_dict["layer_end"][0]


def test_a_running_experiment_cannot_switch_to_a_disabled_model(catalogue):
    experiment = make_experiment()
    ModelEndpoint.objects.filter(public_id=V2).update(enabled=False)
    with pytest.raises(ValidationError) as exc:
        experiment_update(
            experiment=experiment,
            actor="pm",
            variants=variant_inputs([("control", V14, 0.5), ("treatment", V2, 0.5)]),
        )
    assert V2 in exc.value.message_dict["endpoint"][0]
    assert experiment.variants.get(key="treatment").endpoint.public_id == V15


# --------------------------------------------------------------------------- forced pins, platform


def test_forced_assignments_are_replaced_audited_and_validated(catalogue):
    experiment = make_experiment()
    forced_assignments_replace(
        experiment=experiment,
        pins=[ForcedInput("qa-1", "treatment", "QA"), ForcedInput("qa-2", "control")],
        actor="qa",
    )
    forced_assignments_replace(experiment=experiment, pins=[ForcedInput("qa-1", "control")], actor="qa")
    assert list(ForcedAssignment.objects.values_list("unit_id", "variant__key")) == [("qa-1", "control")]
    assert audit(experiment, "forced_assignments").first().changes == {
        "forced": {"qa-1": ["treatment", "control"], "qa-2": ["control", None]}
    }
    with pytest.raises(ValidationError) as exc:
        forced_assignments_replace(
            experiment=experiment,
            pins=[ForcedInput("qa-1", "nope"), ForcedInput("qa-1", "control")],
            actor="qa",
        )
    assert set(exc.value.message_dict) == {"unit_id", "variant"}


def test_the_holdout_share_is_validated_audited_and_bumps_the_version(catalogue):
    before = version()
    platform_config_update(actor="pm", holdout_share=0.05)
    assert PlatformConfig.objects.get(pk=1).holdout_share == 0.05 and version() > before
    entry = AuditEntry.objects.get(object_type="PlatformConfig")
    assert (entry.actor, entry.changes) == ("pm", {"holdout_share": [0.0, 0.05]})
    for bad in (math.nan, 0.6, -0.1):
        with pytest.raises(ValidationError):
            platform_config_update(actor="pm", holdout_share=bad)
    assert PlatformConfig.objects.get(pk=1).holdout_share == 0.05


def test_an_experiment_key_that_would_shadow_an_api_path_is_refused(catalogue):
    with pytest.raises(ValidationError) as caught:
        make_experiment(key="preview-assignment", start=False)
    assert caught.value.message_dict["key"] == ["This key is reserved by the API; choose another."]
