"""The main job end to end: REST API → real Celery worker → simulated upstreams → analysis."""

from __future__ import annotations

import httpx
import pytest

from muse_experiments.experiments.models import Exposure
from routing.catalogue import avocado_id
from routing.models import CallRecord
from tests.conftest import wait_for_records_written
from tests.factories import api_key, make_experiment, seed_catalogue

ENDPOINTS = [avocado_id(14), "azure/muse-special", "anthropic/claude-sonnet-5-5"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_completions_flow_through_the_api_a_real_worker_and_all_three_provider_kinds(
    live_server, upstreams, celery_worker_process
):
    seed_catalogue(upstreams.url)
    experiment = make_experiment(
        key="e2e",
        arms=[("control", ENDPOINTS[0], 0.34), ("azure", ENDPOINTS[1], 0.33), ("claude", ENDPOINTS[2], 0.33)],
    )
    headers = {"Authorization": f"Bearer {api_key()}"}
    sessions = 60
    served = {}
    with httpx.Client(base_url=live_server.url, headers=headers, timeout=60) as client:
        for i in range(sessions):
            response = client.post(
                "/api/v1/completions",
                json={
                    "session_id": f"s-{i}",
                    "user_id": f"u-{i % 7}",
                    "subagent": "coder",
                    "messages": [{"role": "user", "content": f"task {i}"}],
                    "tools": [
                        {
                            "name": "search",
                            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                        }
                    ]
                    if i % 3 == 0
                    else [],
                },
            )
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["status"] == "succeeded", body
            assert body["result"]["experiment"] == "e2e"
            served[f"s-{i}"] = (body["result"]["variant"], body["result"]["served_model"])
        events = [
            {"event_id": f"s-{i}-ok", "name": "task_success", "session_id": f"s-{i}", "value": float(i % 2)}
            for i in range(sessions)
        ]
        wait_for_records_written()  # the call records reach the database just after the answers
        assert client.post("/api/v1/events", json={"events": events}).status_code == 201
        results = client.get("/api/v1/experiments/e2e/results", params={"refresh": "1"}).json()

    assert {model for _, model in served.values()} == set(ENDPOINTS)
    records = CallRecord.objects.filter(experiment_id=experiment.id)
    assert records.count() == sessions
    assert {(r.unit_id, r.variant_key) for r in records} == {(s, v) for s, (v, _) in served.items()}
    assert Exposure.objects.filter(experiment=experiment).count() == sessions

    units = {v["key"]: v["units"] for v in results["variants"]}
    expected = {k: sum(1 for v, _ in served.values() if v == k) for k in ("control", "azure", "claude")}
    assert units == expected
    success = next(m for m in results["metrics"] if m["name"] == "task_success")
    by_variant = {v["key"]: v for v in success["variants"]}
    for key in expected:
        ones = sum(1 for i in range(sessions) if served[f"s-{i}"][0] == key and i % 2 == 1)
        assert by_variant[key]["n"] == expected[key]
        assert by_variant[key]["mean"] == pytest.approx(ones / expected[key])
    assert {c["variant"] for c in success["comparisons"]} == {"azure", "claude"}
    assert results["srm"]["p_value"] is not None
