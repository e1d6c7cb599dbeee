"""How well the default strategy finds the best config on worlds it has never seen.

Run it (the whole table, 6 strategies x 10 seeds, each study to 4 simulated GPU-hours, takes
hours of CPU; ``--strategies spectune TPE --jobs 2`` took 30 minutes on 2 idle cores, 10
minutes with ``--max-hours 2``; ``--write`` stores the GPU-time shares ``optimize --plan``
quotes)::

    .venv/bin/python benchmarks/search_efficiency.py [--seeds 10] [--trials 20] [--quick]
        [--strategies spectune TPE ...] [--max-hours 4] [--write] [--worlds NAME ...]

    # the GPU-time table on the shipped default space (six pairs of 40 requests per trial: 10
    # seeds, spectune and TPE, to 2 GPU-hours took 12-14 minutes on 2 idle cores with
    # --jobs 2); with --write, the shares optimize --plan quotes
    .venv/bin/python benchmarks/search_efficiency.py --space default --seeds 10 \
        --strategies spectune TPE --max-hours 2

    # the same worlds on the shipped traffic mix, per trial only (3 seeds, spectune and TPE,
    # 10- and 20-trial studies: four worlds took 17-24 minutes on 2 shared cores, all eight
    # about 45; --worlds runs a few of them)
    .venv/bin/python benchmarks/search_efficiency.py --mixed --seeds 3 --strategies spectune TPE

Scoring a strategy on the simulator its prior was built from proves nothing: the prior is the
truth there. Here each study measures on a **perturbed truth** (``benchmarks/worlds.py``: other
acceptance, bandwidth, memory overheads, draft cost, a workload that favours ngram, another vLLM
memory rule, a slower interconnect, H100s reaching more bandwidth, a desktop holding 2 GiB of
the GPU), injected through the simulator's ``Physics`` seam by the benchmark's own backend. The
strategy, its prior, the memory pre-screen and the twin keep the shipped models and learn only
from their trials, and from what the study start reads of the world's GPUs as ``optimize``
reads a host's through NVML: the memory other processes hold (``tuner.catalog.tenants``).

What is measured
    A world's **optimum** is found by exhaustive grid over the space with that world's noise-free
    simulator (every (draft, K) with every combination of its method's own settings and
    options: ``tuner.search.screen.grid_params``; each config keyed whole; by default on
    ``benchmarks/held_out_space.yaml``, pinned so the numbers stay put): a point's true value
    is its score as a trial is scored, on the space's whole traffic: the weighted predicted
    output tok/s over its (level, temperature) pairs when it fits the world's memory and meets
    the TTFT limit at every pair, else 0. After n trials a study **reaches** the true
    value of the config it would recommend then (its best measured trial within the TTFT limit)
    over the optimum (a config sampled between the grid's points, a continuous setting such
    as suffix decoding's token probability, is scored the same way when a study reaches
    it: ``truth.config_truth``). Medians and the worst over seeds; OOM: launches that ran out
    of memory over all launches (predicted OOMs launch nothing).

    **On the shipped traffic mix** (``--mixed``): the same space served to the default space's
    traffic (1, 8 and 32 requests in flight, 50/30/20 % of the time, at temperatures 0.2 and
    0.8: ``benchmarks/held_out_mixed_space.yaml``), each world's optimum on that mix. A study
    told it has 10 trials plans them as such (its warm start is sized to its budget), so the
    columns after 10 come from studies given 10 trials, those after 20 from studies
    given 20; no clock, no GPU-time table.

    **In GPU time** (the second table): every study also runs on the simulator's clock until
    it has spent :data:`HOURS` (the longest) of simulated GPU time: each server start-up costs
    the plan's start-up prior (``tuner.search.plan``: engine start plus the weights at its load
    rate; the simulator starts nothing, so this prior is its clock), a failed start-up too; each
    benchmark its simulated duration plus the warm-up requests' share. After t hours a study
    reaches what ``optimize --time-budget t`` would recommend: the budget's own rule replayed
    on the study's clock (``Trace.budget_end``: another trial while it and the confirmation
    runs the budget keeps still fit, each priced at the mean trial that started a server; the
    default 3 configs x 3 fresh runs, and 3 more for the K table on a space with several
    levels, cut to what fits in a third of t, none where that is one run of the best alone:
    ``fit_confirmation``), then the runs that fit
    in the time left measure its top configs again in the world, each on a fresh server, and
    its pick ranks them on those runs (``recommended``: ``tuner.study.confirm``,
    ``tuner.analysis.picks``), so a config measured once luckily fast loses its place as it
    does in ``optimize``; where the trials overran and no run fits, its best as measured
    (the run ends on time). What a user who types ``--time-budget`` pays, and what
    ``optimize --plan`` quotes (``--write``). A pruned trial is never the best. Beside it,
    the share after 2 hours with ``optimize``'s default confirmation (no budget: at the last
    trial that leaves time for it, the best as measured) and what that takes: on the default
    space its 12 runs alone take about 2.5 GPU-hours on two 4090s.

Strategies (all through spectune's runner: memory pre-screen, server reuse)
    - ``spectune``: the default: warm start from the shipped simulator, then TPE steered by the
      twin fitted after every trial (``tuner.search.twin_steer``), each pair measured in rounds
      against the incumbent and losing trials pruned (``tuner.trial.rounds``, ``race``);
    - ``spectune, fixed count``: the same, every pair at the workload's fixed count;
    - ``spectune, no twin``: the same warm start, then plain TPE, in rounds;
    - ``TPE``: constraint-aware multivariate TPE alone; ``random``; ``grid`` (every grid point
      once, in a seeded random order): all three at the fixed count, as today's tools measure.

The bar (issue 14), on every perturbed world: spectune's median >= 97 % of the world's optimum
after 20 trials and >= 98 % after 10, never more than 1 point below TPE, under 5 % of launches
out of memory. The last line says ``bar met`` or ``bar not met`` and names the worst world; the
script exits 1 when the bar is not met (not with ``--quick``). The GPU-time table has its own
line (issue 27's aim: a median >= 97 % after 2 GPU-hours on each held-out world, never below
TPE at the same GPU time), reported beside it, not yet part of the exit status; the shorter
budgets where spectune is below TPE are listed above it (``below TPE before 2 h: ...``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import warnings
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import optuna
from optuna.trial import FrozenTrial

sys.path.insert(0, str(Path(__file__).parent))
from truth import Key, config_of, config_truth, key_of, world_truths
from worlds import SHIPPED, WORLDS, World, WorldBackend

from tuner.analysis.picks import recommend
from tuner.catalog.models import load_model
from tuner.catalog.tenants import read_tenants, record_tenants
from tuner.config.space import SearchSpace, load_space
from tuner.config.trial import (
    LaunchContext,
    ServerConfig,
    TrialConfig,
    load_draft,
)
from tuner.results import Endpoint, TrialResult
from tuner.search.plan import (
    LOAD_GB_PER_S,
    START_PRIOR_S,
    Confirmation,
    TrialCost,
    cut_confirmation,
    fit_confirmation,
    plan_study,
)
from tuner.search.screen import grid_params
from tuner.search.strategy import predicted_configs, warm_start
from tuner.search.twin_steer import TwinSampler
from tuner.study.budget import Budget, another_fits, runs_that_fit
from tuner.study.confirm import confirm
from tuner.study.study import StudyOptions, open_study, run_trials
from tuner.trial.backends import Backend
from tuner.trial.record import TrialRecord
from tuner.trial.scoring import TrialStatus

STRATEGIES = ("spectune", "spectune, fixed count", "spectune, no twin", "TPE", "random", "grid")
ROUNDS = ("spectune", "spectune, no twin")  # the strategies measuring in rounds, pruning
HOURS = (0.5, 1.0, 2.0, 4.0)  # the GPU-time table's columns
MAX_TRIALS = 400  # a study on the clock stops here if it has not spent HOURS[-1] by then
DEFAULT_CONFIRMATION = Confirmation(top=3, repeats=3)  # optimize's defaults
BAR_20, BAR_10, BAR_TPE_POINTS, BAR_OOM = 0.97, 0.98, 0.01, 0.05
BAR_HOURS, BAR_AT_HOURS = 0.97, 2.0
TABLE_FILE = Path("/tmp/readme/twin-table.txt")
# What optimize --plan quotes: the held-out worlds' shares per GPU-time budget (--write).
SHARES_FILE = Path(__file__).parent.parent / "tuner" / "search" / "gpu_time_shares.json"
SPACE_FILE = Path(__file__).parent / "held_out_space.yaml"  # pinned: the numbers stay put
# The same space scored on the shipped default space's traffic mix (--mixed), pinned too.
MIXED_SPACE_FILE = Path(__file__).parent / "held_out_mixed_space.yaml"
MIXED_TABLE_FILE = Path("/tmp/readme/twin-mixed-table.txt")
_LOG_DIR = Path("/tmp/spectune-bench")

# --- one study -----------------------------------------------------------------------------


@dataclass
class Trace:
    shares: list[float] = field(default_factory=list)
    launches: int = 0
    ooms: int = 0
    clock: list[float] = field(default_factory=list)  # simulated GPU seconds after each trial
    restarted: list[bool] = field(default_factory=list)  # whether each trial started a server
    numbers: list[int] = field(default_factory=list)  # each trial's number in its study
    confirm: list[float] = field(default_factory=list)  # the best's confirmation then
    # The share of what optimize --time-budget recommends after each of HOURS, confirmed.
    budget_shares: dict[float, float] = field(default_factory=dict)
    prior_s: float = 0.0  # the plan's price of a trial with a start-up, before one is measured
    pruned: int = 0
    chosen_pruned: int = 0  # times a pruned or early-stopped trial was the best (must stay 0)

    def reached(self, n: int) -> float:
        return self.shares[min(n, len(self.shares)) - 1] if self.shares else 0.0

    @property
    def trials(self) -> int:
        """Trials run: ``shares`` goes on past them when the clock ran out before ``trials``."""
        return len(self.clock)

    def budget_end(self, seconds: float, runs: int) -> tuple[int, int]:
        """Where ``optimize --time-budget`` keeping ``runs`` confirmation runs ends, replayed on
        this study's clock: (its trials, the confirmation runs that fit in what they left).
        :class:`~tuner.study.budget.Budget`'s rule: another trial while it and the runs fit,
        each priced at the mean trial that started a server (else the plan's prior); then as
        many runs as fit at that price (none: the run ends on time, unconfirmed). Where the
        last trial overran the budget, the trials that ended within it and no run (an
        interrupted study)."""
        trials = 0
        started: list[float] = []

        def per_trial() -> float:
            return statistics.fmean(started) if started else self.prior_s

        def spent(n: int) -> float:
            return self.clock[n - 1] if n else 0.0

        while trials < len(self.clock) and another_fits(seconds, spent(trials), per_trial(), runs):
            if self.restarted[trials]:
                started.append(self.clock[trials] - spent(trials))
            trials += 1
        if not trials or spent(trials) > seconds:
            return sum(s <= seconds for s in self.clock[:trials]), 0
        return trials, min(runs, runs_that_fit(seconds - spent(trials), per_trial()))

    def reached_unbudgeted(self, seconds: float) -> float:
        """The share within ``seconds`` with ``optimize``'s default confirmation and no
        budget: at the last trial that leaves time for it, at the best config's cost."""
        ran = self.shares[: self.trials]
        fits = [
            share
            for share, spent, confirm in zip(ran, self.clock, self.confirm, strict=True)
            if spent + confirm <= seconds
        ]
        return fits[-1] if fits else 0.0

    def confirm_in(self, seconds: float) -> float:
        """The confirmation of the best config after the last trial ending within ``seconds``."""
        fits = [c for spent, c in zip(self.clock, self.confirm, strict=True) if spent <= seconds]
        return fits[-1] if fits else 0.0


class ClockedBackend:
    """A world's backend that adds up the simulated GPU time it spends (the backend protocol
    of ``tuner.trial``, delegating to ``WorldBackend``)."""

    name = "sim"

    def __init__(self, inner: WorldBackend) -> None:
        self.inner = inner
        self.source = inner.source
        self.spent_s = 0.0

    def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint:
        self.spent_s += start_s(server)  # a start-up that fails has taken its time too
        return self.inner.start(server, context)

    def measure(self, config: TrialConfig, concurrency: int, seed: int) -> TrialResult:
        result = self.inner.measure(config, concurrency, seed)
        self.spent_s += bench_s(result, config.client.workload.warmup)
        return result

    def stop(self) -> None:
        self.inner.stop()

    def close(self) -> None:
        self.inner.close()

    def facts(self, space: SearchSpace) -> Any:
        return self.inner.facts(space)


def stopped_early(record: TrialRecord, requests: int) -> bool:
    """Pruned, or a pair stopped under the workload's count (only a losing pair may: rounds)."""
    return record.pruned is not None or any(
        int(level.get("requests") or requests) < requests for level in record.levels
    )


def start_s(server: ServerConfig) -> float:
    """A server start-up on the clock: the plan's prior (engine start, then the weights)."""
    draft = load_draft(server)
    weights = load_model(server.model).weight_bytes + (draft.weight_bytes if draft else 0.0)
    return START_PRIOR_S + weights / server.tensor_parallel_size / (LOAD_GB_PER_S * 1e9)


def bench_s(result: TrialResult, warmup: int) -> float:
    """A benchmark on the clock: its duration, and its warm-up requests at a slot's share."""
    slots = min(result.concurrency, max(1, len(result.requests)))
    return result.duration_s * (1 + warmup * slots / max(1, len(result.requests)))


def confirm_s(space: SearchSpace, record: TrialRecord) -> float:
    """The confirmation runs of ``record``'s config: fresh start-ups, fixed-count benchmarks."""
    workload = space.workload
    bench = sum(
        float(level["duration_s"]) * (workload.requests + workload.warmup) / int(level["requests"])
        for level in record.levels
        if level.get("requests")
    )
    runs = DEFAULT_CONFIRMATION.runs(space)
    return runs * (start_s(record.server) + bench)


def budget_confirmation(space: SearchSpace, run_s: float, seconds: float) -> Confirmation:
    """The confirmation ``optimize --time-budget`` keeps for ``seconds``: as much of the
    default's as fits in a third of it at the plan's prior cost of a run, ``run_s``
    (``tuner.study.run``)."""
    return fit_confirmation(space, DEFAULT_CONFIRMATION, seconds, run_s)


class ClockBudget(Budget):
    """Another trial while the clock is under ``seconds`` (and under :data:`MAX_TRIALS`)."""

    def __init__(self, seconds: float, backend: ClockedBackend) -> None:
        super().__init__(seconds, TrialCost(0.0, 0.0), 0)
        self.backend = backend

    def allows_another(self, study: optuna.Study) -> bool:
        return self.backend.spent_s < self.seconds and len(study.trials) < MAX_TRIALS


class _GridSampler(optuna.samplers.BaseSampler):
    """Hands out a fixed list of points in order: the grid, shuffled once per seed."""

    def __init__(self, points: Sequence[dict[str, Any]]) -> None:
        self.points = points

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return {}

    def sample_relative(self, study: Any, trial: Any, search_space: Any) -> dict[str, Any]:
        return {}

    def sample_independent(
        self, study: Any, trial: FrozenTrial, param_name: str, param_distribution: Any
    ) -> Any:
        return self.points[trial.number % len(self.points)][param_name]


def _tpe(seed: int) -> optuna.samplers.BaseSampler:
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=8)


