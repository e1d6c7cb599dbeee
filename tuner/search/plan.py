"""What a study costs in GPU time: the plan before it runs, and the time budget while it runs.

A trial costs a server start-up when its server config differs from the one before, then a
benchmark at every (level, temperature) pair of the workload; each confirmation run costs both
(a fresh server), and so does each run of a per-batch-size K table (:func:`confirmation_runs`).
Before anything is measured, the benchmark is the simulator's prediction for the config and the
start-up its config family's price (:mod:`tuner.search.startup`): the median of the start-ups
the study (resumed) stored for the family, else a prior (:data:`START_PRIOR_S` plus the
weights at :data:`LOAD_GB_PER_S`). Once trials have run, their own wall times replace both:
the budget's estimate of the next trial is the mean of those this run measured. A simulated
run's budget (:class:`SimulatedBudget`) runs on the simulator's clock instead: the start-up
prior for each server started, each pair's simulated duration with its warm-up, as a GPU
would have spent them (the simulator has no start-up clock of its own).

With a budget, the plan keeps the trials that fit in it beside the confirmation, and quotes
the share of the optimum the search benchmark's held-out worlds reached in that much simulated
GPU time (:func:`expected_share`, from ``gpu_time_shares.json``, which
``benchmarks/search_efficiency.py --write`` writes): a figure from simulated worlds, labelled so.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.config.bounds import MAX_SECONDS
from tuner.config.space import SearchSpace
from tuner.config.trial import TrialConfig
from tuner.config.vllm_args import has_per_batch_size
from tuner.errors import ConfigError, StartupFailure
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
from tuner.trial.record import TrialRecord

__all__ = [
    "LOAD_GB_PER_S",
    "START_PRIOR_S",
    "Budget",
    "Confirmation",
    "ExpectedShare",
    "SimulatedBudget",
    "StudyPlan",
    "TrialCost",
    "another_fits",
    "cut_confirmation",
    "expected_share",
    "fit_confirmation",
    "format_duration",
    "parse_duration",
    "plan_study",
    "prior_cost",
    "runs_that_fit",
    "simulated_trial_s",
    "start_prior_s",
]

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}
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


@dataclass(frozen=True)
class StudyPlan:
    """The expected GPU time of a run, trial by trial, then its confirmation."""

    trials: tuple[tuple[str, TrialCost], ...]  # (what runs, its cost), in order
    confirm_runs: int
    confirm_cost: TrialCost  # of one confirmation run
    budget_s: float | None = None  # the run's time budget: only the trials that fit are listed
    expected: ExpectedShare | None = None  # the benchmark's share of the optimum at the budget
    # The config families whose start-ups are priced by the study's own (the rest: the prior).
    startups: tuple[tuple[Family, StartupPrice], ...] = ()
    k_table: bool = True  # False: the budget leaves no time for the K table's runs

    @property
    def trials_s(self) -> float:
        return sum(cost.total_s for _, cost in self.trials)

    @property
    def confirm_s(self) -> float:
        return self.confirm_runs * self.confirm_cost.total_s

    @property
    def total_s(self) -> float:
        return self.trials_s + self.confirm_s

    def to_dict(self) -> dict[str, object]:
        """The plan as plain JSON data (``optimize --plan --json``)."""
        return {
            "trials": [
                {
                    "config": what,
                    "start_s": cost.start_s,
                    "bench_s": cost.bench_s,
                    "bench_error_band": None if cost.band is None else cost.band.to_json(),
                    "start_from": cost.start_from(),
                }
                for what, cost in self.trials
            ],
            "start_ups": [
                {"family": family._asdict(), **price.to_dict()} for family, price in self.startups
            ],
            "confirm_runs": self.confirm_runs,
            "confirm_k_table": self.k_table,
            "confirm_run_s": self.confirm_cost.total_s,
            "total_s": self.total_s,
            "time_budget_s": self.budget_s,
            "expected_share": None if self.expected is None else self.expected.to_dict(),
        }


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

    def to_dict(self) -> dict[str, object]:
        return {
            "hours": self.hours,
            "median": self.median,
            "worst": self.worst,
            "worlds": self.worlds,
            "seeds": self.seeds,
            "space": self.space,
            "source": "simulated",
        }


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


def simulated_trial_s(record: TrialRecord, warmup: int) -> float:
    """What a simulated trial would have taken a GPU: its start-up prior when it started a
    server, then each pair's simulated duration and each round's ``warmup`` requests."""
    spent = start_prior_s(record.server) if record.restarted else 0.0
    for level in record.levels:
        duration, requests = float(level.get("duration_s") or 0.0), int(level.get("requests") or 0)
        slots = min(int(level.get("concurrency") or 1), max(1, requests))
        rounds = int(level.get("rounds") or 1)
        spent += duration * (1 + rounds * warmup * slots / max(1, requests))
    return spent


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
        table = self.k_table and len(space.workload.concurrency) > 1
        table = table and has_per_batch_size(space.version)
        return (self.top + (1 if table else 0)) * self.repeats


def fit_confirmation(
    space: SearchSpace, wanted: Confirmation, budget_s: float, run_s: float
) -> Confirmation:
    """``wanted`` cut down so its confirmation runs of ``run_s`` each take at most
    :data:`CONFIRM_SHARE` of ``budget_s`` (at least one run of one config, whatever it costs):
    :func:`cut_confirmation`."""
    return cut_confirmation(space, wanted, max(1, int(budget_s * CONFIRM_SHARE // run_s)))


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


def parse_duration(text: str) -> float:
    """Seconds in ``2h``, ``90m``, ``1h30m``, ``45s`` or plain seconds (``3600``).

    Raises:
        ConfigError: anything else, a duration that is not positive, or one over a week.
    """
    value = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        seconds = float(value)
    elif re.fullmatch(r"(\d+(\.\d+)?[hms])+", value):
        seconds = sum(
            float(n) * _UNITS[u] for n, _, u in re.findall(r"(\d+(\.\d+)?)([hms])", value)
        )
    else:
        raise ConfigError(f"--time-budget {text!r}: give a duration such as 2h, 90m or 1h30m")
    if seconds <= 0:
        raise ConfigError(f"--time-budget {text!r}: give a duration longer than 0")
    if seconds > MAX_SECONDS:  # a plan of years is a typo, and would not fit in memory
        raise ConfigError(
            f"--time-budget {text!r}: at most {MAX_SECONDS // 3600}h (a week of GPU time); "
            "for longer, run the study again to add to it"
        )
    return seconds


def another_fits(seconds: float, elapsed: float, per_trial: float, confirm_runs: int) -> bool:
    """Whether a budget of ``seconds`` that has spent ``elapsed`` holds one more trial and
    ``confirm_runs`` confirmation runs, each priced at ``per_trial``."""
    return elapsed + per_trial * (1 + confirm_runs) <= seconds


def runs_that_fit(left_s: float, run_s: float) -> int:
    """Confirmation runs of ``run_s`` each that fit in ``left_s`` (none once nothing is left)."""
    return max(0, int(left_s // run_s))


class Budget:
    """A run's time budget: another trial only while it, then confirmation, fit in what is left.

    Args:
        seconds: the whole run's budget, trials and confirmation.
        prior: the expected cost of a trial before this run has measured one.
        confirm_runs: confirmation runs to leave time for (each a fresh server).
        began: when the run began (``time.time()``); default now.
    """

    def __init__(
        self, seconds: float, prior: TrialCost, confirm_runs: int, began: float | None = None
    ) -> None:
        self.seconds = seconds
        self.prior = prior
        self.confirm_runs = confirm_runs
        self.began = time.time() if began is None else began
        self._stopped: tuple[int, float, float] | None = None  # trials run, elapsed, needed
        self._cut: tuple[int, int, float, float] | None = None  # runs wanted, kept, left, each
        self.clock = ""  # how its time is counted, where not by the wall clock

    def next_trial_s(self, study: optuna.Study) -> float:
        """A trial with a start-up, as this run measured them (else the prior)."""
        walls = [
            (t.datetime_complete - t.datetime_start).total_seconds()
            for t in self._ran(study)
            if t.datetime_complete and t.datetime_start and t.user_attrs.get("restarted")
        ]
        return sum(walls) / len(walls) if walls else self.prior.total_s

    def _ran(self, study: optuna.Study) -> list[FrozenTrial]:
        """The trials this run started (a resumed study holds earlier runs' too)."""
        ended = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        done = study.get_trials(deepcopy=False, states=ended)
        return [t for t in done if t.datetime_start and t.datetime_start.timestamp() >= self.began]

    def elapsed(self, study: optuna.Study) -> float:
        """The GPU time this run has spent: the wall time since it began."""
        del study
        return time.time() - self.began

    def allows_another(self, study: optuna.Study) -> bool:
        """Whether one more trial and the confirmation fit in what is left of the budget."""
        per_trial = self.next_trial_s(study)
        elapsed = self.elapsed(study)
        if another_fits(self.seconds, elapsed, per_trial, self.confirm_runs):
            return True
        self._stopped = (len(self._ran(study)), elapsed, per_trial * (1 + self.confirm_runs))
        return False

    def confirmation_left(
        self, study: optuna.Study, space: SearchSpace, wanted: Confirmation
    ) -> Confirmation:
        """``wanted`` cut to the runs that fit in what the trials left of the budget, each a
        trial with a start-up (:meth:`next_trial_s`); none where not even one fits. The trials
        stopped with time for ``wanted``, but a trial can overrun its forecast, and a budget
        is a promise: the run ends on time, its recommendation unconfirmed if need be."""
        each = self.next_trial_s(study)
        left = self.seconds - self.elapsed(study)
        fitted = cut_confirmation(space, wanted, runs_that_fit(left, each))
        if fitted != wanted:
            self._cut = (wanted.runs(space), fitted.runs(space), left, each)
        return fitted

    def note(self) -> str | None:
        """Why the trials stopped early and the confirmation was cut; None when the budget
        did neither."""
        parts = []
        if self._stopped is not None:
            ran, elapsed, needed = self._stopped
            parts.append(
                f"time budget {format_duration(self.seconds)}{self.clock}: stopped after {ran} "
                f"trials at {format_duration(elapsed)}, as one more (about "
                f"{format_duration(needed)} with {_runs(self.confirm_runs)}) would not fit"
            )
        if self._cut is not None:
            wanted, kept, left, each = self._cut
            what = (
                "the recommendation is one run, not confirmed"
                if kept == 0
                else f"kept {_runs(kept)} of {wanted}"
            )
            head = "" if parts else f"time budget {format_duration(self.seconds)}{self.clock}: "
            parts.append(
                f"{head}{format_duration(max(0.0, left))} left, a confirmation run about "
                f"{format_duration(each)}: {what}"
            )
        return "; ".join(parts) or None

    def check_fits(self) -> None:
        """Refuses a budget too short for even one trial and the confirmation.

        Raises:
            ConfigError: naming what one trial and the confirmation are expected to take.
        """
        needed = self.prior.total_s * (1 + self.confirm_runs)
        if needed > self.seconds:
            raise ConfigError(
                f"--time-budget {format_duration(self.seconds)} is shorter than one trial and "
                f"{_runs(self.confirm_runs)} (about {format_duration(needed)}): give "
                "more time, or fewer --confirm-top/--confirm-repeats"
            )


def _runs(count: int) -> str:
    return f"{count} confirmation run" + ("" if count == 1 else "s")


class SimulatedBudget(Budget):
    """A simulated run's budget, on the simulator's clock (:func:`simulated_trial_s`): a
    simulated trial takes what it takes on this CPU, not what it would take a GPU.

    Args:
        warmup: the workload's warm-up requests, sent before each pair's every round.
    """

    def __init__(
        self,
        seconds: float,
        prior: TrialCost,
        confirm_runs: int,
        warmup: int,
        began: float | None = None,
    ) -> None:
        super().__init__(seconds, prior, confirm_runs, began)
        self.warmup = warmup
        self.clock = " of simulated GPU time"

    def _costs(self, study: optuna.Study) -> list[tuple[bool, float]]:
        found = (TrialRecord.from_trial(t) for t in self._ran(study))
        return [(r.restarted, simulated_trial_s(r, self.warmup)) for r in found if r is not None]

    def elapsed(self, study: optuna.Study) -> float:
        return sum(cost for _, cost in self._costs(study))

    def next_trial_s(self, study: optuna.Study) -> float:
        started = [cost for restarted, cost in self._costs(study) if restarted]
        return sum(started) / len(started) if started else self.prior.total_s


def format_duration(seconds: float) -> str:
    """``1h23m``, ``4m05s``, ``12s``."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
