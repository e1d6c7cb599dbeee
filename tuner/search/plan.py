"""What a study costs in GPU time before it runs (``--plan``), and what is confirmed after it.

A trial costs a server start-up when its server config differs from the one before, then a
benchmark at every (level, temperature) pair of the workload; each confirmation run costs both
(a fresh server), and so does each run of a per-batch-size K table (:func:`confirmation_runs`).
Before anything is measured, the benchmark is the simulator's prediction for the config and the
start-up its config family's price (:mod:`tuner.search.startup`): the median of the start-ups
the study (resumed) stored for the family, else a prior (:data:`START_PRIOR_S` plus the
weights at :data:`LOAD_GB_PER_S`). Once trials have run, their own wall times replace both:
the run's budget (:mod:`tuner.study.budget`) estimates the next trial as the mean of those
this run measured.

With a budget, the plan keeps the trials that fit in it beside the confirmation, and quotes
the share of the optimum the search benchmark's held-out worlds reached in that much simulated
GPU time (:func:`expected_share`, from ``gpu_time_shares.json``, which
``benchmarks/search_efficiency.py --write`` writes): a figure from simulated worlds, labelled so.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib import resources
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    computed_field,
    field_serializer,
    model_validator,
    with_config,
)

from tuner import serde
from tuner.config.space import SearchSpace
from tuner.config.trial import TrialConfig
from tuner.config.vllm_args import has_per_batch_size
from tuner.errors import StartupFailure
from tuner.search.forecast import bench_seconds, predicted_trial
from tuner.search.startup import (
    LOAD_GB_PER_S,
    START_PRIOR_S,
    Family,
    StartupPrice,
    StartupPrices,
    start_prior_s,
)
from tuner.search.strategy import warm_start_configs
from tuner.sim.band import Band, error_band, regime_of, widest

__all__ = [
    "LOAD_GB_PER_S",
    "START_PRIOR_S",
    "Confirmation",
    "ExpectedShare",
    "StudyPlan",
    "TrialCost",
    "cut_confirmation",
    "expected_share",
    "fit_confirmation",
    "format_duration",
    "plan_study",
    "prior_cost",
    "start_prior_s",
]

_SHARES_FILE = "gpu_time_shares.json"


@dataclass(frozen=True)
class TrialCost:
    """Seconds one trial takes: its server's start-up (0 when reused) and its benchmark.

    ``band`` is how wrong the simulated benchmark may be (the widest error band of the speeds
    it predicts; None where nothing was predicted); ``start`` where its start-up's price comes
    from (its family's measured median or the prior; None for a mean of several).
    """

    start_s: float
    bench_s: float
    band: Band | None = None
    start: StartupPrice | None = None

    @property
    def total_s(self) -> float:
        return self.start_s + self.bench_s

    def start_from(self) -> str:
        """Where its start-up's price comes from, in words (``--plan --json``)."""
        if self.start is not None:
            return self.start.describe()
        return "reuses the running server" if self.start_s == 0 else "mean of the configs named"


def prior_cost(
    space: SearchSpace, config: TrialConfig, startups: StartupPrices | None = None
) -> TrialCost:
    """The cost of ``config`` before this run measures it: its family's start-up price
    (``startups``: a resumed study's measured medians; default the prior), the predicted
    benchmark (in a goodput study, of the steps its climb is predicted to measure)."""
    server = config.server
    price = (startups or StartupPrices()).price(server)
    start = price.seconds
    try:
        pairs = predicted_trial(space, config)
    except StartupFailure:  # out of memory: a start-up that fails, no benchmark
        return TrialCost(start, 0.0, start=price)
    bands = [error_band(regime_of(space.hardware, server, c.concurrency)) for c, _ in pairs]
    bench = bench_seconds(config.client.workload, pairs)
    return TrialCost(start, bench, widest(bands), price)


@with_config(ConfigDict(serialize_by_alias=True))
@dataclass(frozen=True)
class StudyPlan:
    """The expected GPU time of a run, trial by trial, then its confirmation; ``optimize --plan
    --json`` prints it (:func:`tuner.serde.dump`), each field under its printed name."""

    trials: tuple[tuple[str, TrialCost], ...]  # (what runs, its cost), in order
    confirm_runs: int
    confirm_cost: TrialCost  # of one confirmation run
    # The run's time budget: only the trials that fit are listed.
    budget_s: Annotated[float | None, Field(serialization_alias="time_budget_s")] = None
    # The benchmark's share of the optimum at the budget.
    expected: Annotated[ExpectedShare | None, Field(serialization_alias="expected_share")] = None
    # The config families whose start-ups are priced by the study's own (the rest: the prior).
    startups: Annotated[
        tuple[tuple[Family, StartupPrice], ...], Field(serialization_alias="start_ups")
    ] = ()
    # False: the budget leaves no time for the K table's runs.
    k_table: Annotated[bool, Field(serialization_alias="confirm_k_table")] = True

    @property
    def trials_s(self) -> float:
        return sum(cost.total_s for _, cost in self.trials)

    @property
    def confirm_s(self) -> float:
        return self.confirm_runs * self.confirm_cost.total_s

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_s(self) -> float:
        return self.trials_s + self.confirm_s

    @computed_field  # type: ignore[prop-decorator]
    @property
    def confirm_run_s(self) -> float:
        return self.confirm_cost.total_s

    @field_serializer("trials")
    def _trial_rows(self, trials: tuple[tuple[str, TrialCost], ...]) -> list[dict[str, Any]]:
        """A row per trial: what runs, its seconds, how wrong the simulated benchmark may be,
        and where its start-up's price comes from, in words."""
        return [
            {
                "config": what,
                "start_s": cost.start_s,
                "bench_s": cost.bench_s,
                "bench_error_band": None if cost.band is None else serde.dump(cost.band),
                "start_from": cost.start_from(),
                "start": None if cost.start is None else serde.dump(cost.start),
            }
            for what, cost in trials
        ]

    @model_validator(mode="before")
    @classmethod
    def _read_back(cls, data: Any) -> Any:
        """The plan from what ``--plan --json`` printed: its rows, under their printed names."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        data["trials"] = [
            (
                row["config"],
                {
                    "start_s": row["start_s"],
                    "bench_s": row["bench_s"],
                    "band": row["bench_error_band"],
                    "start": row.get("start"),
                },
            )
            for row in data.get("trials", ())
        ]
        data["startups"] = [
            (row["family"], {key: v for key, v in row.items() if key != "family"})
            for row in data.pop("start_ups", ())
        ]
        printed = {"time_budget_s": "budget_s", "expected_share": "expected"}
        for key, name in {**printed, "confirm_k_table": "k_table"}.items():
            if key in data:
                data[name] = data.pop(key)
        return data

    @field_serializer("startups")
    def _family_rows(
        self, startups: tuple[tuple[Family, StartupPrice], ...]
    ) -> list[dict[str, Any]]:
        """A row per family, its fields named (a tuple would print as a bare list)."""
        return [{"family": family._asdict(), **serde.dump(price)} for family, price in startups]


def plan_study(
    space: SearchSpace,
    trials: int,
    confirmation: Confirmation,
    budget_s: float | None = None,
    startups: StartupPrices | None = None,
    held_gib: float = 0.0,
) -> StudyPlan:
    """The plan of a run: the warm-start configs named (on GPUs where other processes hold
    ``held_gib``), the sampler's trials at their mean cost, a restart wherever the server
    config changes, each start-up at its family's price (``startups``: the medians a resumed
    study measured; default the prior); with ``budget_s``, only the trials that fit in it
    beside the confirmation (each at its full fixed count: a trial measured in rounds, or
    pruned, costs less) and as much of ``confirmation`` as fits a third of it, and the share
    of the optimum expected then."""
    startups = startups or StartupPrices()
    chosen = warm_start_configs(space, trials, startups, held_gib)
    costs: dict[TrialConfig, TrialCost] = {}
    rows: list[tuple[str, TrialCost]] = []
    previous = None
    for prediction in chosen:
        config = prediction.config
        if config not in costs:
            costs[config] = prior_cost(space, config, startups)
        cost = costs[config]
        if config.server == previous:
            cost = TrialCost(0.0, cost.bench_s, cost.band)
        rows.append((_describe(config), cost))
        previous = config.server
    if not rows:  # nothing predicted to meet the limit: price the space's first choice
        draft = space.drafts[0]
        speculative = space.speculative(draft, space.k_range(draft)[0])
        util = space.gpu_memory_utilization.low
        first = space.config(speculative, util, space.max_num_batched_tokens[0], 0.0)
        costs[first] = prior_cost(space, first, startups)
    found = {Family.of(c.server): startups.price(c.server) for c in costs}
    priced = tuple((family, price) for family, price in found.items() if price.measured)
    mean = _mean(list(costs.values()))
    rows += [("a config the sampler picks", mean)] * (trials - len(rows))
    if budget_s is not None:
        confirmation = fit_confirmation(space, confirmation, budget_s, mean.total_s)
    runs = confirmation.runs(space)
    if budget_s is None:
        return StudyPlan(tuple(rows), runs, mean, startups=priced)
    if budget_s > sum(c.total_s for _, c in rows) + runs * mean.total_s:  # more: the sampler's
        extra = budget_s - sum(c.total_s for _, c in rows) - runs * mean.total_s
        rows += [("a config the sampler picks", mean)] * int(extra // max(mean.total_s, 1.0))
    fitting: list[tuple[str, TrialCost]] = []
    spent = runs * mean.total_s
    for row in rows:
        if spent + row[1].total_s > budget_s:
            break
        fitting.append(row)
        spent += row[1].total_s
    expected = expected_share(budget_s / 3600.0, space.name)
    return StudyPlan(tuple(fitting), runs, mean, budget_s, expected, priced, confirmation.k_table)


@dataclass(frozen=True)
class ExpectedShare:
    """The search benchmark's share of the optimum after some simulated GPU-hours.

    Attributes:
        hours: the budget asked about.
        median: the median over the held-out worlds (each a median over seeds).
        worst: the worst world's median.
        worlds: how many held-out worlds; seeds: studies per world and strategy.
        space: the benchmark's space (not the user's: a figure from simulated worlds).
    """

    hours: float
    median: float
    worst: float
    worlds: int
    seeds: int
    space: str

    def describe(self) -> str:
        return (
            f"expected at {format_duration(self.hours * 3600)}: {self.median:.1%} of the optimum "
            f"(worst world {self.worst:.1%}), simulated: the search benchmark's {self.worlds} "
            f"held-out worlds on its {self.space} space, {self.seeds} seeds each"
        )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def source(self) -> Literal["simulated"]:
        """The kind of numbers: the benchmark's simulated worlds."""
        return "simulated"