def _sampler(strategy: str, space: SearchSpace, seed: int) -> optuna.samplers.BaseSampler:
    if strategy == "spectune":
        return TwinSampler(_tpe(seed))
    if strategy in ("spectune, no twin", "TPE"):
        return _tpe(seed)
    if strategy == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    points = list(grid_params(space))
    random.Random(seed).shuffle(points)
    return _GridSampler(points)


@dataclass(frozen=True)
class Task:
    space: str
    world: World
    strategy: str
    seed: int
    trials: int
    hours: float | None = HOURS[-1]  # None: no clock, the study stops after ``trials``


_TRUTHS: dict[str, dict[Key, float]] = {}


def _init_worker(truths: dict[str, dict[Key, float]]) -> None:
    _TRUTHS.update(truths)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def run_task(task: Task) -> tuple[Task, Trace]:
    space = task.world.space(task.space)
    truth = _TRUTHS[task.world.name]
    optimum = max(truth.values())
    trace = Trace()
    best: list[tuple[float, Key, TrialRecord]] = []
    backend = ClockedBackend(WorldBackend(space.hardware, task.world, task.seed, space.version))
    known: dict[tuple[Any, ...], TrialResult | None] = {}  # noise-free runs, shared

    def share(record: TrialRecord) -> float:
        key = key_of(record.server, record.trial_temperature)
        if key not in truth:  # a continuous setting sampled between the grid's points
            config = config_of(space, dict(record.params))
            truth[key] = config_truth(space, task.world, config, known)
        return truth[key] / optimum

    def on_trial(record: TrialRecord) -> None:
        trace.launches += record.restarted
        trace.ooms += record.status is TrialStatus.OOM
        trace.pruned += record.pruned is not None
        if record.feasible and record.values is not None:
            measured = record.values[0]
            if not best or measured > best[0][0]:
                best[:] = [(measured, key_of(record.server, record.trial_temperature), record)]
        trace.chosen_pruned += bool(best) and stopped_early(best[0][2], space.workload.requests)
        trace.shares.append(share(best[0][2]) if best else 0.0)
        trace.clock.append(backend.spent_s)
        trace.restarted.append(record.restarted)
        trace.numbers.append(record.number)
        trace.confirm.append(confirm_s(space, best[0][2]) if best else 0.0)

    storage = optuna.storages.InMemoryStorage()
    study = open_study("bench", storage, space, _sampler(task.strategy, space, task.seed))[0]
    # The study start reads the world's GPUs as optimize reads a host's through NVML.
    tenants = read_tenants(backend.inner.gpu_monitor())
    record_tenants(study, tenants)
    if task.strategy.startswith("spectune"):
        warm_start(study, space, task.trials)
    budget = None if task.hours is None else ClockBudget(task.hours * 3600.0, backend)
    options = StudyOptions(
        task.trials if budget is None else MAX_TRIALS,
        task.seed,
        _LOG_DIR,
        space.ttft_limit_ms,
        budget=budget,
        rounds=task.strategy in ROUNDS,
        held_gib=tenants.gib,
    )
    trace.prior_s = plan_study(space, task.trials, DEFAULT_CONFIRMATION).confirm_cost.total_s
    run_trials(study, space, cast(Backend, backend), options, on_trial)
    while len(trace.shares) < task.trials:  # the clock ran out first: the best stays the best
        trace.shares.append(trace.shares[-1] if trace.shares else 0.0)
    for hours in HOURS if task.hours is None else [h for h in HOURS if h <= task.hours]:
        seconds = hours * 3600.0
        wanted = budget_confirmation(space, trace.prior_s, seconds)
        trials, runs = trace.budget_end(seconds, wanted.runs(space))
        kept = cut_confirmation(space, wanted, runs)
        chosen = recommended(study, space, backend.inner, trace.numbers[:trials], kept, task.seed)
        trace.budget_shares[hours] = 0.0 if chosen is None else share(chosen)
        trace.chosen_pruned += chosen is not None and stopped_early(chosen, space.workload.requests)
    return task, trace


