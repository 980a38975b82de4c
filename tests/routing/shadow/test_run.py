"""Shadow calls, in process (eager Celery) against the simulated upstreams over real HTTP:
sampling by session, same input, isolation (gate, opt-out, kill switches), budget and backlog."""

from __future__ import annotations

from decimal import Decimal

import pytest

from muse_experiments.experiments.models import ShadowPair, ShadowTest
from muse_experiments.experiments.services.shadow import shadow_test_create, shadow_test_start
from muse_experiments.infra.config_version import invalidate_all
from routing.catalogue import avocado_id
from routing.ops_services import kill_switch_set
from routing.shadow.budget import dropped_counts, spent_usd_today
from routing.shadow.run import shadow_training_record
from routing.shadow.sampling import session_shadowed
from routing.transcripts.gate import RejectReason, gate_check
from routing.transcripts.models import TrainingOptOut, TranscriptTurn
from tests.routing.pipeline.test_router import job, run
from tests.routing.shadow.conftest import celery_eager

pytestmark = pytest.mark.django_db

SOURCE, CANDIDATE, JUDGE = avocado_id(15), avocado_id(14), avocado_id(13)  # v15 is the platform default
TOOLS = [{"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]


@pytest.fixture(autouse=True)
def eager():
    """The shadow task runs in this process as it is enqueued (the worker tests run it for real)."""
    with celery_eager(True):
        yield


def start(key="sh", candidate=CANDIDATE, judge=JUDGE, percent=100.0, budget="10", external=False):
    test = shadow_test_create(
        key=key,
        name=key,
        candidate=candidate,
        source={"model": SOURCE},
        sample_percent=percent,
        judge={"model": judge, "instructions": ""} if judge else None,
        max_usd_per_day=Decimal(budget),
        allow_external=external,
        actor="test",
    )
    shadow_test_start(test=test, actor="test")
    invalidate_all()  # the test transaction never commits: no cross-process version bump fires
    return test


def test_sessions_are_sampled_by_a_deterministic_hash_matching_the_percent():
    picks = [session_shadowed(test_key="t", session_id=f"s-{i}", sample_percent=30) for i in range(20_000)]
    assert sum(picks) / len(picks) == pytest.approx(0.30, abs=0.012)
    again = [session_shadowed(test_key="t", session_id=f"s-{i}", sample_percent=30) for i in range(20_000)]
    assert picks == again
    other = [session_shadowed(test_key="u", session_id=f"s-{i}", sample_percent=30) for i in range(20_000)]
    assert picks != other  # the test's key salts the hash
    assert not any(session_shadowed(test_key="t", session_id=f"s-{i}", sample_percent=0) for i in range(500))


def test_the_candidate_gets_the_primarys_exact_input_and_the_answer_stays_the_primarys(catalogue, upstreams):
    start()
    messages = [
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "search", "arguments": {"q": "x"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
        {"role": "user", "content": "and in Rome?"},
    ]
    j = run(job(session_id="s-1", messages=messages, tools=TOOLS))
    assert j.status == "succeeded" and j.result["served_model"] == SOURCE
    primary_call = upstreams.calls(model="avocado-v15")[0]["body"]
    candidate_call = upstreams.calls(model="avocado-v14")[0]["body"]
    assert candidate_call["messages"] == primary_call["messages"]
    assert candidate_call["tools"] == primary_call["tools"]
    pair = ShadowPair.objects.get()
    assert (pair.job_id, pair.session_id, pair.candidate_model, pair.candidate_ok) == (
        str(j.id), "s-1", CANDIDATE, True
    )  # fmt: skip
    assert pair.primary_tool_calls == [{"name": "search", "arguments": {"q": "and in Rome?"}}]
    assert [c["name"] for c in pair.candidate_tool_calls] == ["search"]
    assert pair.candidate_latency_ms > 0 and pair.candidate_output_tokens > 0
    assert pair.candidate_cost_usd > 0 and pair.primary_cost_usd == Decimal(j.result["cost_usd"])
    # the judge saw the conversation and both answers, in the recorded order, and was costed
    judge_call = upstreams.calls(model="avocado-v13")[0]["body"]
    prompt = judge_call["messages"][-1]["content"]
    assert "and in Rome?" in prompt and "[tool call] search" in prompt
    assert pair.judge_verdict in ("candidate", "primary", "tie", "invalid")
    assert pair.judge_candidate_first in (True, False) and pair.judge_cost_usd > 0
    assert spent_usd_today("sh") == pytest.approx(
        float(pair.candidate_cost_usd + pair.judge_cost_usd), abs=2e-6
    )
    # never a transcript turn, and the gate refuses it
    assert TranscriptTurn.objects.filter(transcript__session_id="s-1").count() == 1
    report = gate_check([shadow_training_record(pair, {"messages": messages, "tools": TOOLS})])
    assert report.verdicts[0].reasons == (RejectReason.SHADOW_CALL,)


def test_a_shadowed_session_is_shadowed_on_every_turn_and_others_never(catalogue, upstreams):
    start(percent=50.0, judge=None)
    sessions = [f"s-{i}" for i in range(12)]
    for turn in range(2):
        for s in sessions:
            run(job(session_id=s, messages=[{"role": "user", "content": f"turn {turn}"}]))
    expected = {s for s in sessions if session_shadowed(test_key="sh", session_id=s, sample_percent=50.0)}
    assert 0 < len(expected) < len(sessions)
    got = list(ShadowPair.objects.values_list("session_id", flat=True))
    assert sorted(got) == sorted(s for s in expected for _ in range(2))


def test_opted_out_users_are_never_sent_to_an_external_candidate(catalogue, upstreams):
    start(candidate="azure/muse-special", judge=None, external=True)
    TrainingOptOut.objects.create(user_id="u-out")
    run(job(session_id="s-out", user_id="u-out"))
    run(job(session_id="s-in", user_id="u-in"))
    assert list(ShadowPair.objects.values_list("session_id", flat=True)) == ["s-in"]
    assert dropped_counts("sh") == {"opted_out": 1}
    assert all("s-out" not in c["raw_body"] for c in upstreams.calls(model="muse-special"))


def test_a_second_delivery_of_a_shadow_call_makes_no_call(catalogue, upstreams):
    from routing.shadow.run import shadow_run

    start(judge=None)
    primary = run(job(session_id="s-twice"))
    pair = ShadowPair.objects.get()
    assert upstreams.call_count(model="avocado-v14") == 1
    again = shadow_run(
        test_key="sh", job_id=str(primary.id), session_id="s-twice", user_id="u-1",
        request={"messages": [{"role": "user", "content": "hello"}], "tools": []},
        primary={"model": SOURCE, "latency_ms": 1.0, "cost_usd": "0", "output_tokens": 1, "text": "", "tool_calls": []},
    )  # fmt: skip
    assert again == "duplicate"
    assert upstreams.call_count(model="avocado-v14") == 1  # no second candidate call
    assert list(ShadowPair.objects.values_list("pk", flat=True)) == [pair.pk]


def test_an_external_judge_never_sees_an_opted_out_users_session(catalogue, upstreams):
    start(judge="anthropic/claude-sonnet-5-5", external=True)  # in-house candidate, external judge
    TrainingOptOut.objects.create(user_id="u-out")
    run(job(session_id="s-out", user_id="u-out"))
    run(job(session_id="s-in", user_id="u-in"))
    pairs = {p.session_id: p for p in ShadowPair.objects.all()}
    assert set(pairs) == {"s-out", "s-in"}  # the in-house candidate answers both
    assert (pairs["s-out"].judge_model, pairs["s-out"].judge_verdict) == ("", "")  # no judge call
    assert pairs["s-in"].judge_model == "anthropic/claude-sonnet-5-5"
    judged = upstreams.calls(model="claude-sonnet-5-5")
    assert len(judged) == 1 and all("s-out" not in c["raw_body"] for c in judged)


def test_an_external_candidates_encrypted_reasoning_is_discarded(catalogue, upstreams):
    from routing.models import ModelEndpoint

    upstreams.set_scenario("muse-special", reasoning=True, encrypted_reasoning="always")
    ModelEndpoint.objects.filter(public_id="azure/muse-special").update(supports_reasoning=True)
    invalidate_all()
    start(candidate="azure/muse-special", judge=None, external=True)
    run(job(session_id="s-r"))
    pair = ShadowPair.objects.get()
    assert pair.candidate_ok
    sent = upstreams.calls(model="muse-special")[0]
    assert "encrypted_content" in sent["response_body"]  # the upstream did send some
    stored = str(ShadowPair.objects.filter(pk=pair.pk).values().get())
    assert "encrypted_content" not in stored and "gAAAA" not in stored


def test_a_killed_candidate_gets_no_call(catalogue, upstreams):
    start(judge=None)
    kill_switch_set(scope="endpoint", target=CANDIDATE, active=True, reason="incident", actor="oncall")
    invalidate_all()
    run(job(session_id="s-k"))
    assert upstreams.call_count(model="avocado-v14") == 0
    assert not ShadowPair.objects.exists()
    assert dropped_counts("sh") == {"killed": 1}


def test_the_daily_budget_stops_within_one_calls_cost_judge_included(catalogue, upstreams):
    start(budget="0.00005")
    for i in range(20):
        run(
            job(session_id=f"s-{i}", messages=[{"role": "user", "content": "a question of some length " * 5}])
        )
    pairs = list(ShadowPair.objects.all())
    costs = [p.candidate_cost_usd for p in pairs] + [p.judge_cost_usd for p in pairs if p.judge_verdict]
    spent = spent_usd_today("sh")
    assert spent == pytest.approx(float(sum(costs)), abs=1e-5)
    assert 0.00005 <= spent <= 0.00005 + float(max(costs)) + 1e-6
    assert dropped_counts("sh")["budget"] >= 1
    assert len(pairs) < 20


def test_beyond_the_backlog_shadow_calls_are_dropped_and_counted(catalogue, upstreams, settings):
    settings.SHADOW_MAX_BACKLOG = 0
    start(judge=None)
    j = run(job(session_id="s-b"))
    assert j.status == "succeeded"
    assert upstreams.call_count(model="avocado-v14") == 0
    assert dropped_counts("sh") == {"backlog": 1}
    assert ShadowTest.objects.get().status == "running"


def test_a_streamed_primary_is_mirrored_after_its_stream_ends(catalogue, upstreams):
    from routing.jobs import completion_job_create
    from routing.pipeline.streaming import stream_job_events

    start(judge=None)
    streamed, _ = completion_job_create(
        api_key=None, session_id="s-stream", user_id="u-1", subagent="coder", attributes={},
        request={"messages": [{"role": "user", "content": "stream it"}], "tools": []}, stream=True,
    )  # fmt: skip
    events = list(stream_job_events(job_id=str(streamed.id)))
    assert events[-1]["type"] == "done"
    pair = ShadowPair.objects.get()
    assert (pair.session_id, pair.candidate_model, pair.candidate_ok) == ("s-stream", CANDIDATE, True)
    assert upstreams.calls(model="avocado-v14")[0]["body"].get("stream") in (None, False)  # never streamed


def test_a_shadow_call_waits_for_idle_cpu_and_is_dropped_busy_after_the_longest_wait(
    catalogue, upstreams, settings, monkeypatch, tmp_path
):
    """On a host whose CPU is never idle enough the candidate gets no call: after
    ``SHADOW_MAX_WAIT_S`` the shadow call is dropped and counted ``busy``; the primary is served."""
    from muse_experiments.infra import idle_cpu
    from tests.muse_experiments.infra.test_idle_cpu import busy_host

    stat = tmp_path / "stat"
    monkeypatch.setattr(idle_cpu, "_sampler", idle_cpu.IdleCpuSampler(path=stat, window_s=0.05))
    settings.SHADOW_MIN_IDLE_CPU, settings.SHADOW_MAX_WAIT_S = 0.25, 0.2
    start(judge=None)
    with busy_host(stat):
        j = run(job(session_id="s-busy"))
    assert j.status == "succeeded" and j.result["served_model"] == SOURCE
    assert upstreams.calls(model="avocado-v14") == []
    assert dropped_counts("sh") == {"busy": 1}
    assert not ShadowPair.objects.exists()


def test_a_call_a_guard_refuses_is_dropped_with_the_guards_reason_not_recorded_as_failed(
    catalogue, upstreams
):
    """Nothing was sent (the candidate's only concurrency slot is taken): no pair, no
    ``candidate_failed``; the drop is counted under the guard's outcome."""
    from routing.guards.concurrency import limiter
    from routing.models import ModelEndpoint

    ModelEndpoint.objects.filter(public_id=CANDIDATE).update(max_concurrency=1)
    invalidate_all()
    start(judge=None)
    held = limiter.acquire(CANDIDATE, 1)
    assert held is not None
    try:
        j = run(job(session_id="s-full"))
    finally:
        held.release()
    assert j.status == "succeeded"
    assert upstreams.call_count(model="avocado-v14") == 0
    assert not ShadowPair.objects.exists()
    assert dropped_counts("sh") == {"concurrency_limited": 1}


def test_a_test_stopped_while_its_call_waited_for_the_host_makes_no_call(catalogue, upstreams, monkeypatch):
    from muse_experiments.experiments.services.shadow import shadow_test_stop
    from routing.shadow import run as shadow_run_module

    test = start(judge=None)

    def stop_meanwhile(min_share, *, max_wait_s):  # the PM stops the test during the wait
        shadow_test_stop(test=ShadowTest.objects.get(pk=test.pk), actor="test")
        invalidate_all()
        return True

    monkeypatch.setattr(shadow_run_module, "wait_for_idle_cpu", stop_meanwhile)
    run(job(session_id="s-stop"))
    assert upstreams.call_count(model="avocado-v14") == 0
    assert not ShadowPair.objects.exists()
    assert dropped_counts("sh") == {"stopped": 1}


def test_a_judge_call_not_made_is_counted_and_the_pair_reported_not_judged(catalogue, upstreams):
    from routing.shadow.results import shadow_results

    start()
    kill_switch_set(scope="endpoint", target=JUDGE, active=True, reason="incident", actor="oncall")
    invalidate_all()
    run(job(session_id="s-nj"))
    pair = ShadowPair.objects.get()
    assert pair.candidate_ok and pair.judge_verdict == "" and upstreams.call_count(model="avocado-v13") == 0
    assert dropped_counts("sh") == {"judge_killed": 1}
    results = shadow_results(ShadowTest.objects.get(key="sh"))
    assert results["dropped"] == 0  # the candidate's call was made
    assert results["judge"]["not_judged"] == 1


def test_until_a_call_has_finished_today_the_budget_admits_one_call_at_a_time(catalogue):
    """No dearest cost known yet: a second concurrent call could cost anything, so it waits for
    the first to settle (the spend can pass the limit by one call, never one per thread)."""
    import threading

    from routing.shadow.budget import budget_admit, budget_settle

    assert budget_admit(test_key="b", max_usd_per_day=Decimal("0.01"))
    assert not budget_admit(test_key="b", max_usd_per_day=Decimal("0.01"), wait_s=0.2)  # waited, gave up
    second: list[bool] = []
    waiter = threading.Thread(
        target=lambda: second.append(budget_admit(test_key="b", max_usd_per_day=Decimal("0.01")))
    )
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and second == []  # it waits for the first call's cost
    budget_settle(test_key="b", cost_usd=Decimal("0.002"))
    waiter.join(5)
    assert second == [True]  # then admitted: 0.002 + 2 × 0.002 ≤ 0.01
    budget_settle(test_key="b", cost_usd=Decimal("0.002"))
    # spent 0.004, dearest 0.002: in flight k, one more admitted while 0.004 + (k + 1) × 0.002 ≤ 0.01
    admitted = [budget_admit(test_key="b", max_usd_per_day=Decimal("0.01")) for _ in range(4)]
    assert admitted == [True, True, True, False]


def test_a_new_test_under_a_deleted_tests_key_starts_with_nothing_spent_or_dropped(
    catalogue, django_capture_on_commit_callbacks
):
    from routing.shadow.budget import budget_admit, budget_settle, dropped_count

    old = start(key="reused")
    assert budget_admit(test_key="reused", max_usd_per_day=Decimal("10"))
    budget_settle(test_key="reused", cost_usd=Decimal("0.25"))
    dropped_count("reused", "busy", 3)
    other = start(key="kept")
    budget_settle(test_key="kept", cost_usd=Decimal("0.5"))
    with django_capture_on_commit_callbacks(execute=True):
        ShadowTest.objects.filter(pk=old.pk).delete()  # as the admin's delete does
    start(key="reused")
    assert spent_usd_today("reused") == 0 and dropped_counts("reused") == {}
    assert spent_usd_today("kept") == 0.5 and other.key == "kept"  # another test's counters stay
