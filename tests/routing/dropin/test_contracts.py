"""Output contracts sent to the drop-ins reach every provider, translated, and are honoured.

``response_format`` / ``text.format`` / ``output_config.format``, a forced ``tool_choice`` and no
parallel tool calls, sent through the official ``openai`` and ``anthropic`` SDKs (their
``parse`` helpers included) to a live server with a real Celery worker, each pinned to the
native (Chat Completions), Azure (Responses) and Claude (Messages) endpoints of the seeded
catalogue on the simulated upstreams, which refuse what the real APIs refuse. A model that
cannot honour a contract is never asked: a 400 naming the field before any job exists, or, for
an experiment's alias, the chain's models that can serve it (reason ``unsupported_contract``).
"""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
from pydantic import BaseModel, ConfigDict

from muse_experiments.infra import config_version
from routing.catalogue import AVOCADO_VERSIONS, avocado_id
from routing.models import CallRecord, CompletionJob, ModelEndpoint
from tests.conftest import wait_for_records_written
from tests.factories import api_key, make_experiment, seed_catalogue
from tests.routing.dropin.test_endpoints import CLOCK, WEATHER

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DEFAULT = avocado_id(AVOCADO_VERSIONS)
CONTROL = avocado_id(14)
AZURE = "azure/muse-special"
CLAUDE = "anthropic/claude-sonnet-5-5"
#: pinned model -> the upstream model the simulated upstreams record
PROVIDERS = {DEFAULT: "avocado-v15", AZURE: "muse-special", CLAUDE: "claude-sonnet-5-5"}
DROP_INS = ("chat", "responses", "messages")


class Day(BaseModel):
    model_config = ConfigDict(extra="forbid")
    high_c: float
    sunny: bool