def recommended(
    study: optuna.Study,
    space: SearchSpace,
    backend: WorldBackend,
    numbers: Sequence[int],
    confirmation: Confirmation,
    seed: int,
) -> TrialRecord | None:
    """What ``optimize`` recommends after the trials ``numbers`` of ``study`` and
    ``confirmation``: its own confirmation (``tuner.study.confirm``: the top configs run again
    on fresh servers of the world) and pick (``tuner.analysis.picks``: confirmed numbers
    first) on a copy of the study holding those trials only."""
    if not numbers:
        return None
    chosen = set(numbers)
    copy = optuna.create_study(
        storage=optuna.storages.InMemoryStorage(), directions=study.directions
    )
    for key, value in study.user_attrs.items():
        copy.set_user_attr(key, value)
    copy.add_trials([t for t in study.get_trials(deepcopy=False) if t.number in chosen])
    if confirmation.top:
        confirm(
            copy,
            space,
            backend,
            confirmation.top,
            confirmation.repeats,
            log_dir=_LOG_DIR,
            seed=seed,
        )
    pick = recommend(copy)
    return None if pick is None else pick.record


def favourite_standing(
    space_name: str, world: World, truth: dict[Key, float]
) -> tuple[float, float]:
    """Where the config the prior ranks first stands in ``world``: its share of the optimum,
    and the share of the configs that start it beats. (The warm start's first trial is this
    config, or the same at a roomier memory setting where it leaves less than a first launch
    keeps: :func:`tuner.search.strategy.warm_start_configs`.)"""
    space = world.space(space_name)
    monitor = WorldBackend(space.hardware, world, 0, space.version).gpu_monitor()
    first = predicted_configs(space, read_tenants(monitor).gib)[0]
    config = config_of(space, first.params)
    value = truth[key_of(config.server, config.client.sampling_temperature)]
    started = [v for v in truth.values() if v > 0]
    return value / max(started), sum(v < value for v in started) / len(started)


