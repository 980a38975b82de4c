"""Pure experiment-assignment engine: which variant (model endpoint) serves a unit.

Built on the GrowthBook primitives of :mod:`muse_experiments.experiments.assignment.growthbook`; imports only
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

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from muse_experiments.experiments.assignment.growthbook import (
    FNV_OFFSET_BASIS,
    FNV_PRIME,
    _js_to_string,
    compile_condition,
    fnv1a32,
    fnv1a32_continue,
    get_bucket_ranges,
)

__all__ = [
    "REASONS",
    "ConfigSnapshot",
    "Decision",
    "ExperimentSpec",
    "HoldoutSpec",
    "LayerSpec",
    "VariantSpec",
    "assign",
    "assign_many",
    "bucket",
    "route",
]

REASONS = (
    "assigned",
    "forced",
    "sticky",
    "holdout",
    "not_in_scope",
    "not_in_layer",
    "not_targeted",
    "not_in_coverage",
    "missing_unit_id",
    "no_experiment",
)
UNIT_TYPES = ("session", "user")
_EMPTY: Mapping[str, Any] = MappingProxyType({})
_MASK32 = 0xFFFFFFFF


def _by_id(e: ExperimentSpec) -> int:
    return e.id


def _finite_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


def _nonempty_str(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _frozen_mapping(name: str, value: Any) -> Mapping[str, Any]:
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be a mapping, got {type(value).__name__}")
    return MappingProxyType(dict(value))


@dataclass(frozen=True)
class VariantSpec:
    """One arm of an experiment.

    Attributes:
        key: variant key, unique within the experiment (e.g. ``"control"``, ``"b"``).
        weight: relative traffic weight, finite and >= 0; weights of an experiment are normalised
            by their sum (``50, 50`` == ``0.5, 0.5``).
        endpoint_id: model endpoint that serves this arm.
        is_control: at most one variant per experiment may be the control.
        overrides: request-parameter overrides for this arm (read-only copy).

    Raises:
        ValueError: empty key/endpoint, NaN/inf/negative weight, non-mapping overrides.
    """

    key: str
    weight: float
    endpoint_id: str
    is_control: bool = False
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _nonempty_str("VariantSpec.key", self.key)
        _nonempty_str(f"VariantSpec({self.key}).endpoint_id", self.endpoint_id)
        w = _finite_number(f"VariantSpec({self.key}).weight", self.weight)
        if w < 0:
            raise ValueError(f"VariantSpec({self.key}).weight must be >= 0, got {w!r}")
        if not isinstance(self.is_control, bool):
            raise ValueError(f"VariantSpec({self.key}).is_control must be a bool")
        object.__setattr__(self, "weight", w)
        object.__setattr__(
            self, "overrides", _frozen_mapping(f"VariantSpec({self.key}).overrides", self.overrides)
        )


@dataclass(frozen=True)
class LayerSpec:
    """An experiment's slice ``[start, end)`` of a layer's hash space (a GrowthBook namespace).

    Experiments in the same layer with disjoint slices are mutually exclusive. Bounds are in
    ``[0, 1]`` with ``start < end``.

    ``hash_version=1`` (default) is GrowthBook's namespace hash, ``hash("__" + key, unit_id, 1)``
    (``in_namespace``, a multiple of 0.001), so layers line up with GrowthBook namespaces. Caveat:
    that legacy FNV hash correlates layers whose keys differ only in their last characters
    (``"layer-a"`` vs ``"layer-b"``: correlation about -0.08 between the two layer hashes), so such
    layers are *not* independent; give layers dissimilar keys, or use ``hash_version=2``
    (``hash("__" + key, unit_id, 2)``, unbiased, multiples of 0.0001, not GrowthBook-namespace
    compatible).

    Raises:
        ValueError: empty key, NaN/inf bounds, bounds outside [0, 1] or ``start >= end``.
    """

    key: str
    start: float
    end: float
    hash_version: int = 1

    def __post_init__(self) -> None:
        _nonempty_str("LayerSpec.key", self.key)
        if self.hash_version not in (1, 2) or isinstance(self.hash_version, bool):
            raise ValueError(f"LayerSpec({self.key}).hash_version must be 1 or 2, got {self.hash_version!r}")
        start = _finite_number(f"LayerSpec({self.key}).start", self.start)
        end = _finite_number(f"LayerSpec({self.key}).end", self.end)
        if not (0.0 <= start < end <= 1.0):
            raise ValueError(f"LayerSpec({self.key}) needs 0 <= start < end <= 1, got [{start}, {end})")
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)
        object.__setattr__(self, "_suffix", "__" + self.key)
        object.__setattr__(self, "_seed_state", fnv1a32("__" + self.key))


@dataclass(frozen=True)
class ExperimentSpec:
    """A running experiment (one phase of it).

    Attributes:
        id: unique integer id (also the routing priority: lower id first).
        key: unique experiment key.
        seed: hash seed (GrowthBook ``seed``); changing it reshuffles every unit.
        phase: phase number, >= 0 (a new phase = a new sticky scope).
        unit_type: ``"session"`` or ``"user"``: which id is hashed.
        variants: at least two :class:`VariantSpec` with unique keys and positive total weight.
        coverage: share of eligible units included, in ``[0, 1]``.
        layer: optional :class:`LayerSpec` (mutual exclusion within the layer).
        condition: optional GrowthBook targeting condition on the unit's attributes.
        forced: unit id -> variant key QA pins (decisions say ``forced``).
        match: optional routing scope, a GrowthBook condition on the call's attributes (e.g.
            ``{"subagent": "coder"}``); ``None`` = all traffic.
        saved_groups: saved-group payload for ``$inGroup``/``$savedGroup`` in ``condition``/``match``.

    Precomputed in ``__post_init__``: normalised weights, bucket ranges, the FNV state of the
    seed prefix, compiled condition/scope predicates.

    Raises:
        ValueError: any field out of range (see :class:`VariantSpec`, :class:`LayerSpec`),
            fewer than two variants, duplicate variant keys, more than one control, all weights
            zero, coverage not a finite number in [0, 1], bad unit type, forced pins naming an
            unknown variant, condition/match not a mapping.
    """

    id: int
    key: str
    seed: str
    phase: int
    unit_type: str
    variants: tuple[VariantSpec, ...]
    coverage: float = 1.0
    layer: LayerSpec | None = None
    condition: Mapping[str, Any] | None = None
    forced: Mapping[str, str] = field(default_factory=dict)
    match: Mapping[str, Any] | None = None
    saved_groups: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.id, bool) or not isinstance(self.id, int):
            raise ValueError(f"ExperimentSpec.id must be an int, got {self.id!r}")
        name = f"ExperimentSpec({self.key!r})"
        _nonempty_str("ExperimentSpec.key", self.key)
        _nonempty_str(f"{name}.seed", self.seed)
        if isinstance(self.phase, bool) or not isinstance(self.phase, int) or self.phase < 0:
            raise ValueError(f"{name}.phase must be an int >= 0, got {self.phase!r}")
        if self.unit_type not in UNIT_TYPES:
            raise ValueError(f"{name}.unit_type must be one of {UNIT_TYPES}, got {self.unit_type!r}")
        variants = tuple(self.variants)
        if len(variants) < 2:
            raise ValueError(f"{name} needs at least two variants, got {len(variants)}")
        if not all(isinstance(v, VariantSpec) for v in variants):
            raise ValueError(f"{name}.variants must be VariantSpec instances")
        keys = [v.key for v in variants]
        if len(set(keys)) != len(keys):
            raise ValueError(f"{name} has duplicate variant keys: {keys}")
        if sum(v.is_control for v in variants) > 1:
            raise ValueError(f"{name} has more than one control variant")
        total = math.fsum(v.weight for v in variants)
        if total <= 0:
            raise ValueError(f"{name} variant weights must have a positive sum")
        coverage = _finite_number(f"{name}.coverage", self.coverage)
        if not 0.0 <= coverage <= 1.0:
            raise ValueError(f"{name}.coverage must be in [0, 1], got {coverage}")
        if self.layer is not None and not isinstance(self.layer, LayerSpec):
            raise ValueError(f"{name}.layer must be a LayerSpec or None")
        if self.condition is not None and not isinstance(self.condition, Mapping):
            raise ValueError(f"{name}.condition must be a mapping or None")
        if self.match is not None and not isinstance(self.match, Mapping):
            raise ValueError(f"{name}.match must be a mapping or None")
        forced = _frozen_mapping(f"{name}.forced", self.forced)
        index = {k: i for i, k in enumerate(keys)}
        for unit, vkey in forced.items():
            if vkey not in index:
                raise ValueError(f"{name}.forced pins unit {unit!r} to unknown variant {vkey!r}")
        saved_groups = _frozen_mapping(f"{name}.saved_groups", self.saved_groups)

        weights = tuple(v.weight / total for v in variants)
        ranges = tuple(get_bucket_ranges(len(variants), coverage, list(weights)))
        s = object.__setattr__
        s(self, "variants", variants)
        s(self, "coverage", coverage)
        s(self, "forced", forced)
        s(self, "saved_groups", saved_groups)
        s(self, "_weights", weights)
        s(self, "_ranges", ranges)
        s(self, "_index", MappingProxyType(index))
        s(self, "_seed_state", fnv1a32(self.seed))
        s(self, "_condition_fn", compile_condition(self.condition, saved_groups))
        s(self, "_match_fn", compile_condition(self.match, saved_groups))
        s(self, "_has_condition", bool(self.condition))
        s(self, "_has_match", bool(self.match))
        s(
            self,
            "_match_is_flat",
            bool(self.match)
            and all(
                isinstance(k, str) and k[:1] != "$" and "." not in k and isinstance(v, str)
                for k, v in self.match.items()  # type: ignore[union-attr]
            ),
        )

    @property
    def weights(self) -> tuple[float, ...]:
        """Normalised weights (sum 1), one per variant."""
        return self._weights  # type: ignore[attr-defined]

    @property
    def ranges(self) -> tuple[tuple[float, float], ...]:
        """GrowthBook bucket ranges ``[(start, end)]`` per variant for this coverage."""
        return self._ranges  # type: ignore[attr-defined]

    def variant_index(self, key: str) -> int | None:
        """Index of the variant with ``key``, or ``None``."""
        return self._index.get(key)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class HoldoutSpec:
    """Global holdout: units with ``hash(seed, user_id, 2) < share`` get no experiment.

    ``share`` in ``[0, 1]`` (granularity 0.0001). Hashed on the user id, or on the session id
    when the user id is empty.

    Raises:
        ValueError: share NaN/inf/outside [0, 1], empty seed.
    """

    share: float
    seed: str = "global-holdout"

    def __post_init__(self) -> None:
        share = _finite_number("HoldoutSpec.share", self.share)
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"HoldoutSpec.share must be in [0, 1], got {share}")
        _nonempty_str("HoldoutSpec.seed", self.seed)
        object.__setattr__(self, "share", share)
        object.__setattr__(self, "_seed_state", fnv1a32(self.seed))


@dataclass(frozen=True)
class ConfigSnapshot:
    """An immutable, versioned set of running experiments plus the optional global holdout.

    Raises:
        ValueError: duplicate experiment ids or keys, non-ExperimentSpec entries, bad holdout.
    """

    version: int
    experiments: tuple[ExperimentSpec, ...]
    holdout: HoldoutSpec | None = None

    def __post_init__(self) -> None:
        exps = tuple(self.experiments)
        if not all(isinstance(e, ExperimentSpec) for e in exps):
            raise ValueError("ConfigSnapshot.experiments must be ExperimentSpec instances")
        ids = [e.id for e in exps]
        keys = [e.key for e in exps]
        if len(set(ids)) != len(ids):
            raise ValueError(f"ConfigSnapshot has duplicate experiment ids: {sorted(ids)}")
        if len(set(keys)) != len(keys):
            raise ValueError(f"ConfigSnapshot has duplicate experiment keys: {sorted(keys)}")
        if self.holdout is not None and not isinstance(self.holdout, HoldoutSpec):
            raise ValueError("ConfigSnapshot.holdout must be a HoldoutSpec or None")
        ordered = tuple(sorted(exps, key=lambda e: e.id))
        # Routing index: experiments whose scope is a flat {attribute: "literal"} condition are
        # looked up by the call's attribute values instead of being tested one by one.
        unscoped: list[ExperimentSpec] = []
        index: dict[tuple[str, ...], dict[tuple[str, ...], list[ExperimentSpec]]] = {}
        for e in ordered:
            if e._match_is_flat:  # type: ignore[attr-defined]
                keys = tuple(sorted(e.match))  # type: ignore[arg-type]
                values = tuple(e.match[k] for k in keys)  # type: ignore[index]
                index.setdefault(keys, {}).setdefault(values, []).append(e)
            else:
                unscoped.append(e)
        object.__setattr__(self, "experiments", exps)
        object.__setattr__(self, "_ordered", ordered)
        object.__setattr__(self, "_unscoped", tuple(unscoped))
        object.__setattr__(
            self,
            "_scope_index",
            tuple((keys, {v: tuple(es) for v, es in table.items()}) for keys, table in index.items()),
        )

    def _route_candidates(self, attributes: Mapping[str, Any]) -> list[ExperimentSpec]:
        """Experiments whose scope can match ``attributes``, ascending id (others are skipped)."""
        out = list(self._unscoped)  # type: ignore[attr-defined]
        hits = 0
        for keys, table in self._scope_index:  # type: ignore[attr-defined]
            vals = []
            for k in keys:
                a = attributes.get(k)
                vals.append(a if isinstance(a, str) else _js_to_string(a))
            found = table.get(tuple(vals))
            if found:
                out.extend(found)
                hits += 1
        if hits > 1 or (hits and self._unscoped):  # type: ignore[attr-defined]
            out.sort(key=_by_id)
        return out


@dataclass(frozen=True)
class Decision:
    """The outcome of evaluating (one or all) experiments for a unit.

    ``reason`` is one of :data:`REASONS`; ``trace`` lists ``"<experiment key>:<reason>"`` for
    every experiment considered (plus ``"<key>:sticky_stale"`` when a stale sticky entry was
    ignored). ``in_experiment`` is True for ``assigned``, ``sticky`` and ``forced``; variant
    fields are ``None`` otherwise. ``bucket`` is the unit's hash in ``[0, 1)`` when computed.
    """

    experiment_key: str | None
    experiment_id: int | None
    phase: int | None
    variant_key: str | None
    variant_index: int | None
    endpoint_id: str | None
    overrides: Mapping[str, Any]
    in_experiment: bool
    reason: str
    trace: tuple[str, ...]
    bucket: float | None = None

    @property
    def is_forced(self) -> bool:
        """True for QA pins; analytics must exclude these units."""
        return self.reason == "forced"


# --------------------------------------------------------------------------- scalar path


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
        return Decision(exp.key, exp.id, exp.phase, None, None, None, _EMPTY, False, reason, trace, n)
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
    attrs = attributes if attributes is not None else _EMPTY
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
    attrs = attributes if attributes is not None else _EMPTY
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
        _EMPTY,
        False,
        "holdout" if held_out else "no_experiment",
        tuple(trace),
    )


# --------------------------------------------------------------------------- vectorised path


def _code_unit_matrix(unit_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Encode ids as UTF-16 code units: a zero-padded, column-major ``(max_len, n)`` uint16 matrix
    (row ``j`` = the ``j``-th code unit of every id) and the ``(n,)`` code-unit lengths."""
    n = len(unit_ids)
    lengths = np.fromiter(map(len, unit_ids), dtype=np.int64, count=n)
    codes = np.frombuffer("".join(unit_ids).encode("utf-16-le", "surrogatepass"), dtype="<u2")
    if codes.size != int(lengths.sum()):
        # Some ids hold characters above U+FFFF: each is two code units (a surrogate pair), as in JS.
        lengths = np.fromiter(
            (len(u.encode("utf-16-le", "surrogatepass")) // 2 for u in unit_ids), dtype=np.int64, count=n
        )
    width = int(lengths.max()) if n else 0
    mat = np.zeros((width, n), dtype=np.uint16)
    if n and width:
        if int(lengths.min()) == width:
            mat[:] = codes.reshape(n, width).T
        else:
            starts = np.cumsum(lengths) - lengths
            rows = np.repeat(np.arange(n), lengths)
            cols = np.arange(codes.size) - np.repeat(starts, lengths)
            mat[cols, rows] = codes
    return mat, lengths


def _fnv_columns(h: np.ndarray, mat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Feed each id's first ``lengths[i]`` code units (column ``i`` of ``mat``) into the uint32
    FNV-1a state ``h`` (modified in place and returned)."""
    prime = np.uint32(FNV_PRIME)
    if mat.shape[0] == 0:
        return h
    min_len = int(lengths.min())
    for j in range(min_len):
        h ^= mat[j]
        h *= prime
    for j in range(min_len, mat.shape[0]):
        hn = (h ^ mat[j]) * prime
        np.copyto(h, hn, where=lengths > j)
    return h


def _fnv_decimal(n: np.ndarray) -> np.ndarray:
    """Vectorised ``fnv1a32(str(n))`` for a uint32 array ``n`` (decimal digits, no padding)."""
    prime = np.uint32(FNV_PRIME)
    digits = np.empty((10, n.size), dtype=np.uint32)  # digits[p] = (n // 10**p) % 10 + ord("0")
    q = n.copy()
    for p in range(10):
        q10 = q // np.uint32(10)
        digits[p] = q - q10 * np.uint32(10) + np.uint32(48)
        q = q10
    h = np.full(n.shape, FNV_OFFSET_BASIS, dtype=np.uint32)
    low = int(n.min()) if n.size else 0
    for p in range(9, -1, -1):
        hn = (h ^ digits[p]) * prime
        if p == 0 or low >= 10**p:
            h = hn
        else:
            np.copyto(h, hn, where=n >= np.uint32(10**p))
    return h


def _const_fnv(h: np.ndarray, s: str) -> np.ndarray:
    prime = np.uint32(FNV_PRIME)
    data = s.encode("utf-16-le", "surrogatepass")
    for i in range(0, len(data), 2):
        h ^= np.uint32(data[i] | (data[i + 1] << 8))
        h *= prime
    return h


def assign_many(experiment: ExperimentSpec, unit_ids: Sequence[str]) -> np.ndarray:
    """Vectorised :func:`bucket` for many unit ids.

    Args:
        experiment: the experiment (its layer, coverage and weights are applied).
        unit_ids: sequence of ``N`` id strings (session or user ids, as the experiment's
            ``unit_type`` says).

    Returns:
        ``int64`` array of shape ``(N,)``: the variant index per id, ``-1`` = not in the
        experiment (outside the layer slice or coverage, or empty id). Identical to
        ``[bucket(experiment, u) for u in unit_ids]``; targeting, forced pins, sticky entries and
        the holdout are not applied. Hashes are computed over UTF-16 code units exactly like the
        scalar path (FNV-1a with uint32 arithmetic, one numpy pass per character column).
    """
    cps, lengths = _code_unit_matrix(unit_ids)
    n = len(lengths)
    result = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return result
    eligible = lengths > 0
    with np.errstate(over="ignore"):
        layer = experiment.layer
        if layer is not None and layer.hash_version == 2:
            h1 = _fnv_columns(np.full(n, layer._seed_state, dtype=np.uint32), cps, lengths)  # type: ignore[attr-defined]
            ln = (_fnv_decimal(h1) % np.uint32(10000)).astype(np.float64) / 10000
            eligible &= (layer.start <= ln) & (ln < layer.end)
        elif layer is not None:
            h1 = _fnv_columns(np.full(n, FNV_OFFSET_BASIS, dtype=np.uint32), cps, lengths)
            h1 = _const_fnv(h1, layer._suffix)  # type: ignore[attr-defined]
            ln = (h1 % np.uint32(1000)).astype(np.float64) / 1000
            eligible &= (experiment.layer.start <= ln) & (ln < experiment.layer.end)
        h = _fnv_columns(np.full(n, experiment._seed_state, dtype=np.uint32), cps, lengths)  # type: ignore[attr-defined]
        h2 = _fnv_decimal(h)
    bucket_values = (h2 % np.uint32(10000)).astype(np.float64) / 10000
    for i, (a, b) in enumerate(experiment._ranges):  # type: ignore[attr-defined]
        hit = eligible & (result == -1) & (a <= bucket_values) & (bucket_values < b)
        result[hit] = i
    return result
