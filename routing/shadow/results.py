"""A shadow test's comparison (``GET /api/v1/shadow-tests/{key}/results``, the results page and
its exports), read from its :class:`~muse_experiments.experiments.models.ShadowPair` rows and its
Redis counters; the statistics are :mod:`analytics.stats.shadow` (clustered by session).

Shape (latencies ms, costs USD, tokens as billed)::

    {"pairs", "sessions", "candidate_failed", "dropped", "spent_usd",
     "latency_ms": {"primary_p50", "candidate_p50", "ratio": {"estimate", "ci": [lo, hi]}},
     "cost_usd_per_call": {"primary", "candidate", "ratio": {...}},
     "output_tokens_per_call": {"primary", "candidate", "ratio": {...}},
     "tool_call_agreement": {"rate", "ci": [lo, hi]},
     "judge": {"candidate_wins", "primary_wins", "ties", "invalid", "not_judged",
               "win_rate": {"estimate", "ci"}} | null}

``pairs``: primary calls mirrored (the candidate answered or failed); ``candidate_failed``: of
those, where the candidate failed (left out of the comparisons); ``dropped``: shadow calls not
made (backlog full, host busy, budget spent, killed, opted out, ...); ``spent_usd``: candidate and
judge calls, all days. The win rate counts a tie as half a win, over valid verdicts;
``not_judged``: pairs the candidate answered that have no verdict (the judge call failed or was
not made: budget, host busy, kill switch, opt-out; those reasons are counted as ``judge_<reason>``
in the test's drop counters, not in ``dropped``); ``judge`` is null for a test without a judge.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from analytics.stats.shadow import clustered_rate, median_ratio, ratio_of_means
from muse_experiments.experiments.models import ShadowPair, ShadowTest

from .budget import dropped_counts
from .run import tool_calls_agree

FIELDS = (
    "session_id",
    "candidate_ok",
    "primary_latency_ms",
    "candidate_latency_ms",
    "primary_cost_usd",
    "candidate_cost_usd",
    "primary_output_tokens",
    "candidate_output_tokens",
    "primary_tool_calls",
    "candidate_tool_calls",
    "judge_verdict",
    "judge_cost_usd",
)

#: What a verdict adds to the candidate's wins (a tie is half a win); invalid ones count nowhere.
_WIN = {"candidate": 1.0, "tie": 0.5, "primary": 0.0}


def _per_session(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[r["session_id"]].append(r)
    return by


def _means(rows, primary: str, candidate: str) -> dict[str, Any]:
    sessions = _per_session(rows)
    x = [sum(float(r[candidate]) for r in rs) for rs in sessions.values()]
    y = [sum(float(r[primary]) for r in rs) for rs in sessions.values()]
    n = len(rows)
    return {
        "primary": sum(y) / n if n else None,
        "candidate": sum(x) / n if n else None,
        "ratio": ratio_of_means(x, y).to_dict(),
    }


def shadow_results(test: ShadowTest, *, n_boot: int = 1000) -> dict[str, Any]:
    """The test's comparison in the shape of the module docstring (one query for the pairs)."""
    rows = list(ShadowPair.objects.filter(test=test).order_by("id").values(*FIELDS))
    ok = [r for r in rows if r["candidate_ok"]]
    sessions = _per_session(ok)
    spent = sum(float(r["candidate_cost_usd"]) + float(r["judge_cost_usd"]) for r in rows)
    latency = median_ratio(
        [[r["candidate_latency_ms"] for r in rs] for rs in sessions.values()],
        [[r["primary_latency_ms"] for r in rs] for rs in sessions.values()],
        n_boot=n_boot,
    )
    agree = clustered_rate(
        [
            sum(tool_calls_agree(r["primary_tool_calls"], r["candidate_tool_calls"]) for r in rs)
            for rs in sessions.values()
        ],
        [len(rs) for rs in sessions.values()],
    )
    return {
        "pairs": len(rows),
        "sessions": len(_per_session(rows)),
        "candidate_failed": len(rows) - len(ok),
        "dropped": sum(
            n for reason, n in dropped_counts(test.key).items() if not reason.startswith("judge_")
        ),
        "spent_usd": round(spent, 8),
        "latency_ms": {
            "primary_p50": float(np.median([r["primary_latency_ms"] for r in ok])) if ok else None,
            "candidate_p50": float(np.median([r["candidate_latency_ms"] for r in ok])) if ok else None,
            "ratio": latency.to_dict(),
        },
        "cost_usd_per_call": _means(ok, "primary_cost_usd", "candidate_cost_usd"),
        "output_tokens_per_call": _means(ok, "primary_output_tokens", "candidate_output_tokens"),
        "tool_call_agreement": {"rate": agree.estimate, "ci": [agree.lo, agree.hi]},
        "judge": _judge(ok) if test.judge_id else None,
    }


def _judge(rows: list[dict[str, Any]]) -> dict[str, Any]:
    counts = {
        v: sum(r["judge_verdict"] == v for r in rows) for v in ("candidate", "primary", "tie", "invalid")
    }
    valid = _per_session([r for r in rows if r["judge_verdict"] in _WIN])
    win = clustered_rate(
        [sum(_WIN[r["judge_verdict"]] for r in rs) for rs in valid.values()],
        [len(rs) for rs in valid.values()],
    )
    return {
        "candidate_wins": counts["candidate"],
        "primary_wins": counts["primary"],
        "ties": counts["tie"],
        "invalid": counts["invalid"],
        "not_judged": sum(not r["judge_verdict"] for r in rows),
        "win_rate": win.to_dict(),
    }


def results_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The comparison flattened to one row per measure (``measure``, ``primary``, ``candidate``,
    ``estimate``, ``ci_low``, ``ci_high``): what the CSV/JSON export and the page's table show."""
    lat, cost, tok = results["latency_ms"], results["cost_usd_per_call"], results["output_tokens_per_call"]
    agree = results["tool_call_agreement"]
    rows = [
        ("latency_p50_ratio", lat["primary_p50"], lat["candidate_p50"], lat["ratio"]),
        ("cost_usd_per_call_ratio", cost["primary"], cost["candidate"], cost["ratio"]),
        ("output_tokens_per_call_ratio", tok["primary"], tok["candidate"], tok["ratio"]),
        ("tool_call_agreement", None, None, {"estimate": agree["rate"], "ci": agree["ci"]}),
    ]
    if results["judge"] is not None:
        rows.append(("judge_win_rate", None, None, results["judge"]["win_rate"]))
    return [
        {
            "measure": m,
            "primary": p,
            "candidate": c,
            "estimate": r["estimate"],
            "ci_low": r["ci"][0],
            "ci_high": r["ci"][1],
        }
        for m, p, c, r in rows
    ]