# --- the report ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    at10: float
    at20: float
    worst10: float
    worst20: float
    oom: float


def summarise(traces: Sequence[Trace], trials: int, first: Sequence[Trace] = ()) -> Row:
    """The row of one (world, strategy); ``first``: studies given 10 trials, for the columns
    after 10 (default: the first 10 trials of ``traces``). The OOM share is ``traces``'."""
    early = first or traces
    launches = sum(t.launches for t in traces)
    return Row(
        statistics.median(t.reached(min(10, trials)) for t in early),
        statistics.median(t.reached(trials) for t in traces),
        min(t.reached(min(10, trials)) for t in early),
        min(t.reached(trials) for t in traces),
        sum(t.ooms for t in traces) / launches if launches else 0.0,
    )


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _lead(ours: float, tpe: float) -> float:
    """How far spectune's share is above TPE's, as the tables print them (to a tenth of a
    point): two medians that print alike are a tie, not a loss. One run of a config varies by
    about 1 % (``confirmation_noise.py``), so no study can tell finer apart."""
    return (round(100 * ours, 1) - round(100 * tpe, 1)) / 100


def verdict(world: str, rows: dict[str, Row]) -> tuple[bool, float, str]:
    """(met, slack, why) for one world; the slack is the smallest margin over the bar."""
    ours, tpe = rows["spectune"], rows["TPE"]
    checks = [
        (ours.at20 - BAR_20, f"after 20 {_pct(ours.at20)} (>= {_pct(BAR_20)})"),
        (ours.at10 - BAR_10, f"after 10 {_pct(ours.at10)} (>= {_pct(BAR_10)})"),
        (ours.at20 - tpe.at20 + BAR_TPE_POINTS, f"vs TPE {_pct(tpe.at20)} after 20"),
        (ours.at10 - tpe.at10 + BAR_TPE_POINTS, f"vs TPE {_pct(tpe.at10)} after 10"),
        (BAR_OOM - ours.oom - 1e-12, f"OOM {_pct(ours.oom)} (< {_pct(BAR_OOM)})"),
    ]
    slack, why = min(checks)
    return slack >= 0, slack, f"{world}: {why}"


