"""The retry policy: full-jitter exponential backoff and capped retry-after (pure, no Django)."""

from __future__ import annotations

import random

import pytest

from routing.pipeline.retry import RetryPolicy


def test_full_jitter_stays_within_the_exponential_ceiling_and_the_cap():
    policy = RetryPolicy(max_retries=5, base_ms=100, cap_ms=1000)
    rng = random.Random(7)
    for retry, ceiling_s in [(0, 0.1), (1, 0.2), (2, 0.4), (3, 0.8), (4, 1.0), (9, 1.0)]:
        delays = [policy.delay_s(retry, None, rng) for _ in range(2000)]
        assert min(delays) >= 0 and max(delays) <= ceiling_s
        assert max(delays) > 0.9 * ceiling_s  # the whole range is used (full jitter)
        assert sum(delays) / len(delays) == pytest.approx(ceiling_s / 2, rel=0.08)


def test_retry_after_is_honoured_exactly_up_to_the_cap():
    policy = RetryPolicy(retry_after_cap_s=10)
    assert policy.delay_s(0, 2.5) == 2.5
    assert policy.delay_s(3, 0.0) == 0.0
    assert policy.delay_s(0, 120) == 10


def test_max_attempts_counts_the_first_try():
    assert RetryPolicy(max_retries=0).max_attempts == 1
    assert RetryPolicy(max_retries=2).max_attempts == 3


@pytest.mark.parametrize("kwargs", [{"max_retries": -1}, {"base_ms": -1}, {"retry_after_cap_s": -0.1}])
def test_negative_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)
