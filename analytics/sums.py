"""Plain containers for the sums the SQL layer returns (no Django: the analysis core uses them)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ComponentSums:
    """Per-component sums for one group of units: n (units with a value), Σy, Σy², Σx, Σx², Σxy,
    and ``with_data``: units with an observation (a unit with no event of the name has value 0
    but no data). ``as_list`` leaves ``with_data`` out (the stored inputs' shape)."""

    n: int = 0
    sum: float = 0.0
    sum_squares: float = 0.0
    sum_x: float = 0.0
    sum_x2: float = 0.0
    sum_xy: float = 0.0
    with_data: int = 0

    def add(self, other: ComponentSums) -> None:
        self.n += other.n
        self.sum += other.sum
        self.sum_squares += other.sum_squares
        self.sum_x += other.sum_x
        self.sum_x2 += other.sum_x2
        self.sum_xy += other.sum_xy
        self.with_data += other.with_data

    def as_list(self) -> list[float]:
        return [self.n, self.sum, self.sum_squares, self.sum_x, self.sum_x2, self.sum_xy]


@dataclass
class GroupRow:
    """Sufficient statistics of the units of one (variant, multiple exposure, deviates) group."""

    variant_key: str
    multi: bool
    deviates: bool
    units: int
    components: dict[str, ComponentSums] = field(default_factory=dict)
    cross: dict[tuple[str, str], float] = field(default_factory=dict)


@dataclass
class VariantStats:
    """A population's per-variant sums: ``units``, components by key, ratio cross products."""

    units: int = 0
    components: dict[str, ComponentSums] = field(default_factory=dict)
    cross: dict[tuple[str, str], float] = field(default_factory=dict)
