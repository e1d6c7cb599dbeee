"""How well the default strategy finds the best config on worlds it has never seen.

Run it (about 8 CPU-minutes, 4 minutes on 2 idle cores; ``--quick``: 3 seeds, a third of that)::

    .venv/bin/python benchmarks/search_efficiency.py [--seeds 10] [--trials 20] [--quick]

Scoring a strategy on the simulator its prior was built from proves nothing: the prior is the
truth there. Here each study measures on a **perturbed truth** (``benchmarks/worlds.py``: other
acceptance, bandwidth, memory overheads, draft cost, a workload that favours ngram, another vLLM
memory rule, a slower interconnect, H100s reaching more bandwidth), injected through the
simulator's ``Physics`` seam by the benchmark's own backend. The strategy, its prior, the
memory pre-screen and the twin keep the shipped models and learn only from their trials.

What is measured
    A world's **optimum** is found by exhaustive grid over the space with that world's noise-free
    simulator (on ``benchmarks/held_out_space.yaml``, pinned so the numbers stay put): a point's
    true value is its predicted output tok/s when it fits the world's memory
    and meets the TTFT limit, else 0. After n trials a study **reaches** the true value of the
    config it would recommend then (its best measured trial within the TTFT limit) over the
    optimum. Medians and the worst over seeds; OOM: launches that ran out of memory over all
    launches (predicted OOMs launch nothing).

Strategies (all through spectune's runner: memory pre-screen, server reuse)
    - ``spectune``: the default: warm start from the shipped simulator, then TPE steered by the
      twin fitted after every trial (``tuner.search.twin_steer``);
    - ``spectune, no twin``: the same warm start, then plain TPE;
    - ``TPE``: constraint-aware multivariate TPE alone; ``random``; ``grid`` (every grid point
      once, in a seeded random order).

The bar (issue 14), on every perturbed world: spectune's median >= 97 % of the world's optimum
after 20 trials and >= 98 % after 10, never more than 1 point below TPE, under 5 % of launches
out of memory. The last line says ``bar met`` or ``bar not met`` and names the worst world; the
script exits 1 when the bar is not met (not with ``--quick``).
"""

from __future__ import annotations

import argparse
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
from worlds import SHIPPED, WORLDS, World, WorldBackend

from tuner.config.space import SearchSpace, load_space
from tuner.config.trial import TrialConfig
from tuner.errors import StartupFailure
from tuner.search.strategy import grid_params, warm_start
from tuner.search.twin_steer import TwinSampler
from tuner.sim.engine import predict
from tuner.sim.memory import effective_batched_tokens
from tuner.study.study import StudyOptions, open_study, run_trials
from tuner.trial.record import TrialRecord
from tuner.trial.scoring import TrialStatus

STRATEGIES = ("spectune", "spectune, no twin", "TPE", "random", "grid")
BAR_20, BAR_10, BAR_TPE_POINTS, BAR_OOM = 0.97, 0.98, 0.01, 0.05
TABLE_FILE = Path("/tmp/readme/twin-table.txt")
SPACE_FILE = Path(__file__).parent / "held_out_space.yaml"  # pinned: the numbers stay put
_LOG_DIR = Path("/tmp/spectune-bench")

Key = tuple[str, int, float, int, float]  # (draft, K, utilization, batched tokens, temperature)


def key_of(config: TrialConfig) -> Key:
    server = config.server
    return (
        server.draft or "none",
        server.k,
        round(server.gpu_memory_utilization, 6),
        server.max_num_batched_tokens,
        round(config.client.temperature, 6),
    )


def config_of(space: SearchSpace, params: dict[str, Any]) -> TrialConfig:
    return space.suggest(cast(optuna.Trial, optuna.trial.FixedTrial(params)))


# --- the truth of one world --------------------------------------------------------------


def world_truth(args: tuple[str, World]) -> tuple[str, dict[Key, float]]:
    """The true value of every grid point in ``world``: tok/s if it fits and meets the limit."""
    world = args[1]
    space = world.space(args[0])
    hardware = world.hardware(space.hardware)
    speed: dict[tuple[Any, ...], float] = {}
    truth: dict[Key, float] = {}
    for params in grid_params(space):
        config = config_of(space, params)
        server = config.server
        draft = space.draft_model(str(params["draft"]))
        memory = world.memory(hardware, space.target, draft, server)
        if not memory.fits:
            truth[key_of(config)] = 0.0
            continue
        # At one request in flight only the prefill chunking depends on the memory settings.
        chunk = min(effective_batched_tokens(server), space.workload.input_tokens)
        run = (server.draft, server.k, config.client.temperature, chunk)
        if run not in speed:
            try:
                result = predict(
                    hardware,
                    space.target,
                    draft,
                    server,
                    config.client.temperature,
                    space.workload,
                    space.workload.concurrency[0],
                    physics=world,
                )
            except StartupFailure:
                speed[run] = 0.0
            else:
                ttft = result.ttft_ms(95)
                ok = ttft is not None and ttft <= space.ttft_limit_ms
                speed[run] = result.output_tok_s if ok else 0.0
        truth[key_of(config)] = speed[run]
    return world.name, truth


