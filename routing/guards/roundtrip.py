"""One Redis round trip for checks that belong to different modules.

An attempt's guards (:func:`routing.pipeline.attempts._guard`) ask three shared stores before every
upstream call: is the endpoint cooling (:mod:`routing.guards.cooling`), is a concurrency slot free
(:mod:`routing.guards.concurrency`), does the circuit breaker let the call through
(:mod:`routing.guards.circuit`). Each module *queues* its command on one non-transactional pipeline and
returns a :class:`Pending`; :func:`run` sends them together and hands each module its own reply
to read. Each module keeps its own rules, including how it fails open when Redis is down (a
reply may be the exception its command raised, or the one the whole round trip raised).

Scripts are sent with ``EVAL``: redis-py's ``Script`` objects in a pipeline ask
``SCRIPT EXISTS`` first, a round trip of its own on every execute.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Pending(Generic[T]):
    """A check waiting for its reply: ``read(reply) -> T``. ``queued`` says whether it added a
    command to the pipeline (False: it answers without asking Redis, ``read`` gets None)."""

    read: Callable[[Any], T]
    queued: bool = True


def pipeline(client):
    """A non-transactional pipeline on ``client``."""
    return client.pipeline(transaction=False)


def run(pipe, pendings: Sequence[Pending[Any]]) -> list[Any]:
    """Execute ``pipe`` once (when anything was queued) and return each pending check's answer,
    in order. A command that failed gives its reader the exception; if the round trip itself
    failed, every queued reader gets that exception. Readers' own exceptions propagate."""
    replies: list[Any] = []
    if any(p.queued for p in pendings):
        try:
            replies = list(pipe.execute(raise_on_error=False))
        except Exception as exc:  # noqa: BLE001 - each reader decides how to fail
            replies = [exc] * sum(p.queued for p in pendings)
    it = iter(replies)
    return [p.read(next(it) if p.queued else None) for p in pendings]
