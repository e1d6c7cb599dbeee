"""How often a confirmation picks the best of configs closer than one run's noise.

A study's last trials often leave several configs within a percent or two of each other, and
one benchmark run varies by about as much (clocks, jitter: ``tuner.sim.noise``). This script
takes the ``--top`` best configs of a space in one world (by the world's noise-free truth,
``truth.py``), measures each once as its trial would and ``--repeats`` more times as a
confirmation would, each run a seeded simulated run on the space's traffic, and ranks them
three ways:

- ``trial``: on the one trial measurement (no confirmation);
- ``confirmation``: on the confirmation runs alone (what ``tuner.analysis.picks`` ranks by);
- ``pooled``: on the trial and the confirmation runs together.

For each rule it prints the mean share of the world's optimum picked and how often the best
of the configs was picked, over ``--replicates`` replicates, beside each config's truth and
one run's spread. Simulated numbers, on the shipped noise model; the configs are all
measured (a study's selection of which configs reach its top is not modelled).

    .venv/bin/python benchmarks/confirmation_noise.py                      # EAGLE-3 space
    .venv/bin/python benchmarks/confirmation_noise.py --space default --top 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from truth import Key, config_of, key_of, world_truths
from worlds import SHIPPED, WORLDS, World, WorldBackend

from tuner.config.space import SearchSpace
from tuner.config.trial import LaunchContext, TrialConfig
from tuner.search.screen import grid_params

_RULES = ("trial", "confirmation", "pooled")


def run_tok_s(space: SearchSpace, world: World, config: TrialConfig, seed: int) -> float:
    """One seeded run of ``config`` on the space's traffic, measured by the world's backend
    as a trial measures it: each level's output tok/s, weighted by its share, as a trial
    scores a config that meets its limits."""
    backend = WorldBackend(space.hardware, world, seed, space.version)
    backend.start(config.server, LaunchContext("confirmation-noise", seed, Path(".")))
    profile = enumerate(space.workload.load_profile)
    return sum(
        share * backend.measure(config, concurrency, seed * 1009 + level).output_tok_s
        for level, (concurrency, share) in profile
    )


def best_configs(
    space: SearchSpace, truth: dict[Key, float], top: int
) -> list[tuple[TrialConfig, float]]:
    """The best config of each of the ``top`` best arms (a drafter with its K and settings),
    with its truth, best first: memory settings of one arm are often equal in truth."""
    found: dict[Key, TrialConfig] = {}
    for params in grid_params(space):
        config = config_of(space, params)
        found.setdefault(key_of(config.server, config.client.sampling_temperature), config)
    arms: dict[tuple[object, ...], Key] = {}
    for key in sorted((k for k, v in truth.items() if v > 0 and k in found), key=truth.__getitem__):
        arms[key[:2]] = key  # ascending: the arm's best is written last
    ranked = sorted(arms.values(), key=truth.__getitem__, reverse=True)
    return [(found[k], truth[k]) for k in ranked[:top]]


def picks(trial: Sequence[float], runs: Sequence[Sequence[float]]) -> dict[str, int]:
    """The index each rule picks, given each config's trial value and confirmation runs."""
    confirmation = [statistics.fmean(r) for r in runs]
    pooled = [statistics.fmean([t, *r]) for t, r in zip(trial, runs, strict=True)]
    return {
        "trial": max(range(len(trial)), key=trial.__getitem__),
        "confirmation": max(range(len(confirmation)), key=confirmation.__getitem__),
        "pooled": max(range(len(pooled)), key=pooled.__getitem__),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--space", default="llama3.1-8b-4090x1-eagle3")
    parser.add_argument(
        "--world", default=SHIPPED.name, choices=[SHIPPED.name, *(w.name for w in WORLDS)]
    )
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument("--repeats", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--replicates", type=int, default=100)
    args = parser.parse_args(argv)
    world = next(w for w in (SHIPPED, *WORLDS) if w.name == args.world)
    space = world.space(args.space)
    truth = world_truths(args.space, [world], 1)[world.name]
    optimum = max(truth.values())
    configs = best_configs(space, truth, args.top)
    most = max(args.repeats)
    # runs[c][r]: replicate r's runs of config c, the first its trial, then its confirmation.
    runs = [
        [
            [run_tok_s(space, world, config, 7919 * r + 104_729 * c + j) for j in range(most + 1)]
            for r in range(args.replicates)
        ]
        for c, (config, _) in enumerate(configs)
    ]
    print(f"# {args.space}, world {world.name}: the {len(configs)} best configs (simulated)")
    print("| config | truth, share of optimum | one run: mean tok/s | its sd |")
    print("|---|---|---|---|")
    for (config, value), replicates in zip(configs, runs, strict=True):
        server = config.server
        name = f"{server.draft or 'none'} K={server.k}" if server.speculative else "none"
        name += f", {server.memory_label}, {server.max_num_batched_tokens}"
        singles = [one for replicate in replicates for one in replicate]
        sd = statistics.stdev(singles) / statistics.fmean(singles)
        print(f"| {name} | {value / optimum:.1%} | {statistics.fmean(singles):.1f} | {sd:.1%} |")
    print(f"\nover {args.replicates} replicates: mean share of the optimum picked (best picked)")
    print("| confirmation runs each | " + " | ".join(_RULES) + " |")
    print("|---|" + "---|" * len(_RULES))
    for repeats in args.repeats:
        shares: dict[str, list[float]] = {rule: [] for rule in _RULES}
        for r in range(args.replicates):
            trial = [runs[c][r][0] for c in range(len(configs))]
            confirm = [runs[c][r][1 : repeats + 1] for c in range(len(configs))]
            for rule, index in picks(trial, confirm).items():
                shares[rule].append(configs[index][1] / optimum)
        best = configs[0][1] / optimum
        cells = [
            f"{statistics.fmean(v):.2%} ({sum(s == best for s in v) / len(v):.0%})"
            for v in shares.values()
        ]
        print(f"| {repeats} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
