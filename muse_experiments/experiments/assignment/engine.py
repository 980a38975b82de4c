"""Pure experiment-assignment engine: which variant (model endpoint) serves a unit.

Built on the GrowthBook primitives of :mod:`muse_experiments.experiments.assignment.growthbook`; the
configuration it evaluates is in :mod:`~muse_experiments.experiments.assignment.specs`, its vectorised
twin in :mod:`~muse_experiments.experiments.assignment.vectorised`. Imports only
the standard library and numpy (no Django), so it can run in the proxy, in Celery workers and in
offline analysis alike.

Evaluation of one experiment for one unit (first matching step decides; reason codes in brackets):

1. routing scope ``match`` does not match the call's attributes          [``not_in_scope``]
2. the unit id is pinned in ``forced`` (QA pin)                          [``forced``]
3. global holdout: ``hash(holdout.seed, user_id, 2) < holdout.share``    [``holdout``]
4. the experiment's unit id (session or user) is empty                    [``missing_unit_id``]
5. layer: ``in_namespace(unit_id, (layer.key, start, end))`` is false     [``not_in_layer``]
6. targeting: ``eval_condition(attributes, condition)`` is false           [``not_targeted``]
7. the caller's sticky map holds ``(experiment id, phase) -> variant``    [``sticky``]
8. ``n = hash(seed, unit_id, 2)``; ``choose_variation(n, ranges)``        [``assigned`` / ``not_in_coverage``]

``forced`` decisions are flagged (``Decision.is_forced``) so analytics can exclude QA traffic.
A sticky entry naming a variant that no longer exists is ignored (trace ``sticky_stale``).
Sticky pins the variant *within* the experiment only: scope, layer slice and targeting are checked
first, so a sticky unit is never served by an experiment outside them (GrowthBook evaluates its
sticky buckets after the targeting conditions too).

Experiment order (for :func:`route` and for the list returned by :func:`assign`) is ascending
``ExperimentSpec.id`` -- oldest experiment first -- independent of the order of the snapshot tuple.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from muse_experiments.experiments.assignment.growthbook.hashing import (
    FNV_OFFSET_BASIS,
    FNV_PRIME,
    fnv1a32,
    fnv1a32_continue,
)
from muse_experiments.experiments.assignment.specs import (
    EMPTY_MAPPING,
    ConfigSnapshot,
    Decision,
    ExperimentSpec,
    HoldoutSpec,
    LayerSpec,
)

_MASK32 = 0xFFFFFFFF


def _v2_bucket(seed_state: int, unit_id: str) -> float:
    """``hash(seed, unit_id, 2)`` from the precomputed FNV state of ``seed``."""
    n = fnv1a32_continue(seed_state, unit_id)
    h = FNV_OFFSET_BASIS
    for c in str(n).encode("ascii"):
        h = (h ^ c) * FNV_PRIME & _MASK32
    return (h % 10000) / 10000


def _layer_hash(unit_id: str, layer: LayerSpec) -> float:
    """``hash("__" + layer.key, unit_id, layer.hash_version)``."""
    if layer.hash_version == 2:
        return _v2_bucket(layer._seed_state, unit_id)  # type: ignore[attr-defined]
    return (fnv1a32_continue(fnv1a32(unit_id), layer._suffix) % 1000) / 1000  # type: ignore[attr-defined]


def bucket(experiment: ExperimentSpec, unit_id: str) -> int:
    """The hash-only assignment of ``unit_id``: layer, coverage and weights, nothing else.

    Returns the variant index, or ``-1`` when the unit is outside the layer slice or the coverage
    (or ``unit_id`` is empty). No targeting, forcing, stickiness or holdout: those need per-call
    data. This is the scalar twin of :func:`assign_many`.
    """
    if not unit_id:
        return -1
    layer = experiment.layer
    if layer is not None and not (layer.start <= _layer_hash(unit_id, layer) < layer.end):  # type: ignore[attr-defined]
        return -1
    n = _v2_bucket(experiment._seed_state, unit_id)  # type: ignore[attr-defined]
    for i, (a, b) in enumerate(experiment._ranges):  # type: ignore[attr-defined]
        if a <= n < b:
            return i
    return -1


def _in_holdout(holdout: HoldoutSpec | None, session_id: str, user_id: str) -> bool:
    if holdout is None or holdout.share <= 0.0:
        return False
    uid = user_id or session_id
    if not uid:
        return False
    return _v2_bucket(holdout._seed_state, uid) < holdout.share  # type: ignore[attr-defined]


def _decide(
    exp: ExperimentSpec,
    session_id: str,
    user_id: str,
    attributes: Mapping[str, Any],
    sticky: Mapping[tuple[int, int], str] | None,
    holdout_flag: Callable[[], bool],
    layer_cache: dict[tuple[str, int, str], float],
) -> tuple[str, int | None, float | None, str | None]:
    """Evaluate one experiment -> (reason, variant index or None, bucket or None, extra trace)."""
    if exp._has_match and not exp._match_fn(attributes):  # type: ignore[attr-defined]
        return "not_in_scope", None, None, None
    unit_id = session_id if exp.unit_type == "session" else user_id
    if exp.forced and unit_id in exp.forced:
        return "forced", exp._index[exp.forced[unit_id]], None, None  # type: ignore[attr-defined]
    if holdout_flag():
        return "holdout", None, None, None
    if not unit_id:
        return "missing_unit_id", None, None, None
    layer = exp.layer
    if layer is not None:
        ck = (layer.key, layer.hash_version, exp.unit_type)
        ln = layer_cache.get(ck)
        if ln is None:
            ln = layer_cache[ck] = _layer_hash(unit_id, layer)  # type: ignore[attr-defined]
        if not (layer.start <= ln < layer.end):
            return "not_in_layer", None, None, None
    if exp._has_condition and not exp._condition_fn(attributes):  # type: ignore[attr-defined]
        return "not_targeted", None, None, None
    extra = None
    if sticky:
        vkey = sticky.get((exp.id, exp.phase))
        if vkey is not None:
            idx = exp._index.get(vkey)  # type: ignore[attr-defined]
            if idx is not None:
                return "sticky", idx, None, None
            extra = f"{exp.key}:sticky_stale"
    n = _v2_bucket(exp._seed_state, unit_id)  # type: ignore[attr-defined]
    for i, (a, b) in enumerate(exp._ranges):  # type: ignore[attr-defined]
        if a <= n < b:
            return "assigned", i, n, extra
    return "not_in_coverage", None, n, extra


def _make_decision(
    exp: ExperimentSpec, reason: str, idx: int | None, n: float | None, trace: tuple[str, ...]
) -> Decision:
    if idx is None:
        return Decision(exp.key, exp.id, exp.phase, None, None, None, EMPTY_MAPPING, False, reason, trace, n)
    v = exp.variants[idx]
    return Decision(
        exp.key, exp.id, exp.phase, v.key, idx, v.endpoint_id, v.overrides, True, reason, trace, n
    )


def _holdout_memo(holdout: HoldoutSpec | None, session_id: str, user_id: str) -> Callable[[], bool]:
    cell: list[bool] = []

    def flag() -> bool:
        if not cell:
            cell.append(_in_holdout(holdout, session_id, user_id))
        return cell[0]

    return flag


def assign(
    snapshot: ConfigSnapshot,
    *,
    session_id: str,
    user_id: str,
    attributes: Mapping[str, Any] | None = None,
    sticky: Mapping[tuple[int, int], str] | None = None,
) -> list[Decision]:
    """Evaluate every experiment of ``snapshot`` for one unit.

    Args:
        snapshot: the configuration.
        session_id: session id (hashed by ``unit_type="session"`` experiments).
        user_id: user id (hashed by ``unit_type="user"`` experiments and by the holdout).
        attributes: targeting/scope attributes (JSON-like mapping).
        sticky: previously exposed variants, ``(experiment id, phase) -> variant key``.

    Returns:
        One :class:`Decision` per experiment, in routing order (ascending experiment id); each
        decision's ``trace`` is its own ``("<key>:<reason>", ...)``.
    """
    attrs = attributes if attributes is not None else EMPTY_MAPPING
    holdout_flag = _holdout_memo(snapshot.holdout, session_id, user_id)
    layer_cache: dict[tuple[str, int, str], float] = {}
    out: list[Decision] = []
    for exp in snapshot._ordered:  # type: ignore[attr-defined]
        reason, idx, n, extra = _decide(exp, session_id, user_id, attrs, sticky, holdout_flag, layer_cache)
        trace = (extra, f"{exp.key}:{reason}") if extra else (f"{exp.key}:{reason}",)
        out.append(_make_decision(exp, reason, idx, n, trace))
    return out


def route(
    snapshot: ConfigSnapshot,
    *,
    session_id: str,
    user_id: str,
    attributes: Mapping[str, Any] | None = None,
    sticky: Mapping[tuple[int, int], str] | None = None,
) -> Decision:
    """The single decision that picks the model for this call.

    Walks the experiments in ascending id order and returns the first one that includes the unit
    (``assigned``, ``sticky`` or ``forced``); experiments whose scope does not match are skipped.
    If none includes the unit, returns a Decision with ``in_experiment=False``, no experiment,
    and reason ``holdout`` (the unit is held out and some in-scope experiment exists) or
    ``no_experiment``. ``trace`` lists every experiment considered, in order; experiments whose
    flat scope (``{"attr": "literal", ...}``) cannot match are skipped via an index and do not
    appear in it (experiments with other scopes are evaluated and traced as ``not_in_scope``).

    Arguments as for :func:`assign`.
    """
    attrs = attributes if attributes is not None else EMPTY_MAPPING
    holdout_flag = _holdout_memo(snapshot.holdout, session_id, user_id)
    layer_cache: dict[tuple[str, int, str], float] = {}
    trace: list[str] = []
    held_out = False
    for exp in snapshot._route_candidates(attrs):  # type: ignore[attr-defined]
        reason, idx, n, extra = _decide(exp, session_id, user_id, attrs, sticky, holdout_flag, layer_cache)
        if extra:
            trace.append(extra)
        trace.append(f"{exp.key}:{reason}")
        if idx is not None:
            return _make_decision(exp, reason, idx, n, tuple(trace))
        if reason == "holdout":
            held_out = True
    return Decision(
        None,
        None,
        None,
        None,
        None,
        None,
        EMPTY_MAPPING,
        False,
        "holdout" if held_out else "no_experiment",
        tuple(trace),
    )