def _shares() -> dict[str, Any]:
    """The shipped search-benchmark runs (``gpu_time_shares.json``), per space; empty where
    none was shipped."""
    try:
        text = resources.files("tuner.search").joinpath(_SHARES_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    data: dict[str, Any] = json.loads(text)["spaces"]
    return data


def benchmarked_spaces() -> tuple[str, ...]:
    """The spaces the shipped search-benchmark shares were measured on."""
    return tuple(sorted(_shares()))


def expected_share(hours: float, space: str) -> ExpectedShare | None:
    """The benchmark's share at ``hours`` on space ``space`` (linear between its budgets, its
    last one beyond); None below its first budget, on a space the benchmark did not run (a
    share from another space says nothing of this one), or where no run was shipped."""
    data = _shares().get(space)
    if data is None:
        return None
    points = list(zip(data["hours"], data["median"], data["worst"], strict=True))
    if not points or hours < points[0][0]:
        return None
    median, worst = points[-1][1], points[-1][2]
    for (h0, m0, w0), (h1, m1, w1) in itertools.pairwise(points):
        if h0 <= hours <= h1:
            share = (hours - h0) / (h1 - h0)
            median, worst = m0 + share * (m1 - m0), w0 + share * (w1 - w0)
            break
    return ExpectedShare(hours, median, worst, data["worlds"], data["seeds"], space)


CONFIRM_SHARE = 1 / 3
"""The most of a time budget confirmation may take: the rest is for the search."""


@dataclass(frozen=True)
class Confirmation:
    """What is measured again on fresh servers after the trials.

    Attributes:
        top: the best configs confirmed (0: none).
        repeats: fresh-server runs of each.
        k_table: whether the per-batch-size K table gets as many runs of its own, where the
            space can propose one (several levels, vLLM 0.24+).
    """

    top: int
    repeats: int
    k_table: bool = True

    def runs(self, space: SearchSpace) -> int:
        """Fresh-server runs after the trials."""
        if self.top < 1:
            return 0
        return (self.top + (1 if self._table(space) else 0)) * self.repeats

    def chooses(self, space: SearchSpace) -> bool:
        """Whether its runs can change what is recommended: two configs or more, or the best
        and its K table. Runs of the best config alone re-measure it, however many."""
        return self.top > 1 or (self.top == 1 and self._table(space))

    def _table(self, space: SearchSpace) -> bool:
        table = self.k_table and len(space.workload.concurrency) > 1
        return table and has_per_batch_size(space.version)


def fit_confirmation(
    space: SearchSpace, wanted: Confirmation, budget_s: float, run_s: float
) -> Confirmation:
    """``wanted`` cut down so its confirmation runs of ``run_s`` each take at most
    :data:`CONFIRM_SHARE` of ``budget_s``: :func:`cut_confirmation`.

    A confirmation meant to choose between configs that the budget cuts to runs of the best
    alone is dropped: those runs could not change the pick, and a trial in their place can
    (on two 4090s a run is about a third of an hour: ``--time-budget 1h`` spends the hour on
    trials). A confirmation of the best alone (``--confirm-top 1``) keeps one run, whatever
    it costs: the user asked for the best measured again."""
    fitted = cut_confirmation(space, wanted, max(1, int(budget_s * CONFIRM_SHARE // run_s)))
    if wanted.top > 1 and not fitted.chooses(space):
        return replace(wanted, top=0)
    return fitted


def cut_confirmation(space: SearchSpace, wanted: Confirmation, runs: int) -> Confirmation:
    """``wanted`` cut down to at most ``runs`` fresh-server runs: fewer repeats, then fewer
    configs, then no K table; no confirmation at all (``top`` 0) when ``runs`` is 0.
    The K table goes last: a third of the budget that holds one run of the best config and
    one of its table keeps both, but the table is an extra, not the confirmation itself."""
    if runs < 1:
        return replace(wanted, top=0)
    fitted = wanted
    while fitted.repeats > 1 and fitted.runs(space) > runs:
        fitted = replace(fitted, repeats=fitted.repeats - 1)
    while fitted.top > 1 and fitted.runs(space) > runs:
        fitted = replace(fitted, top=fitted.top - 1)
    if fitted.k_table and fitted.runs(space) > runs:
        fitted = replace(fitted, k_table=False)
    return fitted


def _describe(config: TrialConfig) -> str:
    server = config.server
    spec = f"{server.draft} K={server.k}" if server.speculative else "no speculation"
    return f"{spec}, gpu-mem {server.memory_label}, batched {server.max_num_batched_tokens}"


def _mean(costs: Sequence[TrialCost]) -> TrialCost:
    n = max(1, len(costs))
    return TrialCost(sum(c.start_s for c in costs) / n, sum(c.bench_s for c in costs) / n)


def format_duration(seconds: float) -> str:
    """``1h23m``, ``4m05s``, ``12s``."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
