"""The demo's adaptive part: a bandit and a progressive rollout, each on its own stream of
sessions, driven in rounds while the platform's schedule (celery beat) updates the bandit's
weights and checks the rollout's guardrails.

The schedule is production's code path with shorter intervals (:data:`.config.SCHEDULE_S`: the
``BANDIT_MINUTE_S``, ``BANDIT_CHECK_INTERVAL_S`` and ``ROLLOUT_CHECK_INTERVAL_S`` settings of the
platform's processes) and a rollout step needs no minimum time (``step_min_minutes`` 0). Each round
sends the bandit's and the rollout's sessions in chunks of ``2 × concurrency``, posting each
chunk's outcomes once its call records are written, then waits (at most ``wait_s``) until the
schedule has looked at all of them: a bandit update and a rollout check that started afterwards.
Updates and checks also run while a round does, as in production: they count the units recorded so
far; the bandit counts those whose outcome is not posted yet as failures (at most a chunk of them),
the rollout check as units without data (a step waits until enough units have data).

What happened is read back for the report: every bandit update (weights, P(best), units per arm)
and the rollout's state and history (``GET /api/v1/rollouts/<key>``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from django.utils import timezone

from ..models import BanditUpdate, Experiment, ExperimentStatus, Rollout
from ..services.lifecycle import experiment_start
from ..services.rollouts import CHECKED_STATES, rollout_start
from . import config, traffic
from .setup import ACTOR

#: Rollout history reasons that are decisions of the scheduled check (not a person's action).
DECISIONS = ("advanced", "completed", "rolled_back_guardrail", "held_kill_switch", "waiting_for_data")


@dataclass
class AdaptiveOutcome:
    """What the adaptive part did: ``rounds`` (per round: sessions answered per stream, whether
    the schedule caught up in time, the rollout's percent after it), every bandit update in
    order (``{"at_s", "slot", "decision", "weights", "probability_best", "units", "winner"}``,
    ``at_s`` seconds since the bandit started), the bandit's final status and phase count, the
    rollout's detail
    as the API returns it, and ``misrouted``: sessions an experiment other than their stream's
    served (0 unless the demo's routing set-up is broken)."""

    bandit_key: str
    rollout_key: str
    rounds: list[dict[str, Any]] = field(default_factory=list)
    bandit_updates: list[dict[str, Any]] = field(default_factory=list)
    bandit_status: str = ""
    bandit_phases: int = 0
    rollout: dict[str, Any] = field(default_factory=dict)
    misrouted: int = 0

    @property
    def weight_changes(self) -> int:
        """Bandit updates that changed the weights: each opened a phase after the first."""
        return max(self.bandit_phases - 1, 0)

    @property
    def rollout_decisions(self) -> list[dict[str, Any]]:
        return [h for h in self.rollout.get("history", []) if h["reason"] in DECISIONS]


def adaptive_start(*, bandit: Experiment, rollout: Rollout) -> None:
    """Start the bandit (equal weights) and the rollout (its first step)."""
    experiment_start(experiment=bandit, actor=ACTOR)
    rollout_start(rollout=rollout, actor=ACTOR)


def wait_for_schedule(
    *,
    bandit: Experiment,
    rollout: Rollout,
    since,
    timeout_s: float,
    alive: Callable[[], None],
    nudge: Callable[[], None] | None = None,
) -> bool:
    """Wait until a bandit update and a rollout check that started at or after ``since`` are
    written (or the bandit stopped or declared a winner / the rollout is no longer checked). ``nudge`` (tests: no beat
    runs) is called every second while waiting. Returns False when ``timeout_s`` passed first."""
    deadline = time.monotonic() + timeout_s
    next_nudge = 0.0
    while True:
        alive()
        bandit_done = (
            not _bandit_deciding(bandit)
            or BanditUpdate.objects.filter(experiment_id=bandit.pk, at__gte=since).exists()
        )
        state, checked = Rollout.objects.values_list("state", "last_checked_at").get(pk=rollout.pk)
        rollout_done = state not in CHECKED_STATES or (checked is not None and checked >= since)
        if bandit_done and rollout_done:
            return True
        if time.monotonic() > deadline:
            return False
        if nudge is not None and time.monotonic() >= next_nudge:
            nudge()
            next_nudge = time.monotonic() + 1.0
        time.sleep(0.25)


def _bandit_deciding(bandit: Experiment) -> bool:
    """True while the bandit runs and has not declared a winner (after which its weights no
    longer change: the winner gets the traffic and no update is due)."""
    status = Experiment.objects.values_list("status", flat=True).get(pk=bandit.pk)
    return (
        status == ExperimentStatus.RUNNING
        and not BanditUpdate.objects.filter(experiment_id=bandit.pk).exclude(winner="").exists()
    )


def adaptive_run(
    base: str,
    key: str,
    *,
    bandit: Experiment,
    rollout: Rollout,
    alive: Callable[[], None],
    rounds: int = config.ROUNDS,
    bandit_sessions: int = config.BANDIT_SESSIONS_PER_ROUND,
    rollout_sessions: int = config.ROLLOUT_SESSIONS_PER_ROUND,
    concurrency: int = 16,
    wait_s: float = config.ROUND_WAIT_S,
    nudge: Callable[[], None] | None = None,
    write: Callable[[str], None] = lambda _: None,
) -> AdaptiveOutcome:
    """Run ``rounds`` rounds (module docstring) against the platform at ``base`` with API key
    ``key`` (scopes completions, events, analytics:read); both experiments must be started
    (:func:`adaptive_start`). A stream stops once its experiment has nothing left to decide
    (the bandit declared a winner; the rollout completed or rolled back). Returns the
    :class:`AdaptiveOutcome`. Raises ``httpx.HTTPStatusError`` if the API refuses the events."""
    out = AdaptiveOutcome(bandit_key=bandit.key, rollout_key=rollout.key)
    chunk = max(2 * concurrency, 1)
    expected = {config.BANDIT_STREAM: bandit.key, config.ROLLOUT_STREAM: rollout.experiment.key}
    for n in range(1, rounds + 1):
        bandit_running = _bandit_deciding(bandit)
        rollout_live = Rollout.objects.get(pk=rollout.pk).state in CHECKED_STATES
        plan = {config.BANDIT_STREAM: bandit_sessions if bandit_running else 0}
        plan[config.ROLLOUT_STREAM] = rollout_sessions if rollout_live else 0
        if not any(plan.values()):
            break
        counts = dict.fromkeys((s for s, sessions in plan.items() if sessions), 0)
        for stream, sessions in plan.items():
            for start in range(0, sessions, chunk):
                sent = traffic.drive(
                    base, key, min(chunk, sessions - start), concurrency, stream=stream, prefix=stream
                )
                got = [s for s in sent if s]
                out.misrouted += sum(1 for s in got if s.get("experiment") != expected[stream])
                counts[stream] += len(got)
                traffic.wait_records_written(alive)
                traffic.post_events(base, key, got)
        since = timezone.now()
        on_time = wait_for_schedule(
            bandit=bandit, rollout=rollout, since=since, timeout_s=wait_s, alive=alive, nudge=nudge
        )
        percent = Rollout.objects.values_list("percent", flat=True).get(pk=rollout.pk)
        out.rounds.append({"round": n, "sessions": counts, "on_time": on_time, "rollout_percent": percent})
        write(
            f"  round {n}: "
            + ", ".join(f"{c} {s} sessions" for s, c in counts.items())
            + ("" if on_time else f"; the schedule had not caught up after {wait_s:.0f}s")
        )
    bandit.refresh_from_db()
    out.bandit_status, out.bandit_phases = bandit.status, bandit.phase
    out.bandit_updates = [
        {
            "at_s": (u.at - bandit.started_at).total_seconds(),
            "slot": u.slot,
            "decision": u.decision,
            "weights": u.weights,
            "probability_best": u.probability_best,
            "units": u.units,
            "winner": u.winner,
        }
        for u in BanditUpdate.objects.filter(experiment=bandit).order_by("slot")
    ]
    response = httpx.get(
        f"{base}/api/v1/rollouts/{rollout.key}", headers={"Authorization": f"Bearer {key}"}, timeout=60
    )
    response.raise_for_status()
    out.rollout = response.json()
    return out
