"""Retry policy for upstream calls (pure: no Django import; the router builds it from settings).

Which failures are retried on the *same* endpoint is decided by the error tree
(:mod:`routing.providers.errors`): ``ProviderError.retryable`` is true for 429, 5xx, 529,
timeouts, connection resets and malformed bodies, and false for 4xx client errors (incl.
401/403) and for a stream that already delivered content.

Delay before retry ``n`` (``n = 0`` is the first retry):

* the upstream sent ``retry-after`` within ``retry_after_cap_s``: that many seconds, no jitter
  (the server told us when; waiting less is pointless);
* a ``retry-after`` *beyond* the cap (:meth:`RetryPolicy.outlasts`) is not retried at all: a
  retry before the upstream's own deadline cannot succeed, so the caller falls back at once and
  parks the endpoint until then (:mod:`routing.guards.cooling`);
* otherwise "full jitter" (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015):
  ``uniform(0, min(cap_ms, base_ms * 2**n))`` milliseconds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to wait between attempts on one endpoint.

    ``max_retries``: retries after the first attempt (0 = one attempt per endpoint).
    ``base_ms`` / ``cap_ms``: exponential backoff base and cap, milliseconds.
    ``retry_after_cap_s``: most seconds we wait for an upstream's ``retry-after``.
    """

    max_retries: int = 2
    base_ms: float = 200.0
    cap_ms: float = 5000.0
    retry_after_cap_s: float = 10.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if self.base_ms < 0 or self.cap_ms < 0 or self.retry_after_cap_s < 0:
            raise ValueError("backoff base, cap and retry-after cap must be >= 0")

    @property
    def max_attempts(self) -> int:
        """Attempts per endpoint, including the first."""
        return self.max_retries + 1

    def outlasts(self, retry_after_s: float | None) -> bool:
        """True when the upstream asks for more seconds than this policy waits: do not retry the
        endpoint, fall back now and let it cool until then."""
        return retry_after_s is not None and retry_after_s > self.retry_after_cap_s

    def delay_s(
        self, retry_index: int, retry_after_s: float | None, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait before retry ``retry_index`` (0-based) given the failure's retry-after."""
        if retry_after_s is not None and retry_after_s >= 0:
            return min(float(retry_after_s), self.retry_after_cap_s)
        ceiling_ms = min(self.cap_ms, self.base_ms * (2**retry_index))
        return (rng or random).uniform(0.0, ceiling_ms) / 1000.0
