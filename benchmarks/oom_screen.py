"""The OOM pre-screen on held-out memory: configs the old screen skipped, OOM launches per method.

Run it (about 5 CPU-minutes; ``--quick``: one seed, fewer trials)::

    .venv/bin/python benchmarks/oom_screen.py [--seeds 2] [--trials 12] [--quick]

Each world is the shipped simulator with another memory truth (``benchmarks/worlds.py``): GPUs
that hold more (or less) outside vLLM's budget than modelled, or another vLLM's memory rule.
The screen, the warm start and the twin know only the shipped memory model.

What is measured
    **Skipped by the old screen**: grid points that start in the world (no jitter) but that
    the old pre-screen (the memory model's verdict alone) skipped, per method; and how many of
    those the new one (launch unless short by more than the model's error) launches.
    **OOM launches**: spectune's studies (warm start, then TPE steered by the twin, through
    spectune's runner and its learning pre-screen) in each world, launches that ran out of
    memory over all launches, per method; and the longest run of OOM launches in a row.

The spaces: the shipped spaces of each method family -- a draft model and ngram (the held-out
32B space), an EAGLE-3 head (``llama3.1-8b-4090x1-eagle3``), MTP layers
(``qwen3-next-80b-h100x4-mtp``) and a block drafter with an EAGLE-3 head
(``qwen3-coder-30b-fp8-4090x2-2026``) -- each served one request at a time with a short
benchmark here: memory, not speed, is what this measures.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import optuna

sys.path.insert(0, str(Path(__file__).parent))
from worlds import World, WorldBackend

from tuner.catalog.models import load_model
from tuner.config.space import SearchSpace, load_space
from tuner.config.trial import ServerConfig, load_draft
from tuner.search.screen import grid_params
from tuner.search.strategy import warm_start
from tuner.search.twin_steer import TwinSampler
from tuner.sim.band import method_family
from tuner.sim.memory import estimate_memory
from tuner.sim.oom_screen import OomScreen, memory_slacks
from tuner.study.study import StudyOptions, open_study, run_trials
from tuner.trial.record import TrialRecord
from tuner.trial.scoring import TrialStatus

SPACES = (
    str(Path(__file__).parent / "held_out_space.yaml"),
    "llama3.1-8b-4090x1-eagle3",
    "qwen3-next-80b-h100x4-mtp",
    "qwen3-coder-30b-fp8-4090x2-2026",
)
WORLDS = (
    World("memory +2 GiB", "2 GiB more outside vLLM's budget", outside_gib=2.0),
    World("memory +1.1 GiB", "1.1 GiB more outside vLLM's budget", outside_gib=1.1),
    World("memory -0.6 GiB", "0.6 GiB less outside vLLM's budget", outside_gib=-0.6),
    World("KV -0.5 GiB", "0.5 GiB more inside the budget (from the KV cache)", inside_gib=0.5),
    World("vLLM 0.20 memory", "CUDA graphs outside the budget", memory_rules="0.20.0"),
)
_LOG_DIR = Path("/tmp/spectune-bench")


def short(space: SearchSpace) -> SearchSpace:
    """``space`` served one request at a time at its first temperature, 4 requests."""
    workload = replace(
        space.workload,
        concurrency=(1,),
        concurrency_weights=(),
        temperature=space.workload.temperature[:1],
        temperature_weights=(),
        requests=4,
    )
    return replace(space, workload=workload)


def _family(server: ServerConfig) -> str:
    return str(method_family(server.method))


# --- which configs the screens skip ---------------------------------------------------------


@dataclass
class Skipped:
    start: Counter[str]  # configs that start in the world, per method family
    old: Counter[str]  # of those, skipped by the old screen
    new: Counter[str]  # of those, skipped by the new one


def skipped(space: SearchSpace, world: World) -> Skipped:
    found = Skipped(Counter(), Counter(), Counter())
    hardware = world.hardware(space.hardware)
    screen = OomScreen()
    seen: set[ServerConfig] = set()
    for params in grid_params(space):
        server = space.config(
            space.speculative(str(params["draft"]), int(params.get("num_speculative_tokens", 0))),
            float(params["gpu_memory_utilization"]),
            int(params["max_num_batched_tokens"]),
            0.0,
        ).server
        if server in seen:
            continue
        seen.add(server)
        target, draft = load_model(server.model), load_draft(server)
        if not world.memory(hardware, target, draft, server, version=space.version).fits:
            continue
        family = _family(server)
        found.start[family] += 1
        if not estimate_memory(space.hardware, target, draft, server, version=space.version).fits:
            found.old[family] += 1
            slacks = memory_slacks(space.hardware, target, draft, server)
            found.new[family] += not screen.launches(slacks)
    return found


# --- OOM launches in studies ----------------------------------------------------------------


@dataclass
class Launches:
    launches: Counter[str]
    ooms: Counter[str]
    longest: int  # OOM launches in a row, the most


def study(space: SearchSpace, world: World, seed: int, trials: int) -> Launches:
    found = Launches(Counter(), Counter(), 0)
    run = [0]

    def on_trial(record: TrialRecord) -> None:
        if not record.restarted:
            return
        family = _family(record.server)
        found.launches[family] += 1
        oom = record.status is TrialStatus.OOM
        found.ooms[family] += oom
        run[0] = run[0] + 1 if oom else 0
        found.longest = max(found.longest, run[0])

    sampler = TwinSampler(
        optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=8)
    )
    opened = open_study("oom", optuna.storages.InMemoryStorage(), space, sampler)[0]
    warm_start(opened, space, trials)
    backend = WorldBackend(space.hardware, world, seed, space.version)
    options = StudyOptions(trials, seed, _LOG_DIR, space.ttft_limit_ms)
    run_trials(opened, space, backend, options, on_trial)
    return found


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole}" if whole else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--quick", action="store_true", help="1 seed, 8 trials")
    args = parser.parse_args(argv)
    seeds, trials = (1, 8) if args.quick else (args.seeds, args.trials)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    spaces = [short(load_space(name)) for name in SPACES]
    print("# Configs that start in the world but the old screen skipped, per method")
    print("(skipped by the old screen / by the new one / configs that start, all spaces)\n")
    print("| method | " + " | ".join(w.name for w in WORLDS) + " |")
    print("|---|" + "---|" * len(WORLDS))
    cells: dict[str, list[str]] = {}
    for index, world in enumerate(WORLDS):
        found = Skipped(Counter(), Counter(), Counter())
        for space in spaces:
            one = skipped(space, world)
            found.start.update(one.start)
            found.old.update(one.old)
            found.new.update(one.new)
        for family in found.start:
            row = cells.setdefault(family, ["-"] * len(WORLDS))
            row[index] = f"{found.old[family]} / {found.new[family]} / {found.start[family]}"
    for family in sorted(cells):
        print(f"| {family} | " + " | ".join(cells[family]) + " |")
    print(f"\n# OOM launches of spectune's studies, {seeds} seeds x {trials} trials")
    print("(OOM launches / launches per method; the longest run of OOM launches in a row)\n")
    print("| world | space | OOM launches per method | longest run |")
    print("|---|---|---|---|")
    total = Counter[str]()
    ooms = Counter[str]()
    for world in WORLDS:
        for space in spaces:
            runs = [study(space, world, seed, trials) for seed in range(seeds)]
            launches = sum((r.launches for r in runs), Counter[str]())
            failed = sum((r.ooms for r in runs), Counter[str]())
            total.update(launches)
            ooms.update(failed)
            counts = ", ".join(f"{f} {_share(failed[f], launches[f])}" for f in sorted(launches))
            print(f"| {world.name} | {space.name} | {counts} | {max(r.longest for r in runs)} |")
    print("\nAll worlds and spaces, per method:")
    for family in sorted(total):
        share = ooms[family] / total[family] if total[family] else 0.0
        print(f"- {family}: {ooms[family]} of {total[family]} launches ({share:.0%})")
    for world in WORLDS:
        print(f"- {world.name}: {world.note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
