"""What a server start-up costs, per config family: measured where a study has timed one.

A family is the target model, the tensor-parallel size and the speculation method: what sets
how long vLLM takes to load weights, compile and capture graphs, while the memory settings,
K and the request side barely change it. Each trial that started a server stores the seconds
the start took (:attr:`tuner.trial.record.TrialRecord.startup_s`); a family's price is the
median of those (one slow first start, an image pull or a cold page cache, moves it little).
A family never measured is priced by the prior: :data:`START_PRIOR_S` for the engine (process
start, engine init, ``torch.compile``, CUDA graph capture; vLLM starts a 14-32B model in "tens
of seconds to minutes") plus the weights at :data:`LOAD_GB_PER_S` per GPU.

The simulator has no start-up clock of its own: its trials store none, and a simulated study
is priced by the prior (as :class:`tuner.study.budget.SimulatedBudget` counts its start-ups).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Literal, NamedTuple

from pydantic import AliasChoices, ConfigDict, Field, computed_field, with_config

from tuner.catalog.models import load_model
from tuner.config.trial import ServerConfig, SpecMethod, load_draft
from tuner.results import Source
from tuner.trial.record import TrialRecord

__all__ = [
    "LOAD_GB_PER_S",
    "REUSE_FLOOR",
    "REUSE_SHARE",
    "START_PRIOR_S",
    "Family",
    "StartupPrice",
    "StartupPrices",
    "reuse_share",
    "start_prior_s",
]

# Process start, engine init, torch.compile and CUDA graph capture, before weights: a prior.
START_PRIOR_S = 75.0
LOAD_GB_PER_S = 2.0  # weights from a local NVMe or the page cache, per GPU
# A config predicted within this share of the best is worth a trial that costs what the
# best's would: a start-up, then a benchmark.
REUSE_SHARE = 0.97
# However cheap its trial: a config predicted further below the best is not close.
REUSE_FLOOR = 0.9


class Family(NamedTuple):
    """The configs whose start-ups take about as long: one target, TP size and method."""

    model: str
    tensor_parallel_size: int
    method: SpecMethod

    @classmethod
    def of(cls, server: ServerConfig) -> Family:
        return cls(server.model, server.tensor_parallel_size, server.method)

    def describe(self) -> str:
        return f"{self.model} TP{self.tensor_parallel_size} {self.method}"


def start_prior_s(server: ServerConfig) -> float:
    """A start-up of ``server`` before any is measured: the engine prior, then the weights."""
    draft = load_draft(server)
    weights = load_model(server.model).weight_bytes + (draft.weight_bytes if draft else 0.0)
    return START_PRIOR_S + weights / server.tensor_parallel_size / (LOAD_GB_PER_S * 1e9)


def reuse_share(start_s: float, bench_s: float) -> float:
    """How close to the best config a request-only change of the running server must be
    predicted to be worth its trial instead of the best's on a new server.

    :data:`REUSE_SHARE` is the shortfall worth a trial that costs a start-up (``start_s``)
    and a benchmark (``bench_s``); a config that reuses the running server costs its
    benchmark alone, so for the same GPU time it may fall (start-up + benchmark) / benchmark
    times as far short; never below :data:`REUSE_FLOOR`.
    """
    shortfall = (1 - REUSE_SHARE) * (start_s + bench_s) / max(bench_s, 1e-9)
    return max(REUSE_FLOOR, 1 - shortfall)


@with_config(ConfigDict(serialize_by_alias=True))
@dataclass(frozen=True)
class StartupPrice:
    """The seconds one start-up is priced at, and where the figure comes from.

    Attributes:
        seconds: the price.
        trials: how many stored start-ups of the family it is the median of (0: the prior);
            printed as ``start_ups``.
        source: the kind of numbers those start-ups were (measured); None for the prior.
    """

    seconds: float
    trials: Annotated[
        int,
        Field(
            serialization_alias="start_ups",
            validation_alias=AliasChoices("trials", "start_ups"),
        ),
    ] = 0
    source: Source | None = None

    @property
    def measured(self) -> bool:
        return self.trials > 0

    def describe(self) -> str:
        if not self.measured:
            return "prior"
        label = "" if self.source is None else f"{self.source.value}, "
        return f"{label}median of {self.trials} start-up{'s' if self.trials > 1 else ''}"

    @computed_field(alias="from")  # type: ignore[prop-decorator]
    @property
    def origin(self) -> Literal["prior", "study"]:
        """Where the price comes from: the prior, or the study's own start-ups."""
        return "study" if self.measured else "prior"


class StartupPrices:
    """Start-up prices per family: each measured family's median, the prior for the rest.

    Args:
        timed: each family's stored start-up seconds.
        source: what kind of numbers they are (a study holds one kind).
    """

    def __init__(
        self,
        timed: Mapping[Family, Iterable[float]] | None = None,
        source: Source = Source.MEASURED,
    ) -> None:
        self.timed = {family: tuple(seconds) for family, seconds in (timed or {}).items()}
        self.source = source

    @classmethod
    def of(cls, found: Iterable[TrialRecord]) -> StartupPrices:
        """The prices a study's stored trials give (those that timed no start-up are left out)."""
        timed: dict[Family, list[float]] = defaultdict(list)
        source = Source.MEASURED
        for record in found:
            if record.startup_s is not None:
                timed[Family.of(record.server)].append(record.startup_s)
                source = record.source
        return cls(timed, source)

    def medians(self) -> dict[Family, float]:
        """Each measured family's median start-up seconds."""
        return {family: statistics.median(s) for family, s in self.timed.items() if s}

    def price(self, server: ServerConfig) -> StartupPrice:
        """What a start-up of ``server`` is priced at: its family's median, else the prior."""
        seconds = self.timed.get(Family.of(server), ())
        if not seconds:
            return StartupPrice(start_prior_s(server))
        return StartupPrice(statistics.median(seconds), len(seconds), self.source)