@dataclass(frozen=True)
class TimeRow:
    shares: tuple[float, ...]  # the median share after each of HOURS, --time-budget's runs
    trials_2h: float  # median trials run within 2 GPU-hours
    default_2h: float  # median share after 2 GPU-hours with optimize's default confirmation
    confirm_2h: float  # median GPU-hours the best config's default confirmation takes then
    pruned: float  # pruned over all trials
    chosen_pruned: int  # times a pruned or early-stopped trial was the best (0)


def summarise_time(traces: Sequence[Trace], hours: Sequence[float]) -> TimeRow:
    trials = sum(t.trials for t in traces)
    two = BAR_AT_HOURS * 3600.0
    return TimeRow(
        tuple(statistics.median(t.budget_shares[h] for t in traces) for h in hours),
        statistics.median(sum(c <= two for c in t.clock) for t in traces),
        statistics.median(t.reached_unbudgeted(two) for t in traces),
        statistics.median(t.confirm_in(two) for t in traces) / 3600.0,
        sum(t.pruned for t in traces) / trials if trials else 0.0,
        sum(t.chosen_pruned for t in traces),
    )


def time_verdict(
    world: str, rows: dict[str, TimeRow], hours: Sequence[float]
) -> tuple[bool, float, str]:
    """(met, slack, why) for one world against the GPU-time aim (issue 27): a median of at
    least :data:`BAR_HOURS` after :data:`BAR_AT_HOURS`, not below plain TPE's after as much
    GPU time (as printed: :func:`_lead`), no pruned or early-stopped trial recommended. The
    shorter budgets are reported beside it (:func:`behind_earlier`), not judged: half an hour
    on the default space holds one trial, and one trial is a first pick, not a search."""
    at = list(hours).index(BAR_AT_HOURS)
    ours, tpe = rows["spectune"].shares[at], rows["TPE"].shares[at]
    checks = [
        (ours - BAR_HOURS, f"after {BAR_AT_HOURS:g} h {_pct(ours)} (>= {_pct(BAR_HOURS)})"),
        (
            1.0 if not rows["spectune"].chosen_pruned else -1.0,
            "a pruned or early-stopped trial recommended",
        ),
        (_lead(ours, tpe), f"vs TPE {_pct(tpe)} after {BAR_AT_HOURS:g} h"),
    ]
    slack, why = min(checks)
    return slack >= 0, slack, f"{world}: {why}"


