"""How well the twin predicts the configs it proposes, by where their acceptance came from.

Runs spectune's study (warm start, then TPE steered by the twin) on held-out worlds
(``benchmarks/worlds.py``: simulated, the twin knows only the shipped simulator) and, for every
config the twin proposed and the study then measured, compares the twin's forecast with the
measurement, split by the forecast's acceptance: read off per-position counters of the same
drafter measured at that K or above (``tuner.sim.twin.counters``), continued from counters
measured at a lower K, or the fitted model. It also
counts the configs the twin predicted from counters and left unmeasured (they could not reach
the incumbent with their band).

    .venv/bin/python benchmarks/lower_k.py            # 4 worlds x 2 seeds x 20 trials
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

import optuna

sys.path.insert(0, str(Path(__file__).parent))
from worlds import SHIPPED, WORLDS, WorldBackend

from tuner.config.space import load_space
from tuner.search.proposals import (
    CONTINUED_SOURCE,
    COUNTERS_SOURCE,
    PREDICTED_ONLY_ATTR,
    PROPOSED_ATTR,
)
from tuner.search.strategy import warm_start
from tuner.search.twin_steer import TwinSampler
from tuner.study.study import StudyOptions, open_study, run_trials

SPACE = load_space(str(Path(__file__).parent / "held_out_space.yaml"))
_SOURCES = ("counters", "continued", "fit")


def _study(world_name: str, seed: int, trials: int) -> optuna.Study:
    world = next(w for w in (SHIPPED, *WORLDS) if w.name == world_name)
    sampler = TwinSampler(
        optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=8)
    )
    study = open_study("lower-k", optuna.storages.InMemoryStorage(), SPACE, sampler)[0]
    warm_start(study, SPACE, trials)
    options = StudyOptions(trials, seed, Path(tempfile.mkdtemp()), SPACE.ttft_limit_ms)
    run_trials(study, SPACE, WorldBackend(SPACE.hardware, world, seed, SPACE.version), options)
    return study


def _errors(study: optuna.Study) -> dict[str, list[float]]:
    """Relative forecast errors (forecast / measured - 1) of the measured proposals."""
    out: dict[str, list[float]] = {source: [] for source in _SOURCES}
    for trial in study.trials:
        proposed = trial.user_attrs.get(PROPOSED_ATTR)
        if not proposed or not trial.values or trial.values[0] <= 0:
            continue
        acceptance = str(proposed.get("acceptance", ""))
        source = "fit"
        if acceptance == COUNTERS_SOURCE:
            source = "counters"
        elif acceptance.startswith(CONTINUED_SOURCE.split("{", 1)[0]):
            source = "continued"
        out[source].append(float(proposed["output_tok_s"]) / trial.values[0] - 1.0)
    return out


def _cell(errors: list[float]) -> str:
    if not errors:
        return "-"
    worst = max(abs(e) for e in errors)
    median = statistics.median(abs(e) for e in errors)
    return f"{len(errors)}: {median * 100:.1f} % / {worst * 100:.1f} %"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument(
        "--worlds",
        nargs="+",
        default=["acceptance decay", "draft 2.5x", "ngram workload", "bandwidth 0.75x"],
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    print(f"# The twin's forecasts of the configs it proposed, {args.seeds} seeds x {args.trials}")
    print("# trials on held-out-4090x2 (simulated worlds; the twin knows the shipped simulator)")
    print("# cells: proposals measured: median / worst |forecast / measured - 1|")
    print()
    print(
        "| world | acceptance from counters | continued past the counters | acceptance fitted "
        "| predicted, not measured |"
    )
    print("|---|---|---|---|---|")
    every: dict[str, list[float]] = {source: [] for source in _SOURCES}
    skipped_total = 0
    for world in args.worlds:
        found: dict[str, list[float]] = {source: [] for source in _SOURCES}
        skipped = 0
        for seed in range(args.seeds):
            study = _study(world, seed, args.trials)
            for source, errors in _errors(study).items():
                found[source] += errors
            skipped += len(study.user_attrs.get(PREDICTED_ONLY_ATTR) or {})
        for source, errors in found.items():
            every[source] += errors
        skipped_total += skipped
        cells = " | ".join(_cell(found[source]) for source in _SOURCES)
        print(f"| {world} | {cells} | {skipped} |")
    cells = " | ".join(_cell(every[source]) for source in _SOURCES)
    print(f"| all | {cells} | {skipped_total} |")


if __name__ == "__main__":
    main()
