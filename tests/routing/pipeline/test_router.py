"""The router assigns, calls the simulated upstreams over real HTTP, falls back, and records."""

from __future__ import annotations

import json

import pytest

from muse_experiments.experiments.models import Exposure, PlatformConfig
from routing.catalogue import avocado_id
from routing.jobs import completion_job_create
from routing.models import CallRecord, CompletionJob, ModelEndpoint
from routing.pipeline.router import execute_job
from tests.factories import make_experiment, seed_catalogue

pytestmark = pytest.mark.django_db


@pytest.fixture
def catalogue(upstreams):
    return seed_catalogue(upstreams.url)


@pytest.fixture(autouse=True)
def fast_backoff(settings):
    """Backoff waits of at most a few ms (the policy itself is tested in test_retry.py)."""
    settings.ROUTING_BACKOFF_BASE_MS = 1.0
    settings.ROUTING_BACKOFF_CAP_MS = 5.0


def job(session_id="s-1", user_id="u-1", **request):
    created, _ = completion_job_create(
        api_key=None,
        session_id=session_id,
        user_id=user_id,
        subagent="coder",
        attributes={},
        request={"messages": [{"role": "user", "content": "hello"}], "tools": [], **request},
    )
    return created


def run(j: CompletionJob) -> CompletionJob:
    execute_job(job_id=str(j.id))
    j.refresh_from_db()
    return j


def test_a_unit_outside_every_experiment_is_served_by_the_platform_default(catalogue, upstreams):
    j = run(job())
    assert j.status == "succeeded"
    assert j.result["served_model"] == avocado_id(15)
    assert j.result["reason"] == "default"
    assert j.result["experiment"] is None
    assert upstreams.call_count(model="avocado-v15") == 1
    assert Exposure.objects.count() == 0


@pytest.mark.parametrize(
    ("endpoint", "upstream_model", "path_part"),
    [
        (avocado_id(3), "avocado-v3", "/v1/chat/completions"),
        ("azure/muse-special", "muse-special", "/openai/responses"),
        ("anthropic/claude-sonnet-5-5", "claude-sonnet-5-5", "/v1/messages"),
    ],
)
def test_each_provider_kind_serves_its_variant_and_the_call_is_recorded(
    catalogue, upstreams, endpoint, upstream_model, path_part
):
    experiment = make_experiment(arms=[("control", avocado_id(14), 0.0), ("treatment", endpoint, 1.0)])
    j = run(job())
    assert j.status == "succeeded", j.error
    assert j.result["served_model"] == endpoint
    assert (j.result["experiment"], j.result["variant"], j.result["reason"]) == (
        experiment.key,
        "treatment",
        "assigned",
    )
    assert j.result["text"]
    calls = upstreams.calls(model=upstream_model)
    assert len(calls) == 1 and path_part in calls[0]["path"]
    record = CallRecord.objects.get(job=j)
    assert (record.experiment_id, record.phase, record.variant_key, record.unit_id) == (
        experiment.id,
        1,
        "treatment",
        "s-1",
    )
    assert record.served_endpoint == endpoint and record.status == "succeeded"
    assert record.input_tokens > 0 and record.output_tokens > 0 and record.latency_ms > 0
    exposure = Exposure.objects.get()
    assert (exposure.unit_id, exposure.variant_key) == ("s-1", "treatment")


def test_a_failing_variant_falls_back_to_control_with_one_call_each(catalogue, upstreams, settings):
    settings.ROUTING_MAX_RETRIES = 0
    make_experiment(arms=[("control", avocado_id(14), 0.0), ("treatment", "azure/muse-special", 1.0)])
    upstreams.set_scenario("muse-special", failure="server_error")
    j = run(job())
    assert j.status == "succeeded"
    assert (j.result["served_model"], j.result["reason"], j.result["variant"]) == (
        avocado_id(14),
        "error_fallback",
        "treatment",
    )
    assert upstreams.call_count(model="muse-special") == 1
    assert upstreams.call_count(model="avocado-v14") == 1
    record = CallRecord.objects.get(job=j)
    assert [(a.endpoint, a.outcome) for a in record.attempts.all()] == [
        ("azure/muse-special", "UpstreamUnavailable"),
        (avocado_id(14), "ok"),
    ]


def test_a_disabled_variant_model_is_skipped_and_the_reason_is_killed(catalogue, upstreams):
    make_experiment(
        arms=[("control", avocado_id(14), 0.0), ("treatment", "anthropic/claude-sonnet-5-5", 1.0)]
    )
    ModelEndpoint.objects.filter(public_id="anthropic/claude-sonnet-5-5").update(enabled=False)
    from muse_experiments.infra.config_version import invalidate_all

    invalidate_all()
    j = run(job())
    assert (j.result["served_model"], j.result["reason"]) == (avocado_id(14), "endpoint_killed")
    assert upstreams.call_count(model="claude-sonnet-5-5") == 0