def behind_earlier(world: str, rows: dict[str, TimeRow], hours: Sequence[float]) -> list[str]:
    """The budgets shorter than :data:`BAR_AT_HOURS` where spectune's median is below TPE's."""
    at = list(hours).index(BAR_AT_HOURS)
    pairs = zip(rows["spectune"].shares[:at], rows["TPE"].shares[:at], strict=True)
    return [
        f"{world} after {hours[i]:g} h ({_pct(ours)} against {_pct(tpe)})"
        for i, (ours, tpe) in enumerate(pairs)
        if _lead(ours, tpe) < 0
    ]


def time_table(
    worlds: Sequence[World],
    strategies: Sequence[str],
    traces: dict[tuple[str, str], list[Trace]],
    say: Any,
    hours: Sequence[float],
) -> tuple[list[tuple[bool, float, str]], dict[str, list[float]]]:
    """Prints the GPU-time table; returns its verdicts and spectune's median shares per world."""
    heads = " | ".join(f"{h:g} h" for h in hours)
    tail = "trials in 2 h | 2 h, default confirmation | its GPU time | pruned"
    say(f"| world | strategy | {heads} | {tail} |")
    say("|---|---|" + "---|" * len(hours) + "---|---|---|---|")
    results = []
    behind: list[str] = []
    ours: dict[str, list[float]] = {}
    for world in worlds:
        rows = {s: summarise_time(traces[(world.name, s)], hours) for s in strategies}
        for name, row in rows.items():
            shares = " | ".join(_pct(x) for x in row.shares)
            say(
                f"| {world.name} | {name} | {shares} | {row.trials_2h:.0f} | "
                f"{_pct(row.default_2h)} | {row.confirm_2h:.1f} h | {_pct(row.pruned)} |"
            )
        ours[world.name] = list(rows["spectune"].shares)
        if world is not SHIPPED:
            results.append(time_verdict(world.name, rows, hours))
            behind += behind_earlier(world.name, rows, hours)
    say(f"\nbelow TPE before {BAR_AT_HOURS:g} h: {'; '.join(behind) or 'nowhere'}")
    return results, ours


