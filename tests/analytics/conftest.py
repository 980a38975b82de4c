"""Builders for analytics tests: exposures, call records and events written straight to the tables
the SQL reads (the router is exercised elsewhere; here we need exact, known raw rows)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from analytics.models import OutcomeEvent
from muse_experiments.experiments.models import Exposure
from routing.models import CallRecord, CompletionJob
from tests.factories import make_experiment, seed_catalogue

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
_ids = itertools.count()


class Raw:
    """Writes raw rows for one experiment and keeps them for the Python reference computation."""

    def __init__(self, experiment):
        self.experiment = experiment
        self.phase = experiment.phase
        self.endpoints = {v.key: v.endpoint.public_id for v in experiment.variants.select_related("endpoint")}
        self.exposures: dict[str, tuple[str, str, datetime]] = {}
        self.calls: list[dict] = []
        self.events: list[dict] = []

    def expose(self, unit: str, variant: str, *, reason: str = "assigned", at: datetime = T0) -> None:
        Exposure.objects.create(
            experiment=self.experiment, phase=self.phase, unit_id=unit, variant_key=variant, reason=reason
        )
        Exposure.objects.filter(experiment=self.experiment, phase=self.phase, unit_id=unit).update(
            first_exposed_at=at
        )
        self.exposures[unit] = (variant, reason, at)

    def call(
        self,
        unit: str,
        variant: str | None,
        *,
        at: datetime | None = None,
        in_experiment: bool = True,
        status: str = "succeeded",
        reason: str = "assigned",
        served: str | None = None,
        latency_ms: float | None = 100.0,
        ttft_ms: float | None = None,
        cost_usd: str = "0.001",
        input_tokens: int = 10,
        output_tokens: int = 20,
        reasoning_tokens: int = 0,
        tool_calls: int = 0,
    ) -> None:
        n = next(_ids)
        job = CompletionJob.objects.create(session_id=unit, user_id=unit, request={}, status=status)
        endpoint = self.endpoints.get(variant or "", "")
        served = endpoint if served is None and status == "succeeded" else (served or "")
        row = {
            "session_id": unit,
            "user_id": unit,
            "experiment_id": self.experiment.id if in_experiment else None,
            "experiment_key": self.experiment.key if in_experiment else "",
            "phase": self.phase if in_experiment else None,
            "variant_key": (variant or "") if in_experiment else "",
            "unit_id": unit if in_experiment else "",
            "assigned_endpoint": endpoint,
            "served_endpoint": served,
            "reason": reason,
            "status": status,
            "latency_ms": latency_ms if status == "succeeded" else None,
            "ttft_ms": ttft_ms if status == "succeeded" else None,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "reasoning_tokens": reasoning_tokens,
            "cost_usd": Decimal(cost_usd),
            "tool_calls": tool_calls,
        }
        record = CallRecord.objects.create(job=job, **row)
        created = at or T0 + timedelta(seconds=n)
        CallRecord.objects.filter(pk=record.pk).update(created_at=created)
        self.calls.append({**row, "created_at": created})

    def event(self, unit: str, name: str, value: float, *, at: datetime | None = None) -> None:
        at = at or T0 + timedelta(hours=1)
        OutcomeEvent.objects.create(
            event_id=f"ev-{next(_ids)}", name=name, session_id=unit, user_id=unit, value=value, occurred_at=at
        )
        self.events.append({"unit": unit, "name": name, "value": value, "occurred_at": at})


@pytest.fixture
def three_arms(db):
    seed_catalogue()
    from routing.catalogue import avocado_id

    experiment = make_experiment(
        key="ana",
        arms=[
            ("control", avocado_id(14), 1 / 3),
            ("fast", avocado_id(15), 1 / 3),
            ("cheap", "azure/muse-special", 1 / 3),
        ],
    )
    return Raw(experiment)
