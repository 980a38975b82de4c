"""Fixtures for transcripts: the seeded catalogue, finished jobs and scoped API clients."""

from __future__ import annotations

import uuid

import pytest
from rest_framework.test import APIClient

from routing.catalogue import avocado_id
from routing.models import CompletionJob
from tests.factories import api_key, seed_catalogue

AVOCADO = avocado_id(15)
AVOCADO_14 = avocado_id(14)
AZURE = "azure/muse-special"
CLAUDE = "anthropic/claude-sonnet-5-5"
KIND = {AVOCADO: "native", AVOCADO_14: "native", AZURE: "azure_openai", CLAUDE: "anthropic"}


@pytest.fixture
def catalogue_seeded(db):
    return seed_catalogue()


def make_job(session_id: str, user_id: str, messages: list[dict] | None = None, tools=None) -> CompletionJob:
    return CompletionJob.objects.create(
        id=uuid.uuid4(),
        session_id=session_id,
        user_id=user_id,
        request={
            "messages": messages or [{"role": "user", "content": f"hello from {session_id}"}],
            "tools": tools or [],
        },
    )


def public_result(text: str = "done", tool_calls=None) -> dict:
    return {
        "endpoint_id": "x",
        "upstream_model": "x",
        "text": text,
        "tool_calls": tool_calls or [],
        "finish_reason": "tool_calls" if tool_calls else "stop",
        "usage": {"input_tokens": 10, "output_tokens": 2, "reasoning_tokens": 0, "vendor": {}},
        "cost_usd": "0.0001",
        "latency_ms": 12.0,
        "time_to_first_token_ms": None,
        "upstream_request_id": "req_1",
    }


def record_turn(session_id: str, user_id: str, model: str, **kw):
    """Write one turn the way the router will (``transcript_record_turn`` after a success)."""
    from routing.transcripts.services import transcript_record_turn

    job = make_job(session_id, user_id, kw.pop("messages", None), kw.pop("tools", None))
    return transcript_record_turn(
        job=job,
        served_endpoint_public_id=model,
        provider_kind=KIND[model],
        result_public=kw.pop("result", None) or public_result(),
        experiment_key=kw.pop("experiment_key", "exp"),
        variant_key=kw.pop("variant_key", "control"),
    )


def scoped_client(*scopes: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key(list(scopes))}")
    return client
