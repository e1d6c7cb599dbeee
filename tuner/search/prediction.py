"""A point the simulator forecast for the warm start, and its variants by option value."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tuner.config.space import SearchSpace
from tuner.config.trial import TrialConfig
from tuner.search.screen import Pair

__all__ = ["Prediction", "with_variants"]

_SHARED = ("gpu_memory_utilization", "max_num_batched_tokens", "temperature")


@dataclass(frozen=True)
class Prediction:
    """The simulator's noise-free forecast for one point of a search space.

    Attributes:
        params: the point, named as :meth:`SearchSpace.suggest` names its parameters.
        config: the trial config those parameters make.
        throughput: predicted output tok/s as a trial scores it (each concurrency level and
            temperature of the traffic weighted by its share), or in a goodput study the
            predicted goodput (req/s).
        p95_ttft_ms: predicted p95 time to first token, the worst level's (inf: none completed,
            no step passed).
        tail_ttft_ms: the same for prompts as long as the longest the simulator sends.
        headroom_gib: memory a start-up may need beyond the model before it fails.
    """

    params: dict[str, Any]
    config: TrialConfig
    throughput: float
    p95_ttft_ms: float
    tail_ttft_ms: float
    headroom_gib: float

    @property
    def pair(self) -> Pair:
        return str(self.params["draft"]), int(self.params.get("num_speculative_tokens", 0))


def with_variants(space: SearchSpace, plan: list[Prediction]) -> list[Prediction]:
    """``plan``, then each method's first config again with each other value of its options.

    The choice's :meth:`~tuner.config.choices.SpecChoice.variants` (adaptive verification on,
    block verification, parallel drafting, probabilistic draft sampling: one at a time) of the
    best predicted config of every method in the plan. A variant carries its base's forecast:
    the simulator runs the options on the same physics, so only a measurement tells them apart.
    """
    found = list(plan)
    done: set[str] = set()
    for base in plan:
        draft = str(base.params["draft"])
        if draft in done:
            continue
        done.add(draft)
        choice = space.choice(draft)
        k = int(base.params.get("num_speculative_tokens", 0))
        for options in choice.variants()[1:]:
            # The choice's own parameters afresh (a P-EAGLE variant is not asked for the
            # V2-only options), the server's memory settings and the temperature as the base's.
            kept = {n: v for n, v in base.params.items() if n in _SHARED}
            params = {**space.choice_params(draft, k, options), **kept}
            server = base.config.server
            spec = choice.speculative(k, {**_settings(base), **options})
            config = replace(base.config, server=replace(server, speculative=spec))
            found.append(replace(base, params=params, config=config))
    return found


def _settings(base: Prediction) -> dict[str, Any]:
    """The numeric settings the base config ran with (K, memory and temperature aside)."""
    spec = base.config.server.speculative
    names = ("prompt_lookup_min", "prompt_lookup_max", "dspark_draft_topk")
    return {n: getattr(spec, n) for n in names if spec is not None and getattr(spec, n) is not None}
