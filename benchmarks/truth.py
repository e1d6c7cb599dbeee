"""A world's truth: the score of every point of a space, as a trial would score it there.

The search benchmark (``search_efficiency.py``) judges a study by the truth of the config it
recommends over the world's optimum. A point's truth is its score on the space's whole
traffic with the world's noise-free simulator: the weighted predicted output tok/s over its
(level, temperature) pairs when it fits the world's memory and meets the limits at every pair,
else 0. Every point of the space is scored (``tuner.search.screen.grid_params``: every
(draft, K) with every combination of its method's own settings and options), each keyed by
the whole config; equal runs are simulated once (:func:`run_key`), and a world's truth is
cached on disk by a hash of everything it is computed from (the 2026 space takes tens of
minutes a world on two cores).
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import optuna
from worlds import World

from tuner.config.space import SearchSpace, builtin_spaces
from tuner.config.trial import ServerConfig, SpeculativeConfig, TrialConfig, load_draft
from tuner.config.workload import Condition, WorkloadSpec
from tuner.errors import StartupFailure
from tuner.results import TrialResult
from tuner.search.screen import grid_params
from tuner.sim.memory import BLOCK_TOKENS, effective_batched_tokens
from tuner.sim.scheduler import WATERMARK
from tuner.sim.virtual_time import predict
from tuner.trial.scoring import Limits, score, score_goodput
from tuner.trial.traffic import trial_pairs

__all__ = [
    "Key",
    "config_of",
    "config_truth",
    "key_of",
    "run_key",
    "world_truth",
    "world_truths",
]

_CACHE = Path("/tmp/spectune-bench/truths")


# (draft, its vLLM settings, utilization, batched tokens, temperature): the whole config, so
# that configs differing only in a method's own settings (block or adaptive verification, a
# prompt-lookup window) each keep their own truth.
Key = tuple[str, SpeculativeConfig | None, float, int, float]


def key_of(server: ServerConfig, temperature: float) -> Key:
    """A config's grid point, as a world's truth is keyed."""
    return (
        server.draft or "none",
        server.speculative,
        round(server.gpu_memory_utilization, 6),
        server.max_num_batched_tokens,
        round(temperature, 6),
    )


def config_of(space: SearchSpace, params: dict[str, Any]) -> TrialConfig:
    return space.suggest(cast(optuna.Trial, optuna.trial.FixedTrial(params)))


def world_truth(args: tuple[str, World]) -> tuple[str, dict[Key, float]]:
    """The true value of every grid point in ``world`` (:func:`config_truth`)."""
    world = args[1]
    space = world.space(args[0])
    runs: dict[tuple[Any, ...], TrialResult | None] = {}
    truth: dict[Key, float] = {}
    for params in grid_params(space):
        config = config_of(space, params)
        key = key_of(config.server, config.client.sampling_temperature)
        truth[key] = config_truth(space, world, config, runs)
    return world.name, truth


def config_truth(
    space: SearchSpace,
    world: World,
    config: TrialConfig,
    runs: dict[tuple[Any, ...], TrialResult | None],
) -> float:
    """The true value of ``config`` in ``world``, scored as a trial is on the space's whole
    traffic: the weighted tok/s over its (level, temperature) pairs when it fits and meets
    the limits at every pair, else 0; in a goodput study the highest request-rate step its
    climb passes. ``runs``: the noise-free runs computed so far, shared between configs."""
    hardware = world.hardware(space.hardware)
    limits = Limits.of(space)
    server = config.server
    draft = load_draft(server)
    memory = world.memory(hardware, space.target, draft, server, version=space.version)
    if not memory.fits:
        return 0.0
    workload = config.client.workload
    results: list[TrialResult] = []
    done: list[Condition] = []
    # Its workload's pairs, or in a goodput study its climb up the request-rate steps, each
    # step decided by the steps before it: what its trial measures (trial_pairs).
    for condition in trial_pairs(workload, limits, results, done):
        rate = condition.request_rate or workload.request_rate
        run = (*run_key(server, workload, condition, memory.kv_tokens), rate)
        if run not in runs:
            try:
                runs[run] = predict(
                    hardware,
                    space.target,
                    draft,
                    server,
                    condition.sampling_temperature,
                    replace(workload, request_rate=rate),
                    condition.concurrency,
                    physics=world,
                    version=space.version,
                )
            except StartupFailure:
                runs[run] = None
        result = runs[run]
        if result is None:
            return 0.0
        results.append(result)
        done.append(condition)
    scored = (
        score_goodput(results, done, limits)
        if limits.goodput
        else score(results, limits, weights=[c.weight for c in done])
    )
    return scored.values[0] if scored.feasible else 0.0


def run_key(
    server: ServerConfig, workload: WorkloadSpec, condition: Condition, kv_tokens: int
) -> tuple[Any, ...]:
    """What a noise-free run at ``condition`` depends on, so that equal runs are simulated once.

    The memory settings act on a run through the prefill chunk and the KV cache only
    (``tuner.sim.scheduler``). One request in flight sees the batch size only as its prompt's
    chunk; a cache that holds every request in flight at its longest, beyond vLLM's watermark,
    never preempts or holds back a request, so its exact size does not matter."""
    batch = effective_batched_tokens(server)
    if condition.concurrency == 1:
        batch = min(batch, workload.input_tokens)
    blocks = kv_tokens // BLOCK_TOKENS
    longest = -(-(workload.input_tokens + workload.output_tokens + server.k + 1) // BLOCK_TOKENS)
    if blocks - int(blocks * WATERMARK) - longest >= condition.concurrency * longest:
        blocks = -1  # ample: every size from here gives the same run
    bare = replace(server, gpu_memory_utilization=0.0, max_num_batched_tokens=0)
    return (bare, batch, blocks, condition.sampling_temperature, condition.concurrency)


# What a world's truth is computed from: the space, the simulator, the configs' and the
# methods' rules, the catalog, scoring, the grid and the worlds themselves (a strategy's, the
# twin's or the error bands' code is not: a truth cached before a change to them still holds).
_NOT_TRUTH = ("tuner/sim/twin", "tuner/sim/band.py")
_TRUTH_SOURCES = (
    "tuner/sim",
    "tuner/config",
    "tuner/catalog",
    "tuner/search/screen.py",
    "tuner/trial/scoring.py",
    "tuner/trial/traffic.py",
    "tuner/results.py",
    "benchmarks/truth.py",
    "benchmarks/worlds.py",
)


def _truth_path(space: str, world: World) -> Path:
    """Where ``world``'s truth on ``space`` is cached: named by a hash of everything it is
    computed from (the 2026 space's grid takes tens of minutes per world)."""
    root = Path(__file__).parent.parent
    digest = hashlib.sha256(repr(world).encode())
    yaml = Path(space) if Path(space).is_file() else builtin_spaces()[space]
    digest.update(yaml.read_bytes())
    for source in _TRUTH_SOURCES:
        path = root / source
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            if not any(file.is_relative_to(root / other) for other in _NOT_TRUTH):
                digest.update(file.read_bytes())
    _CACHE.mkdir(parents=True, exist_ok=True)
    return _CACHE / f"{digest.hexdigest()[:24]}.pickle"


def _cached_truth(space: str, world: World) -> dict[Key, float] | None:
    path = _truth_path(space, world)
    return pickle.loads(path.read_bytes()) if path.exists() else None


def world_truths(space: str, worlds: Sequence[World], jobs: int) -> dict[str, dict[Key, float]]:
    """Each world's truth on ``space`` by its name: from the cache, the rest computed."""
    truths = {w.name: found for w in worlds if (found := _cached_truth(space, w)) is not None}
    todo = [w for w in worlds if w.name not in truths]
    with ProcessPoolExecutor(jobs) as pool:
        computed = pool.map(world_truth, [(space, w) for w in todo])
        for world, (name, truth) in zip(todo, computed, strict=True):
            truths[name] = truth
            _truth_path(space, world).write_bytes(pickle.dumps(truth))
    return truths
