"""The demo's printed shadow-test comparison: every measure's value under the ``ratio`` header."""

from __future__ import annotations

from muse_experiments.experiments.demo.shadow import shadow_lines


def _ratio(estimate, low, high):
    return {"estimate": estimate, "ci": [low, high]}


RESULTS = {
    "pairs": 108,
    "sessions": 108,
    "candidate_failed": 0,
    "dropped": 0,
    "spent_usd": 0.0026,
    "latency_ms": {"primary_p50": 25.3, "candidate_p50": 29.9, "ratio": _ratio(1.18, 1.09, 1.25)},
    "cost_usd_per_call": {"primary": 7.55e-06, "candidate": 7.55e-06, "ratio": _ratio(1.0, 1.0, 1.0)},
    "output_tokens_per_call": {"primary": 9.39, "candidate": 9.39, "ratio": _ratio(1.0, 1.0, 1.0)},
    "tool_call_agreement": {"rate": 0.75, "ci": [0.5, 0.9]},
    "judge": None,
}


def test_the_tool_call_agreement_is_printed_in_the_ratio_column():
    """It was printed right after its name, under ``primary``, its interval under ``candidate``."""
    lines = shadow_lines("shadow-demo", RESULTS)
    header = next(line for line in lines if line.startswith("measure"))
    ratio_end = header.index("ratio") + len("ratio")
    by_name = {line[:24].strip(): line for line in lines[lines.index(header) + 1 :]}
    assert set(by_name) == {
        "latency p50 (ms)",
        "cost per call (USD)",
        "output tokens per call",
        "tool-call agreement",
    }
    assert by_name["tool-call agreement"][:ratio_end].endswith("0.75")
    assert by_name["tool-call agreement"][ratio_end:] == "  [0.5, 0.9]"
    assert by_name["latency p50 (ms)"][:ratio_end].endswith("1.18")