class Forecast(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: str
    days: list[Day]


@pytest.fixture
def platform(live_server, upstreams, celery_worker_process):
    """Catalogue on the simulated upstreams; Claude thinks (so a forced call must drop it)."""
    seed_catalogue(upstreams.url)
    upstreams.set_scenario("claude-sonnet-5-5", reasoning=True)
    return live_server.url, api_key(["completions"]), upstreams


def openai_client(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def anthropic_client(url: str, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)


def sent(upstreams, model: str) -> dict:
    """The body the pinned model's upstream received last."""
    return upstreams.calls(model=PROVIDERS[model])[-1]["body"]


def tools_for(drop_in: str) -> list[dict]:
    if drop_in == "chat":
        return [{"type": "function", "function": t} for t in (WEATHER, CLOCK)]
    if drop_in == "responses":
        return [{"type": "function", **t} for t in (WEATHER, CLOCK)]
    return [
        {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
        for t in (WEATHER, CLOCK)
    ]


def tool_calls(drop_in: str, url: str, key: str, model: str, **contract) -> list[tuple[str, dict]]:
    """``(name, arguments)`` of the tool calls a drop-in answers with, asked about Quito."""
    if drop_in == "chat":
        answer = openai_client(url, key).chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Quito"}], tools=tools_for(drop_in), **contract
        )
        return [
            (c.function.name, json.loads(c.function.arguments))
            for c in answer.choices[0].message.tool_calls or ()
        ]
    if drop_in == "responses":
        answer = openai_client(url, key).responses.create(
            model=model, input="Quito", tools=tools_for(drop_in), **contract
        )
        return [(i.name, json.loads(i.arguments)) for i in answer.output if i.type == "function_call"]
    answer = anthropic_client(url, key).messages.create(
        model=model,
        max_tokens=512,
        messages=[{"role": "user", "content": "Quito"}],
        tools=tools_for(drop_in),
        **contract,
    )
    return [(b.name, b.input) for b in answer.content if b.type == "tool_use"]


@pytest.mark.parametrize("model", list(PROVIDERS))
@pytest.mark.parametrize("drop_in", DROP_INS)
def test_a_json_schema_reaches_every_provider_and_the_sdks_parse_the_answer(platform, drop_in, model):
    url, key, upstreams = platform
    if drop_in == "chat":
        answer = openai_client(url, key).chat.completions.parse(
            model=model, messages=[{"role": "user", "content": "Lima"}], response_format=Forecast
        )
        parsed = answer.choices[0].message.parsed
    elif drop_in == "responses":
        parsed = (
            openai_client(url, key)
            .responses.parse(model=model, input="Lima", text_format=Forecast)
            .output_parsed
        )
    else:
        parsed = (
            anthropic_client(url, key)
            .messages.parse(
                model=model,
                max_tokens=512,
                messages=[{"role": "user", "content": "Lima"}],
                output_format=Forecast,
            )
            .parsed_output
        )
    assert parsed == Forecast(city="Lima", days=[Day(high_c=1.5, sunny=True)])
    body = sent(upstreams, model)
    schema = (
        body["response_format"]["json_schema"]["schema"]
        if model == DEFAULT
        else body["text"]["format"]["schema"]
        if model == AZURE
        else body["output_config"]["format"]["schema"]
    )
    assert schema["properties"]["city"] == {"title": "City", "type": "string"}
    assert set(schema["properties"]) == {"city", "days"}


@pytest.mark.parametrize("model", list(PROVIDERS))
@pytest.mark.parametrize("drop_in", DROP_INS)
def test_a_named_tool_choice_is_forced_on_every_provider(platform, drop_in, model):
    """The upstream would call no tool; the named one is called (for Claude without thinking,
    which allows only auto and none: the simulated Anthropic refuses the pair, as Anthropic does)."""
    url, key, upstreams = platform
    upstreams.set_scenario(PROVIDERS[model], tool_calls="never", reasoning=model == CLAUDE)
    choice = {
        "chat": {"type": "function", "function": {"name": "clock"}},
        "responses": {"type": "function", "name": "clock"},
        "messages": {"type": "tool", "name": "clock"},
    }[drop_in]
    assert tool_calls(drop_in, url, key, model, tool_choice=choice) == [("clock", {"city": "Quito"})]
    body = sent(upstreams, model)
    assert (
        body["tool_choice"]
        == {
            DEFAULT: {"type": "function", "function": {"name": "clock"}},
            AZURE: {"type": "function", "name": "clock"},
            CLAUDE: {"type": "tool", "name": "clock"},
        }[model]
    )
    assert "thinking" not in body


@pytest.mark.parametrize("model", list(PROVIDERS))
@pytest.mark.parametrize("drop_in", DROP_INS)
def test_a_required_tool_call_is_forced_on_every_provider(platform, drop_in, model):
    url, key, upstreams = platform
    upstreams.set_scenario(PROVIDERS[model], tool_calls="never")
    choice = {"type": "any"} if drop_in == "messages" else "required"
    assert tool_calls(drop_in, url, key, model, tool_choice=choice) == [("weather", {"city": "Quito"})]
    assert sent(upstreams, model)["tool_choice"] == ({"type": "any"} if model == CLAUDE else "required")


@pytest.mark.parametrize("model", list(PROVIDERS))
@pytest.mark.parametrize("drop_in", DROP_INS)
def test_no_parallel_tool_calls_reaches_every_provider(platform, drop_in, model):
    url, key, upstreams = platform
    upstreams.set_scenario(PROVIDERS[model], tool_calls="parallel")
    assert len(tool_calls(drop_in, url, key, model)) == 2  # the upstream calls both tools by default
    contract = (
        {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}
        if drop_in == "messages"
        else {"parallel_tool_calls": False}
    )
    assert tool_calls(drop_in, url, key, model, **contract) == [("weather", {"city": "Quito"})]
    body = sent(upstreams, model)
    if model == CLAUDE:
        assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    else:
        assert body["parallel_tool_calls"] is False


@pytest.mark.parametrize("model", [DEFAULT, AZURE])
@pytest.mark.parametrize("drop_in", ["chat", "responses"])
def test_json_mode_reaches_the_models_that_have_it_streamed_too(platform, drop_in, model):
    url, key, upstreams = platform
    client = openai_client(url, key)
    if drop_in == "chat":
        chunks = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Answer in JSON: Lima"}],
            response_format={"type": "json_object"},
            stream=True,
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        with client.responses.stream(
            model=model, input="Answer in JSON: Lima", text={"format": {"type": "json_object"}}
        ) as stream:
            text = stream.get_final_response().output_text
    assert json.loads(text) == {"reply": f"{PROVIDERS[model]} reply to: Answer in JSON: Lima [quality=0.50]"}
    body = sent(upstreams, model)
    assert (body["response_format"] if model == DEFAULT else body["text"]["format"]) == {
        "type": "json_object"
    }


@pytest.mark.parametrize(("drop_in", "field"), [("chat", "response_format"), ("responses", "text.format")])
def test_json_mode_pinned_to_claude_is_a_400_naming_the_field_before_any_job(platform, drop_in, field):
    """Anthropic has no JSON mode: the call is refused before routing, not sent and dropped."""
    url, key, upstreams = platform
    client = openai_client(url, key)
    with pytest.raises(openai.BadRequestError) as refused:
        if drop_in == "chat":
            client.chat.completions.create(
                model=CLAUDE,
                messages=[{"role": "user", "content": "JSON please"}],
                response_format={"type": "json_object"},
            )
        else:
            client.responses.create(
                model=CLAUDE, input="JSON please", text={"format": {"type": "json_object"}}, stream=True
            )
    assert refused.value.body["param"] == field
    assert (
        refused.value.body["message"]
        == f"'{field}': the model '{CLAUDE}' cannot honour an answer in JSON mode."
    )
    assert CompletionJob.objects.count() == 0 and upstreams.call_count() == 0


def test_a_pinned_model_without_structured_outputs_is_a_400_naming_the_anthropic_field(platform):
    url, key, upstreams = platform
    ModelEndpoint.objects.filter(public_id=CONTROL).update(supports_structured_output=False)
    config_version.bump()
    with pytest.raises(anthropic.BadRequestError) as refused:
        anthropic_client(url, key).messages.parse(
            model=CONTROL,
            max_tokens=64,
            messages=[{"role": "user", "content": "Lima"}],
            output_format=Forecast,
        )
    assert refused.value.body["error"] == {
        "type": "invalid_request_error",
        "message": f"'output_config.format': the model '{CONTROL}' cannot honour an answer that follows a JSON Schema.",
    }
    assert CompletionJob.objects.count() == 0 and upstreams.call_count() == 0


def test_an_experiment_routes_a_contract_only_to_the_variants_that_honour_it(platform):
    """The unit is assigned to a treatment that cannot follow a JSON Schema: its call is served by
    the control, the treatment never asked, the fallback recorded with its reason; a call without
    the contract still reaches the treatment."""
    url, key, upstreams = platform
    ModelEndpoint.objects.filter(public_id=DEFAULT).update(supports_structured_output=False)
    make_experiment(arms=[("control", CONTROL, 0.0), ("treatment", DEFAULT, 1.0)])  # bumps the config
    client = openai.OpenAI(
        base_url=f"{url}/v1", api_key=key, max_retries=0, default_headers={"X-Muse-Session-Id": "s-1"}
    )
    raw = client.chat.completions.with_raw_response.parse(
        model="muse-default", messages=[{"role": "user", "content": "Lima"}], response_format=Forecast
    )
    assert raw.parse().choices[0].message.parsed.city == "Lima"
    assert (raw.headers["x-muse-served-model"], raw.headers["x-muse-variant"]) == (CONTROL, "treatment")
    assert raw.headers["x-muse-reason"] == "unsupported_contract"
    assert upstreams.call_count(model="avocado-v15") == 0
    plain = client.chat.completions.with_raw_response.create(
        model="muse-default", messages=[{"role": "user", "content": "Lima"}]
    )
    assert plain.headers["x-muse-served-model"] == DEFAULT
    wait_for_records_written()
    first = CallRecord.objects.get(job_id=raw.headers["x-muse-job-id"])
    assert (first.reason, first.variant_key, first.served_endpoint) == (
        "unsupported_contract",
        "treatment",
        CONTROL,
    )
    assert [(a.endpoint, a.outcome) for a in first.attempts.all()] == [
        (DEFAULT, "unsupported_contract"),
        (CONTROL, "ok"),
    ]


def test_an_alias_whose_chain_cannot_honour_a_contract_is_a_400_before_any_job(platform):
    url, key, upstreams = platform
    ModelEndpoint.objects.filter(public_id__in=[CONTROL, DEFAULT]).update(supports_tools=False)
    make_experiment(arms=[("control", CONTROL, 0.5), ("treatment", DEFAULT, 0.5)])
    with pytest.raises(anthropic.BadRequestError) as refused:
        anthropic_client(url, key).messages.create(
            model="muse-default",
            max_tokens=64,
            messages=[{"role": "user", "content": "Quito"}],
            tools=tools_for("messages"),
            tool_choice={"type": "any"},
        )
    assert refused.value.body["error"]["message"] == (
        "'tool_choice': no model that 'muse-default' routes this call to can honour a forced tool call."
    )
    assert CompletionJob.objects.count() == 0 and upstreams.call_count() == 0
    # the same call leaving the choice to the model is served
    assert tool_calls("messages", url, key, "muse-default") == [("weather", {"city": "Quito"})]