def write_shares(
    ours: dict[str, list[float]], space: str, seeds: int, hours: Sequence[float]
) -> None:
    """The held-out worlds' median shares per budget on ``space``, for ``optimize --plan`` to
    quote (beside the other spaces' already written)."""
    held_out = [shares for name, shares in ours.items() if name != SHIPPED.name]
    spaces = json.loads(SHARES_FILE.read_text())["spaces"] if SHARES_FILE.exists() else {}
    spaces[space] = {
        "seeds": seeds,
        "worlds": len(held_out),
        "hours": list(hours),
        "median": [statistics.median(s[i] for s in held_out) for i in range(len(hours))],
        "worst": [min(s[i] for s in held_out) for i in range(len(hours))],
    }
    SHARES_FILE.write_text(json.dumps({"spaces": spaces}, indent=1, sort_keys=True) + "\n")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--space", default=None, help="a space name or YAML path")
    parser.add_argument(
        "--mixed",
        action="store_true",
        help=f"tune {MIXED_SPACE_FILE.name} (the shipped traffic mix), each study to --trials "
        "trials, no GPU-time table",
    )
    parser.add_argument(
        "--worlds",
        nargs="+",
        choices=[w.name for w in WORLDS],
        default=None,
        help="the held-out worlds to run (default: all; the shipped world always runs)",
    )
    parser.add_argument("--quick", action="store_true", help="3 seeds: a smoke test")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--strategies",
        nargs="+",
        choices=STRATEGIES,
        default=list(STRATEGIES),
        help="the strategies to run (spectune and TPE always run: the bars compare them)",
    )
    parser.add_argument(
        "--max-hours",
        type=float,
        default=HOURS[-1],
        help="stop each study's clock here (the GPU-time table's columns up to it)",
    )
    parser.add_argument(
        "--write", action="store_true", help=f"write the GPU-time shares to {SHARES_FILE.name}"
    )
    return parser


def run_studies(
    space: str,
    worlds: Sequence[World],
    strategies: Sequence[str],
    seeds: int,
    budgets: Sequence[int],
    hours: float | None,
    jobs: int,
    truths: dict[str, dict[Key, float]],
) -> dict[tuple[str, str, int], list[Trace]]:
    """Every (world, strategy, seed, trial budget) study, judged on each world's truth."""
    tasks = [
        Task(space, w, s, seed, trials, hours)
        for w in worlds
        for s in strategies
        for seed in range(seeds)
        for trials in budgets
    ]
    traces: dict[tuple[str, str, int], list[Trace]] = {}
    with ProcessPoolExecutor(jobs, initializer=_init_worker, initargs=(truths,)) as pool:
        for done, (task, trace) in enumerate(pool.map(run_task, tasks), 1):
            key = (task.world.name, task.strategy, task.trials)
            traces.setdefault(key, []).append(trace)
            if done % 50 == 0:
                print(f"  {done}/{len(tasks)} studies", file=sys.stderr, flush=True)
    return traces


