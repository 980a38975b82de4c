"""The demo's printed tables: the four-arm experiment's results (from the results API), and the
bandit's and the rollout's outcomes (:class:`.adaptive.AdaptiveOutcome`). Each takes ``write``,
a function printing one line."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import httpx

from .. import selectors
from ..models import Experiment
from . import config
from .adaptive import AdaptiveOutcome

Write = Callable[[str], None]


def pct(value: float | None) -> str:
    """A relative change as ``+1.2%`` (``—`` for None)."""
    return "—" if value is None else f"{value * 100:+.1f}%"


def print_table(results: dict, write: Write, labels: dict[str, str] | None = None) -> None:
    """Print the task_success table of a results API answer, models by version label
    (``labels``: public id → label; read from the catalogue when not given)."""
    if labels is None:
        labels = selectors.model_labels()
    success = next(m for m in results["metrics"] if m["name"] == "task_success")
    latency = next(m for m in results["metrics"] if m["name"] == "latency_ms")
    lat = {v["key"]: v["mean"] for v in latency["variants"]}
    cmp = {c["variant"]: c for c in success["comparisons"]}
    srm = results["srm"]
    write(f"\nResults: {results['experiment']} (phase {results['phase']}), metric task_success, 95% CI")
    header = f"{'variant':<20}{'model':<20}{'units':>7}{'success':>9}{'latency':>10}{'lift':>9}{'95% CI (relative)':>22}{'p-value':>9}"
    write(header)
    write("-" * len(header))
    for v, s in zip(results["variants"], success["variants"], strict=True):
        c = cmp.get(v["key"])
        rate = f"{s['mean'] * 100:.1f}%" if s["mean"] is not None else "—"
        latency_ms = f"{lat[v['key']]:.0f}ms" if lat.get(v["key"]) is not None else "—"
        if c is None:
            lift, ci, p = "control", "", ""
        else:
            lift = pct(c["relative_lift"])
            ci = f"[{pct(c['relative_ci'][0])}, {pct(c['relative_ci'][1])}]" if c["relative_ci"] else "—"
            p = f"{c['p_value']:.4f}" if c["p_value"] is not None else "—"
        write(
            f"{v['key']:<20}{labels.get(v['endpoint'], v['endpoint']):<20}{v['units']:>7}{rate:>9}{latency_ms:>10}{lift:>9}{ci:>22}{p:>9}"
        )
    p_srm = srm["p_value"]
    verdict = "MISMATCH — do not trust" if srm["flagged"] else "no mismatch"
    write(
        f"SRM check: chi-square p = {p_srm:.4f} ({verdict})"
        if p_srm is not None
        else f"SRM check: {srm['status']}"
    )


def print_bandit(outcome: AdaptiveOutcome, write: Write) -> None:
    """Every update of the bandit: when, what it decided, weights, P(best) and units per arm."""
    arms = [k for k, _, _ in config.BANDIT_ARMS]
    truth = ", ".join(f"{k} {config.TRUE_SUCCESS.get(k, config.DEFAULT_SUCCESS):.0%}" for k in arms)
    write(
        f"\nBandit {outcome.bandit_key}: Thompson sampling on task_success (true rates: {truth}); "
        f"an update every {config.SCHEDULE_S:g} s (the demo's schedule minute)"
    )
    cols = "".join(f"{k:>13}" for k in arms)
    header = f"{'at':>6}  {'decision':<10}{'weights':<8}{cols}  |  P(best){cols}  |  units{cols}"
    write(header)
    write("-" * len(header))
    for u in outcome.bandit_updates:
        weights = "".join(f"{u['weights'].get(k, 0) * 100:>12.1f}%" for k in arms)
        p_best = "".join(f"{u['probability_best'].get(k, 0):>13.3f}" for k in arms)
        units = "".join(f"{u['units'].get(k, 0):>13d}" for k in arms)
        write(f"{u['at_s']:>5.0f}s  {u['decision']:<10}{'':<8}{weights}  |  {'':7}{p_best}  |  {'':5}{units}")
    winner = next((u["winner"] for u in outcome.bandit_updates if u["winner"]), "")
    write(
        f"{len(outcome.bandit_updates)} updates, {outcome.weight_changes} changed the weights; "
        + (
            f"winner {winner} (it now gets the traffic; the other arms keep their floor)"
            if winner
            else f"no winner yet ({outcome.bandit_status})"
        )
    )


def print_rollout(outcome: AdaptiveOutcome, write: Write, labels: dict[str, str] | None = None) -> None:
    """The rollout's state, step and history (every decision with its reason and message)."""
    if labels is None:
        labels = selectors.model_labels()
    r = outcome.rollout
    steps = " → ".join(f"{s:g}%" for s in r["steps"])
    write(
        f"\nRollout {r['key']}: {labels.get(r['model'], r['model'])} replacing "
        f"{labels.get(r['replaces'], r['replaces'])}, steps {steps}, at least {r['step_min_units']} "
        f"candidate units a step; guardrails {', '.join(r['guardrails'])}; checked every {config.SCHEDULE_S:g} s"
    )
    write(
        f"state {r['state']}, step {r['step'] + 1} of {len(r['steps'])}, {r['percent']:g}% on the candidate"
    )
    for h in r["history"]:
        move = f"{h['from_percent']:g}% → {h['to_percent']:g}%"
        write(f"  {h['at'][11:19]}  {move:<13}{h['reason']:<23}{h['message'] or _evidence(h['evidence'])}")
    if outcome.misrouted:
        write(f"WARNING: {outcome.misrouted} adaptive sessions were served by another experiment")


def _evidence(evidence: dict) -> str:
    """A decision's evidence in a line: the step's candidate units and each guardrail's test."""
    if not evidence.get("guardrails"):
        return ""
    tests = ", ".join(
        f"{g['metric']} {g['status']}"
        + (f" p={g['always_valid_p']:.2f}" if g.get("always_valid_p") is not None else "")
        for g in evidence["guardrails"]
    )
    return f"{evidence.get('candidate_units', 0)} candidate units; {tests}"


def compute_phases(base: str, key: str, experiments: Iterable[Experiment]) -> int:
    """Compute a results snapshot of every phase of ``experiments`` through the results API
    (``?refresh=1&phase=N``, which also refreshes the routing-health rollup), so the pages the
    demo prints show the bandit's and the rollout's phases at once instead of after the scheduled
    computation. Returns how many snapshots were computed; raises ``httpx.HTTPStatusError``."""
    computed = 0
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120) as client:
        for experiment in experiments:
            experiment.refresh_from_db(fields=["phase"])
            for phase in range(1, (experiment.phase or 0) + 1):
                answer = client.get(
                    f"/api/v1/experiments/{experiment.key}/results", params={"refresh": "1", "phase": phase}
                )
                answer.raise_for_status()
                computed += 1
    return computed