def test_a_client_error_fails_the_job_without_trying_other_models(catalogue, upstreams):
    make_experiment(arms=[("control", avocado_id(14), 0.0), ("treatment", avocado_id(2), 1.0)])
    upstreams.set_scenario("avocado-v2", failure="bad_request")
    j = run(job())
    assert j.status == "failed"
    assert j.error.startswith("ClientRequestError")
    assert upstreams.call_count(model="avocado-v14") == 0


def test_held_out_units_get_the_default_model(catalogue, upstreams):
    make_experiment(arms=[("control", avocado_id(14), 0.5), ("treatment", avocado_id(2), 0.5)])
    PlatformConfig.objects.filter(pk=1).update(holdout_share=0.5)
    from muse_experiments.infra.config_version import invalidate_all

    invalidate_all()
    reasons = {run(job(session_id=f"s-{i}", user_id=f"u-{i}")).result["reason"] for i in range(40)}
    assert reasons == {"holdout", "assigned"}


def test_running_a_job_twice_calls_the_upstream_once(catalogue, upstreams):
    j = job()
    assert execute_job(job_id=str(j.id)) == "succeeded"
    assert execute_job(job_id=str(j.id)) == "succeeded"
    assert upstreams.call_count() == 1


def test_encrypted_reasoning_never_reaches_the_stored_result(catalogue, upstreams):
    make_experiment(arms=[("control", avocado_id(14), 0.0), ("treatment", "azure/muse-special", 1.0)])
    upstreams.set_scenario("muse-special", reasoning=True, encrypted_reasoning="always")
    j = run(job())
    assert j.status == "succeeded"
    stored = json.dumps(j.result)
    assert "gAAAAA" not in stored and "encrypted_content" not in stored


def test_an_anonymous_job_looks_up_no_sticky_assignment_and_keeps_no_reasoning(
    catalogue, upstreams, django_assert_num_queries
):
    """A unit id made for one call (the drop-ins' ``request["anonymous"]``) has no exposures to
    look up, and nothing can continue its session, so its encrypted reasoning is not kept."""
    from routing.pipeline.planning import decide
    from routing.reasoning_store import KEYLESS_OWNER, OwnedSession, session_end

    make_experiment(arms=[("control", avocado_id(14), 0.0), ("treatment", "azure/muse-special", 1.0)])
    upstreams.set_scenario("muse-special", reasoning=True, encrypted_reasoning="always")
    named = run(job(session_id="s-named", user_id="s-named"))
    anonymous = run(job(session_id="anon-1", user_id="anon-1", anonymous=True))

    assert [j.result["served_model"] for j in (named, anonymous)] == ["azure/muse-special"] * 2
    assert session_end(session=OwnedSession(owner=KEYLESS_OWNER, session_id="anon-1")) == 0
    assert session_end(session=OwnedSession(owner=KEYLESS_OWNER, session_id="s-named")) == 1
    with django_assert_num_queries(0):
        assert decide(anonymous).variant_key == "treatment"


def test_a_model_that_cannot_honour_the_output_contract_is_never_asked_and_the_job_says_why(
    catalogue, upstreams
):
    """Claude has no JSON mode: a job pinned to it (the catalogue changed after the drop-in's
    check) fails ``unsupported_contract`` unsent; the stored contracts reach the request."""
    from routing.dropin.errors import DropinError
    from routing.dropin.submission import finished_job
    from routing.pipeline.planning import build_request
    from routing.providers.contracts import OutputFormat, ToolChoice

    contracts = {
        "output_format": {"type": "json_object"},
        "tool_choice": {"mode": "required", "name": "f"},
        "parallel_tool_calls": False,
    }
    j = run(job(model="anthropic/claude-sonnet-5-5", **contracts))
    assert (j.status, j.error) == (
        "failed",
        "unsupported_contract: The model anthropic/claude-sonnet-5-5 cannot honour the request's output_format.",
    )
    assert upstreams.call_count() == 0
    record = CallRecord.objects.get(job=j)
    assert record.reason == "unsupported_contract"
    assert [(a.endpoint, a.outcome) for a in record.attempts.all()] == [
        ("anthropic/claude-sonnet-5-5", "unsupported_contract")
    ]
    with pytest.raises(DropinError) as refused:
        finished_job(j)
    assert (refused.value.status, refused.value.message) == (
        400,
        "The model anthropic/claude-sonnet-5-5 cannot honour the request's output_format.",
    )
    request = build_request(j, {})
    assert (request.output_format, request.tool_choice, request.parallel_tool_calls) == (
        OutputFormat("json_object"),
        ToolChoice("required", "f"),
        False,
    )