def trial_table(
    worlds: Sequence[World],
    strategies: Sequence[str],
    traces: dict[tuple[str, str, int], list[Trace]],
    trials: int,
    say: Any,
) -> list[tuple[bool, float, str]]:
    """Prints the per-trial table; returns the held-out worlds' verdicts. The columns after 10
    come from the studies given 10 trials where they ran, else from the longer ones."""
    heads = "after 10 | after 20 | worst after 10 | worst after 20 | OOM launches"
    say(f"| world | strategy | {heads} |")
    say("|---|---|---|---|---|---|---|")
    results = []
    for world in worlds:
        rows = {
            s: summarise(
                traces[(world.name, s, trials)], trials, traces.get((world.name, s, 10), [])
            )
            for s in strategies
        }
        for name, row in rows.items():
            say(
                f"| {world.name} | {name} | {_pct(row.at10)} | {_pct(row.at20)} | "
                f"{_pct(row.worst10)} | {_pct(row.worst20)} | {_pct(row.oom)} |"
            )
        if world is not SHIPPED:
            results.append(verdict(world.name, rows))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    seeds = 3 if args.quick else args.seeds
    chosen = [s for s in STRATEGIES if s in {*args.strategies, "spectune", "TPE"}]
    if args.mixed and (args.space is not None or args.write):
        parser.error("--mixed tunes its own space and writes no shares: drop --space and --write")
    if not args.mixed and args.max_hours < BAR_AT_HOURS:
        parser.error(f"--max-hours {args.max_hours:g}: give at least {BAR_AT_HOURS:g}")
    space_file = str(MIXED_SPACE_FILE if args.mixed else args.space or SPACE_FILE)
    hours = [h for h in HOURS if h <= args.max_hours]
    worlds = (SHIPPED, *(w for w in WORLDS if args.worlds is None or w.name in args.worlds))
    started = time.monotonic()
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    space = load_space(space_file)
    levels = ", ".join(f"{c} x {w:.0%}" for c, w in space.workload.load_profile)
    say(f"# Search on held-out worlds: {space.name}, {seeds} seeds x {args.trials} trials")
    say(f"scored on the space's traffic (concurrency {levels}), the optimum on the same traffic;")
    say("median and worst seed's share of the world's optimum after 10 / 20 trials, OOM share")
    say("of launches; the strategy, prior, pre-screen and twin know only the shipped simulator\n")
    clock = None if args.mixed else args.max_hours
    # A study told it has 10 trials plans them (its warm start) as a 10-trial study: --mixed
    # runs one, for the columns after 10; the one-request table reads the longer studies there.
    budgets = sorted({10, args.trials}) if args.mixed and args.trials > 10 else [args.trials]
    truths = world_truths(space_file, worlds, args.jobs)
    # A world in which no config of the space starts has no optimum to reach (vLLM 0.20's
    # memory rule on a vLLM 0.34 space, which sets no memory budget): left out, and said.
    unreachable = [w for w in worlds if max(truths[w.name].values(), default=0.0) <= 0.0]
    if SHIPPED in unreachable:
        parser.error(f"no config of {space.name} starts in the shipped simulator")
    worlds = tuple(w for w in worlds if w not in unreachable)
    traces = run_studies(space_file, worlds, chosen, seeds, budgets, clock, args.jobs, truths)
    results = trial_table(worlds, chosen, traces, args.trials, say)
    if clock is not None:
        say()
        say(f"## In simulated GPU time ({seeds} seeds, each study on the simulator's clock)")
        say("median share of the world's optimum recommended within each budget, the")
        say("confirmation runs optimize --time-budget keeps included (fewer than the default's")
        say("where those would take more than a third); median trials run within 2 GPU-hours;")
        say("the median share after 2 hours with optimize's default confirmation instead, and")
        say("what that takes; pruned share of trials\n")
        clocked = {(w, s): t for (w, s, n), t in traces.items() if n == args.trials}
        timed, ours = time_table(worlds, chosen, clocked, say, hours)
    say()
    for world in worlds[1:]:
        share, beats = favourite_standing(space_file, world, truths[world.name])
        say(
            f"- {world.name}: {world.note} (the prior's favourite: {_pct(share)} of the "
            f"optimum, above {beats:.0%} of the configs that start)"
        )
    for world in unreachable:
        say(f"- {world.name}: no config of {space.name} starts in this world: left out")
    say(f"\n({time.monotonic() - started:.0f} s)")
    if clock is not None:
        timed_met = all(ok for ok, _, _ in timed)
        timed_worst = min(timed, key=lambda r: r[1])
        say(
            f"GPU-time aim {'met' if timed_met else 'not met'} (median >= {_pct(BAR_HOURS)} "
            f"after {BAR_AT_HOURS:g} h, not below TPE then, no pruned or "
            f"early-stopped trial recommended); worst world {timed_worst[2]}"
        )
        if args.write:
            write_shares(ours, space.name, seeds, hours)
    met = all(ok for ok, _, _ in results)
    worst = min(results, key=lambda r: r[1])
    say(f"{'bar met' if met else 'bar not met'}; worst world {worst[2]}")
    if not args.quick:
        table = MIXED_TABLE_FILE if args.mixed else TABLE_FILE
        table.parent.mkdir(parents=True, exist_ok=True)
        table.write_text("\n".join(lines) + "\n")
    return 0 if met or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
