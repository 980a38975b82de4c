"""The demo's shadow test (``make demo``): Avocado v15 mirrored on the demo experiment's control
traffic (Avocado v14), judged by Avocado v12, all over the REST API; then its comparison printed.

HTTP only (``httpx``): like the rest of the demo it drives the platform from outside.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

CANDIDATE, JUDGE = "avocado-v15", "avocado-v12"


def shadow_start(base: str, api_key: str, *, experiment_key: str, variant: str = "control") -> str:
    """Create and start the demo's shadow test over REST; returns its key. Raises ``httpx``'s
    ``HTTPStatusError`` when the platform refuses it."""
    key = f"shadow-{experiment_key}"
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {api_key}"}, timeout=60) as client:
        client.post(
            "/api/v1/shadow-tests",
            json={
                "key": key,
                "name": f"{CANDIDATE} on {experiment_key}/{variant} traffic",
                "candidate": CANDIDATE,
                "source": {"experiment": experiment_key, "variant": variant},
                "sample_percent": 50,
                "judge": {"model": JUDGE, "instructions": "Prefer the answer that completes the task."},
                "max_usd_per_day": 5,
                "allow_external": False,
            },
        ).raise_for_status()
        client.post(f"/api/v1/shadow-tests/{key}/start").raise_for_status()
    return key


def shadow_report(
    base: str, api_key: str, key: str, write: Callable[[str], None], *, settle_s: float = 60
) -> dict:
    """Wait until the shadow queue is idle (the pair count stops moving for 2 s, at most
    ``settle_s``), then print the comparison with ``write``; returns the results."""
    headers = {"Authorization": f"Bearer {api_key}"}
    url = f"{base}/api/v1/shadow-tests/{key}/results"
    last, stable_since, deadline = -1, time.monotonic(), time.monotonic() + settle_s
    while time.monotonic() < deadline:
        results = httpx.get(url, headers=headers, timeout=120).json()
        done = results["pairs"] + results["dropped"]
        if done != last:
            last, stable_since = done, time.monotonic()
        elif time.monotonic() - stable_since >= 2.0:
            break
        time.sleep(0.5)
    results = httpx.get(url, headers=headers, timeout=120).json()
    for line in shadow_lines(key, results):
        write(line)
    return results


def shadow_lines(key: str, results: dict) -> list[str]:
    """The printed comparison of ``results`` (``GET /api/v1/shadow-tests/{key}/results``): one
    line per measure, the ratio column and the interval aligned under their headers."""
    lines: list[str] = []
    lines.append(
        f"\nShadow test {key}: {CANDIDATE} on the control's traffic, never shown to users\n"
        f"{results['pairs']} pairs in {results['sessions']} sessions; {results['candidate_failed']} candidate "
        f"failures; {results['dropped']} dropped; ${results['spent_usd']:.4f} spent (candidate + judge)"
    )
    rows = [
        ("latency p50 (ms)", results["latency_ms"]["primary_p50"], results["latency_ms"]["candidate_p50"],
         results["latency_ms"]["ratio"]),
        ("cost per call (USD)", results["cost_usd_per_call"]["primary"], results["cost_usd_per_call"]["candidate"],
         results["cost_usd_per_call"]["ratio"]),
        ("output tokens per call", results["output_tokens_per_call"]["primary"],
         results["output_tokens_per_call"]["candidate"], results["output_tokens_per_call"]["ratio"]),
    ]  # fmt: skip
    lines.append(
        f"{'measure':<24}{'primary':>12}{'candidate':>12}{'ratio':>9}  95% CI (clustered by session)"
    )
    for name, primary, candidate, ratio in rows:
        lines.append(
            f"{name:<24}{_num(primary):>12}{_num(candidate):>12}{_num(ratio['estimate']):>9}  {_ci(ratio['ci'])}"
        )
    agree = results["tool_call_agreement"]
    lines.append(f"{'tool-call agreement':<24}{'':>12}{'':>12}{_num(agree['rate']):>9}  {_ci(agree['ci'])}")
    judge = results["judge"]
    if judge:
        win = judge["win_rate"]
        lines.append(
            f"judge: candidate {judge['candidate_wins']}, primary {judge['primary_wins']}, ties {judge['ties']}, "
            f"invalid {judge['invalid']}; candidate win rate {_num(win['estimate'])}  {_ci(win['ci'])}"
        )
    return lines


def _num(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def _ci(ci: list) -> str:
    return "—" if ci[0] is None else f"[{_num(ci[0])}, {_num(ci[1])}]"
