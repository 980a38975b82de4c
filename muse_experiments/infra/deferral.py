"""Work that may wait until the end of a block: :func:`defer` inside a :func:`run_deferred` block.

What it buys: whatever is deferred is off the block's path. The worker wraps a job's serving and
recording in one block, so a successful attempt's circuit-breaker report and slot release run
after the answer is handed back: one Redis round trip less before every answer
(``bench/bench_stages.py``; figures in bench/README.md).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger(__name__)

_state = threading.local()


@contextlib.contextmanager
def run_deferred() -> Iterator[None]:
    """Collect the calls :func:`defer` is given in this thread while the block runs and make them,
    in order, when it exits (normally or by an exception). An exception of a deferred call is
    logged (``muse_experiments.infra.deferral``, with its traceback) and the next call still runs;
    none is raised. Blocks nest: an inner block runs its own calls when it exits.
    """
    outer = getattr(_state, "pending", None)
    pending: list[tuple[Callable[..., Any], tuple]] = []
    _state.pending = pending
    try:
        yield
    finally:
        _state.pending = outer
        for fn, args in pending:
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - the block's work is done; a deferred call must not undo it
                log.exception("deferred call failed (%s)", getattr(fn, "__qualname__", fn))


def defer(fn: Callable[..., Any], *args: Any) -> None:
    """``fn(*args)`` when the enclosing :func:`run_deferred` block of this thread exits, or now
    (raising what it raises) outside any block."""
    pending = getattr(_state, "pending", None)
    if pending is None:
        fn(*args)
    else:
        pending.append((fn, args))