# --- one study -----------------------------------------------------------------------------


@dataclass
class Trace:
    shares: list[float] = field(default_factory=list)
    launches: int = 0
    ooms: int = 0

    def reached(self, n: int) -> float:
        return self.shares[min(n, len(self.shares)) - 1] if self.shares else 0.0


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
    best: list[tuple[float, Key]] = []

    def on_trial(record: TrialRecord) -> None:
        trace.launches += record.restarted
        trace.ooms += record.status is TrialStatus.OOM
        if record.feasible and record.values is not None:
            measured = record.values[0]
            if not best or measured > best[0][0]:
                server = record.server
                key = (
                    server.draft or "none",
                    server.k,
                    round(server.gpu_memory_utilization, 6),
                    server.max_num_batched_tokens,
                    round(record.temperature, 6),
                )
                best[:] = [(measured, key)]
        trace.shares.append(truth[best[0][1]] / optimum if best else 0.0)

    storage = optuna.storages.InMemoryStorage()
    study = open_study("bench", storage, space, _sampler(task.strategy, space, task.seed))[0]
    if task.strategy.startswith("spectune"):
        warm_start(study, space, task.trials)
    backend = WorldBackend(space.hardware, task.world, task.seed)
    options = StudyOptions(task.trials, task.seed, _LOG_DIR, space.ttft_limit_ms)
    run_trials(study, space, backend, options, on_trial)
    return task, trace


# --- the report ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    at10: float
    at20: float
    worst20: float
    oom: float


def summarise(traces: Sequence[Trace], trials: int) -> Row:
    launches = sum(t.launches for t in traces)
    return Row(
        statistics.median(t.reached(min(10, trials)) for t in traces),
        statistics.median(t.reached(trials) for t in traces),
        min(t.reached(trials) for t in traces),
        sum(t.ooms for t in traces) / launches if launches else 0.0,
    )


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--space", default=str(SPACE_FILE), help="a space name or YAML path")
    parser.add_argument("--quick", action="store_true", help="3 seeds: a smoke test")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    seeds = 3 if args.quick else args.seeds
    worlds = (SHIPPED, *WORLDS)
    started = time.monotonic()
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    space = load_space(args.space)
    say(f"# Search on held-out worlds: {space.name}, {seeds} seeds x {args.trials} trials")
    say("median share of the world's optimum after 10 / 20 trials, worst seed after 20, OOM share")
    say("of launches; the strategy, prior, pre-screen and twin know only the shipped simulator\n")
    with ProcessPoolExecutor(args.jobs) as pool:
        truths = dict(pool.map(world_truth, [(args.space, w) for w in worlds]))
    tasks = [
        Task(args.space, w, s, seed, args.trials)
        for w in worlds
        for s in STRATEGIES
        for seed in range(seeds)
    ]
    traces: dict[tuple[str, str], list[Trace]] = {}
    with ProcessPoolExecutor(args.jobs, initializer=_init_worker, initargs=(truths,)) as pool:
        for done, (task, trace) in enumerate(pool.map(run_task, tasks), 1):
            traces.setdefault((task.world.name, task.strategy), []).append(trace)
            if done % 50 == 0:
                print(f"  {done}/{len(tasks)} studies", file=sys.stderr, flush=True)
    head = "| world | strategy | after 10 | after 20 | worst after 20 | OOM launches |"
    say(head)
    say("|---|---|---|---|---|---|")
    results = []
    for world in worlds:
        rows = {s: summarise(traces[(world.name, s)], args.trials) for s in STRATEGIES}
        for name, row in rows.items():
            say(
                f"| {world.name} | {name} | {_pct(row.at10)} | {_pct(row.at20)} | "
                f"{_pct(row.worst20)} | {_pct(row.oom)} |"
            )
        if world is not SHIPPED:
            results.append(verdict(world.name, rows))
    say()
    for world in WORLDS:
        say(f"- {world.name}: {world.note}")
    say(f"\n({time.monotonic() - started:.0f} s)")
    met = all(ok for ok, _, _ in results)
    worst = min(results, key=lambda r: r[1])
    say(f"{'bar met' if met else 'bar not met'}; worst world {worst[2]}")
    if not args.quick:
        TABLE_FILE.parent.mkdir(parents=True, exist_ok=True)
        TABLE_FILE.write_text("\n".join(lines) + "\n")
    return 0 if met or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
