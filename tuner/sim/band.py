"""How wrong a simulated number may be: the error band of its regime.

Every public figure in ``benchmarks/reference_figures.yaml`` was predicted with its own source
left out of the fit (``benchmarks/simulator_reference.py``), or read after the fit and never
seen by it; the errors are shipped in ``reference_errors.json`` beside this module, each with
the regime it was measured in: the GPU class, the speculation method's family and the load.

:func:`error_band` gives a prediction the band that holds :data:`LEVEL` of what a source not
yet read would measure: the sources' largest errors are taken as exchangeable, so a new one
falls at or below the k-th smallest of ``n`` with probability at least ``k / (n + 1)`` (a
split conformal bound). A regime whose figures come from too few sources for that is widened,
one step at a time, to the same method family at the same load on any GPU, to that family at
any load, then to every figure, and never below the largest error its narrower classes
measured, so that a user reads "simulated 150.7 tok/s, +/- 10 % (85 % band: 6 public figures
of this kind, 6 sources)" where the sources agree, and a wide band where the simulator has
been wrong.
"""

from __future__ import annotations

import enum
import itertools
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Annotated, Any

from pydantic import Field, computed_field, field_serializer, field_validator, model_validator

from tuner import serde
from tuner.catalog.gpus import Hardware, MemoryKind
from tuner.config.methods import MethodFamily, method_of
from tuner.config.trial import ServerConfig, SpecMethod

__all__ = [
    "LEVEL",
    "SPEED_KINDS",
    "Band",
    "FigureError",
    "Load",
    "MethodFamily",
    "Regime",
    "Scope",
    "error_band",
    "load_errors",
    "method_family",
    "regime_of",
    "widest",
]

_ERRORS_FILE = "reference_errors.json"
_STORED_DIGITS = 4  # of a relative error: a hundredth of a percent
# The figures whose error bounds a throughput prediction (end-to-end speed, not a component).
SPEED_KINDS = frozenset({"tok_s", "decode_tok_s", "tpot_ms", "speedup", "scaling"})
# The share of a new source's errors a band is to hold: 6 sources make the narrowest band.
LEVEL = 0.85


class Load(enum.StrEnum):
    """How many requests run at once."""

    SINGLE = "1 request"
    LOW = "2-16 requests"
    HIGH = "over 16 requests"


def method_family(method: SpecMethod) -> MethodFamily:
    """The family of a method of :class:`SpecMethod` (``none`` included)."""
    return method_of(method).family


def _load(concurrency: int) -> Load:
    if concurrency <= 1:
        return Load.SINGLE
    return Load.LOW if concurrency <= 16 else Load.HIGH


@dataclass(frozen=True)
class Regime:
    """Where a prediction or a figure lies: GPU class x method family x load."""

    gpu: MemoryKind
    method: MethodFamily
    load: Load

    def __str__(self) -> str:
        return f"{self.gpu} GPUs, {self.method}, {self.load}"


def regime_of(hardware: Hardware, server: ServerConfig, concurrency: int) -> Regime:
    """The regime of ``server`` on ``hardware`` at ``concurrency`` requests."""
    return Regime(hardware.gpu.memory, method_family(server.method), _load(concurrency))


@dataclass(frozen=True)
class FigureError:
    """One reference figure's prediction errors (relative: predicted / measured - 1).

    Attributes:
        figure: the figure's id in ``benchmarks/reference_figures.yaml``.
        source: its source's key there.
        kind: what was measured (``tok_s``, ``speedup``, ``acceptance_rate``, ...).
        regime: where it was measured (stored as its ``gpu``, ``method`` and ``load``).
        error: the error of the shipped fit.
        held_out: the error with the figure's own source left out of the fit.
    """

    figure: str
    source: str
    kind: str
    regime: Annotated[Regime, Field(exclude=True)]
    error: float
    held_out: float

    @computed_field  # type: ignore[prop-decorator]
    @property
    def gpu(self) -> MemoryKind:
        return self.regime.gpu

    @computed_field  # type: ignore[prop-decorator]
    @property
    def method(self) -> MethodFamily:
        return self.regime.method

    @computed_field  # type: ignore[prop-decorator]
    @property
    def load(self) -> Load:
        return self.regime.load

    @field_serializer("error", "held_out")
    def _rounded(self, error: float) -> float:
        return round(error, _STORED_DIGITS)

    @model_validator(mode="before")
    @classmethod
    def _regime(cls, data: Any) -> Any:
        """The regime of the stored ``gpu``, ``method`` and ``load``."""
        if isinstance(data, dict) and "regime" not in data:
            return {**data, "regime": {key: data.get(key) for key in ("gpu", "method", "load")}}
        return data


class Scope(enum.Enum):
    """Which of a regime's parts a band's figures share with it, narrowest first."""

    REGIME = ("gpu", "method", "load")
    FAMILY_AT_LOAD = ("method", "load")
    FAMILY = ("method",)
    EVERY = ()

    def holds(self, regime: Regime, other: Regime) -> bool:
        return all(getattr(other, part) == getattr(regime, part) for part in self.value)

    def words(self, regime: Regime) -> str:
        """What the figures are, as ``describe`` names them."""
        match self:
            case Scope.REGIME:
                return "this kind"
            case Scope.FAMILY_AT_LOAD:
                return f"{regime.method} at {regime.load} on any GPU"
            case Scope.FAMILY:
                return f"{regime.method} on any GPU at any load"
            case Scope.EVERY:
                return "any kind"


