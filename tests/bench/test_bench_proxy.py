"""The pure parts of ``bench/bench_proxy.py`` (figures, table, goals, schedule, Procfile) and its
instant upstream answering the official ``openai`` SDK over real HTTP. The benchmark itself is run
by ``make bench-proxy``, not here."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import openai
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_proxy import (
    Sample,
    bench_formation,
    figures,
    goal_lines,
    litellm_config,
    ratio,
    render_table,
    schedule,
)  # noqa: E402
from benchlib import PROCFILE, bench_ports, pct, read_procfile, tree_cpu_s  # noqa: E402
from instant_upstream import close_connections, serve  # noqa: E402


def samples_of(**p50s: tuple[float, float]) -> dict:
    """``target=(p50-ish constant latency ms, wall s for 100 requests)`` → samples at 1 and 32."""
    out = {}
    for level in (1, 32):
        for target, (ms, wall) in p50s.items():
            out[(target, level)] = Sample([ms] * 100, wall)
    return out


def test_added_latency_is_measured_against_the_direct_call_and_ratios_against_litellm():
    samples = samples_of(direct=(1.0, 0.1), litellm=(6.0, 0.5), platform=(3.5, 0.25))
    figs = figures(samples, 1)
    assert figs["added_p50"] == {"litellm": 5.0, "platform": 2.5}
    assert figs["throughput"] == {"direct": 1000.0, "litellm": 200.0, "platform": 400.0}
    assert ratio(figs, "added_p50") == 0.5
    assert ratio(figs, "throughput") == 2.0
    lines = goal_lines(samples, [1, 32])
    assert lines[0].endswith("0.50× — met")  # added p50 ≤ 0.5× LiteLLM's
    assert lines[2].endswith("2.00× — met")  # throughput ≥ 1.5×
    assert lines[3].endswith("0.58× — met")  # p99 3.5 / 6.0


def test_goals_say_not_met_and_the_table_carries_the_ratios():
    samples = samples_of(direct=(1.0, 0.1), litellm=(6.0, 0.5), platform=(21.0, 1.4))
    assert goal_lines(samples, [1, 32])[0].endswith("4.00× — NOT met")
    table = render_table(samples, [1, 32])
    assert "| added p50 at 1 client (minus direct) | — | 5.00 ms | 20.00 ms (4.00×) |" in table
    assert "| throughput at 32 clients | 1,000/s | 200/s | 71/s (0.36×) |" in table


def test_a_missing_target_leaves_dashes_and_no_ratio():
    samples = {("platform", 1): Sample([2.0, 4.0], 0.01)}
    assert figures(samples, 1)["added_p50"] == {}
    assert "| p50 at 1 client | — | — | 3.00 ms |" in render_table(samples, [1])
    assert goal_lines(samples, [1]) == [
        "  added p50 at 1 client ≤ 0.5× LiteLLM's: not measured",
        "  added p99 at 1 client ≤ 1× LiteLLM's: not measured",
    ]


def test_cpu_per_call_is_summed_over_rounds_and_kept_per_process():
    sample = Sample()
    sample.add([1.0] * 100, 1.0, [], 0.5, {"web.1": 0.2, "worker.1": 0.3})
    sample.add([1.0] * 100, 1.0, [], 0.3, {"web.1": 0.1, "worker.1": 0.1, "shadow.1": 0.1})
    assert sample.cpu_ms_per_call == 4.0
    assert sample.cpu_parts_ms_per_call() == pytest.approx({"web.1": 1.5, "worker.1": 2.0, "shadow.1": 0.5})
    assert Sample().cpu_parts_ms_per_call() == {}


def test_the_order_of_targets_alternates_between_rounds():
    plan = schedule([1, 32], 2)
    assert [(c, r) for c, r, _ in plan] == [(1, 0), (1, 1), (32, 0), (32, 1)]
    assert plan[0][2] == ("direct", "litellm", "platform")
    assert plan[1][2] == ("platform", "litellm", "direct")


def test_cpu_per_call_is_the_targets_own_cpu_over_completed_calls_and_compared_with_litellm():
    samples = samples_of(direct=(1.0, 0.1), litellm=(6.0, 0.5), platform=(3.5, 0.25))
    samples[("litellm", 1)].add([], 0.0, [], cpu_s=0.4)  # 100 calls
    samples[("platform", 1)].add([], 0.0, [], cpu_s=0.6)
    figs = figures(samples, 1)
    assert figs["cpu"] == pytest.approx({"litellm": 4.0, "platform": 6.0})
    assert "| proxy CPU per call at 1 client | — | 4.00 ms | 6.00 ms (1.50×) |" in render_table(samples, [1])


def test_cpu_time_of_a_process_tree_includes_its_reaped_children():
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    parent_code = f"import subprocess, sys, time; subprocess.run([sys.executable, '-c', {burn!r}]); print('ok', flush=True); time.sleep(30)"
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "ok"
        assert tree_cpu_s([parent.pid]) >= 0.3  # the child's CPU, reaped into the parent's cutime
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()


def test_the_port_range_comes_from_the_environment_or_the_kernel_picks():
    assert bench_ports("18200-18299") == range(18200, 18300)
    assert bench_ports("") is None
    with pytest.raises(ValueError, match="18200-18299"):
        bench_ports("18299-18200")


def test_percentile_by_nearest_rank():
    values = list(range(1, 101))
    assert pct(values, 50) == 51
    assert pct(values, 99) == 99
    assert pct([7.0], 99) == 7.0


def test_the_procfile_names_the_web_and_worker_processes_and_the_web_port_comes_from_the_environment():
    shape = read_procfile(PROCFILE)
    assert {"web", "worker"} <= set(shape)
    assert "PORT" in shape["web"]


def test_the_bench_leaves_beat_out_unless_the_formation_names_it():
    assert bench_formation("") == "beat=0"
    assert bench_formation("worker=2") == "worker=2,beat=0"
    assert bench_formation("worker=2,beat=1") == "worker=2,beat=1"


def test_the_litellm_config_routes_the_alias_to_the_upstream_with_a_master_key():
    config = litellm_config(upstream="http://127.0.0.1:9", master_key="sk-m")
    assert config["general_settings"] == {"master_key": "sk-m"}
    (model,) = config["model_list"]
    assert model["model_name"] == "muse-default"
    assert model["litellm_params"]["api_base"] == "http://127.0.0.1:9/v1"
    assert model["litellm_params"]["model"].startswith("openai/")


@pytest.fixture
def instant_upstream():
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(serve(0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    async def shutdown() -> None:
        server.close()
        close_connections()
        await asyncio.sleep(0.05)

    asyncio.run_coroutine_threadsafe(shutdown(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def test_the_instant_upstream_answers_the_openai_sdk_on_a_kept_alive_connection(instant_upstream):
    with openai.OpenAI(base_url=f"{instant_upstream}/v1", api_key="sk-x", max_retries=0) as client:
        first = client.chat.completions.create(
            model="avocado-v14", messages=[{"role": "user", "content": "hi"}]
        )
        second = client.chat.completions.create(
            model="other", messages=[{"role": "user", "content": "again"}]
        )
    assert first.model == "avocado-v14" and second.model == "other"
    assert first.choices[0].message.content == "Done: the benchmark's fixed answer."
    assert first.usage.total_tokens == 20
    assert first.id != second.id
    with httpx.Client(base_url=instant_upstream) as http:
        assert http.get("/health").json() == {"ok": True}
        assert http.post("/v1/embeddings", json={}).status_code == 404


def test_the_instant_upstream_streams_the_same_answer_with_usage(instant_upstream):
    with openai.OpenAI(base_url=f"{instant_upstream}/v1", api_key="sk-x", max_retries=0) as client:
        stream = client.chat.completions.create(
            model="avocado-v15",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "Done: the benchmark's fixed answer."
    )
    assert [c.choices[0].finish_reason for c in chunks if c.choices] == [None, "stop"]
    assert chunks[-1].usage.total_tokens == 20 and chunks[-1].model == "avocado-v15"
