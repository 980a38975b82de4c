"""The whole loop over real HTTP: REST set-up, the OpenAI SDK through the drop-in, a real Celery
worker on the completions and shadow queues, the simulated upstreams (candidate and judge)."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from muse_experiments.experiments.models import ShadowPair
from routing.catalogue import avocado_id
from routing.shadow.sampling import session_shadowed
from tests.factories import ALL_SCOPES, api_key, seed_catalogue

SOURCE, CANDIDATE, JUDGE = avocado_id(15), avocado_id(14), avocado_id(12)
SEARCH = {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}


def wait_for_pairs(n: int, timeout_s: float = 60.0) -> list[ShadowPair]:
    deadline = time.monotonic() + timeout_s
    while ShadowPair.objects.count() < n and time.monotonic() < deadline:
        time.sleep(0.2)
    return list(ShadowPair.objects.all())


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_shadow_test_mirrors_sampled_sessions_through_a_real_worker(
    live_server, upstreams, celery_worker_process
):
    seed_catalogue(upstreams.url)
    upstreams.set_scenario("avocado-v14", quality=0.7, latency_ms=30)
    headers = {"Authorization": f"Bearer {api_key([*ALL_SCOPES, 'experiments:write'])}"}
    with httpx.Client(base_url=live_server.url, headers=headers, timeout=60) as rest:
        created = rest.post(
            "/api/v1/shadow-tests",
            json={
                "key": "v14-shadow",
                "name": "Avocado v14 on v15's traffic",
                "candidate": "avocado-v14",
                "source": {"model": SOURCE},
                "sample_percent": 50,
                "judge": {"model": "avocado-v12", "instructions": "Prefer the more useful answer."},
                "max_usd_per_day": 1,
                "allow_external": False,
            },
        )
        assert created.status_code == 201, created.text
        assert rest.post("/api/v1/shadow-tests/v14-shadow/start").json()["status"] == "running"
        sessions = [f"sess-{i}" for i in range(16)]
        for s in sessions:
            client = openai.OpenAI(
                base_url=f"{live_server.url}/v1",
                api_key=headers["Authorization"].removeprefix("Bearer "),
                max_retries=0,
                default_headers={"X-Muse-Session-Id": s, "X-Muse-User-Id": f"u-{s}"},
            )
            for turn in range(2):
                raw = client.chat.completions.with_raw_response.create(
                    model="muse-default",
                    messages=[{"role": "user", "content": f"{s} turn {turn}"}],
                    tools=[{"type": "function", "function": SEARCH}] if turn == 0 else None,
                )
                assert raw.headers["x-muse-served-model"] == SOURCE  # the primary's answer, always
                assert "avocado-v14" not in raw.http_response.text
        shadowed = [
            s for s in sessions if session_shadowed(test_key="v14-shadow", session_id=s, sample_percent=50)
        ]
        pairs = wait_for_pairs(2 * len(shadowed))
        assert sorted(p.session_id for p in pairs) == sorted(s for s in shadowed for _ in range(2))
        assert all(p.candidate_ok and p.candidate_model == CANDIDATE for p in pairs)
        assert {p.judge_model for p in pairs} == {JUDGE}
        assert upstreams.call_count(model="avocado-v14") == len(pairs)
        detail = rest.get("/api/v1/shadow-tests/v14-shadow").json()
        spent = sum(float(p.candidate_cost_usd + p.judge_cost_usd) for p in pairs)
        assert detail["spent_usd_today"] == pytest.approx(spent, abs=1e-5)
