"""The configuration the assignment engine evaluates, and what it decides: immutable specs of
experiments, variants, layers and the global holdout (validated in ``__post_init__``, with their
hashing state precomputed), a versioned :class:`ConfigSnapshot` of them, and the
:class:`Decision` for a unit with its reason code (:data:`REASONS`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from muse_experiments.experiments.assignment.growthbook.conditions import compile_condition
from muse_experiments.experiments.assignment.growthbook.hashing import fnv1a32, get_bucket_ranges
from muse_experiments.experiments.assignment.growthbook.js import js_to_string

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
#: The one empty, read-only mapping: overrides of a decision outside any experiment, attributes
#: of a call that sent none.
EMPTY_MAPPING: Mapping[str, Any] = MappingProxyType({})


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
        return EMPTY_MAPPING
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
                vals.append(a if isinstance(a, str) else js_to_string(a))
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