@dataclass(frozen=True)
class Band:
    """The measured error of a regime's predictions.

    Attributes:
        regime: the regime asked about.
        figures: how many public speed figures the band is drawn from.
        sources: how many sources they come from.
        error: the relative error that holds :data:`LEVEL` of a new source's (its sources'
            largest errors, the k-th smallest of them); None where too few sources exist.
        scope: what the figures share with ``regime``: the regime itself, or the wider class
            it was widened to for want of sources.
        largest: the error is instead the largest of ``scope``'s figures, too few sources for
            a level: the wider class's band was narrower than what they measured.
    """

    regime: Regime
    figures: int
    sources: int
    error: float | None
    scope: Scope = Scope.REGIME
    largest: bool = False

    def describe(self) -> str:
        """``+/- 10 % (85 % band: 9 public figures of this kind, 6 sources)``, or why nobody
        knows."""
        if self.error is None:
            return f"too few public figures for {self.regime}: error unknown"
        figures = f"{self.figures} public figure{'s' if self.figures != 1 else ''}"
        sources = f"{self.sources} source{'s' if self.sources != 1 else ''}"
        what = f"{figures} of {self.scope.words(self.regime)}, {sources}"
        if self.largest:
            return f"+/- {self.error * 100:.0f} % (the largest error of {what})"
        return f"+/- {self.error * 100:.0f} % ({LEVEL * 100:.0f} % band: {what})"

    def short(self) -> str:
        """``+/-12%`` or ``+/-?`` (too few public figures), for a table cell."""
        return "+/-?" if self.error is None else f"+/-{self.error * 100:.0f}%"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def text(self) -> str:
        """What :meth:`describe` says: the band as ``--json`` prints it, beside its figures."""
        return self.describe()

    @field_serializer("regime")
    def _regime(self, regime: Regime) -> str:
        return str(regime)

    @field_serializer("scope")
    def _scope(self, scope: Scope) -> str:
        return scope.name.lower()

    @field_validator("scope", mode="before")
    @classmethod
    def _scope_named(cls, value: object) -> object:
        """The scope its name names (as :meth:`_scope` writes it)."""
        if not isinstance(value, str):
            return value
        try:
            return Scope[value.upper()]
        except KeyError:
            raise ValueError(f"no scope is called {value!r}") from None

    @field_validator("regime", mode="before")
    @classmethod
    def _regime_named(cls, value: object) -> object:
        """The regime its words name (as :meth:`_regime` writes it)."""
        if not isinstance(value, str):
            return value
        for regime in _regimes():
            if str(regime) == value:
                return regime
        raise ValueError(f"no regime is called {value!r}")

    @field_serializer("error")
    def _rounded(self, error: float | None) -> float | None:
        return None if error is None else round(error, _STORED_DIGITS)


@cache
def _regimes() -> tuple[Regime, ...]:
    """Every regime there is: GPU class x method family x load."""
    return tuple(Regime(*each) for each in itertools.product(MemoryKind, MethodFamily, Load))


@cache
def load_errors() -> tuple[FigureError, ...]:
    """The shipped figure errors (written by ``benchmarks/simulator_reference.py --write``)."""
    text = resources.files("tuner.sim").joinpath(_ERRORS_FILE).read_text(encoding="utf-8")
    return tuple(serde.load(FigureError, entry) for entry in json.loads(text)["figures"])


def error_band(regime: Regime, errors: Iterable[FigureError] | None = None) -> Band:
    """The band of ``regime``: the error that holds :data:`LEVEL` of a new source's, from the
    held-out errors of its public speed figures, widened (:class:`Scope`) until they come from
    enough sources for that level; never below the largest error the narrower classes'
    figures measured (a regime whose few sources were far off is not vouched for by the many
    that were close elsewhere).

    Args:
        regime: where the prediction lies (:func:`regime_of`).
        errors: the figure errors to draw on (default: the shipped ones).
    """
    pool = [e for e in (load_errors() if errors is None else errors) if e.kind in SPEED_KINDS]
    narrower: Band | None = None  # the largest error of the widest class too small for a level
    for scope in Scope:
        matching = [e for e in pool if scope.holds(regime, e.regime)]
        largest: dict[str, float] = {}
        for e in matching:
            largest[e.source] = max(largest.get(e.source, 0.0), abs(e.held_out))
        rank = math.ceil(LEVEL * (len(largest) + 1))
        if rank <= len(largest):
            error = sorted(largest.values())[rank - 1]
            if narrower is not None and (narrower.error or 0.0) > error:
                return narrower
            return Band(regime, len(matching), len(largest), error, scope)
        if largest:
            narrower = Band(regime, len(matching), len(largest), max(largest.values()), scope, True)
    return Band(regime, len(matching), len(largest), None, Scope.EVERY)


def widest(bands: Iterable[Band]) -> Band | None:
    """The least certain of ``bands`` (an unknown one first); None when there are none."""
    found = list(bands)
    if not found:
        return None
    unknown = [b for b in found if b.error is None]
    return unknown[0] if unknown else max(found, key=lambda b: b.error or 0.0)
