"""What a workload is: the traffic a server config is measured and scored on.

A workload names its prompts (:mod:`tuner.config.prompts`), their lengths, and the traffic the
user serves: concurrency levels and sampling temperatures, each with its share (a weight). Every
server config is measured at every (level, temperature) pair on one server and scored on the
weighted result (:mod:`tuner.trial.scoring`).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, replace
from itertools import product
from typing import TypeVar

from tuner.config.prompts import (
    CHARS_PER_TOKEN,
    LONG_CONTEXT_TOKENS,
    PROMPT_SOURCES,
    ChatMessage,
    PromptRequest,
    builtin_request,
    load_prompt_file,
)
from tuner.config.schema import BUILTIN_PROMPT_SETS, DEFAULT_TEMPERATURE, check_workload
from tuner.errors import ConfigError

__all__ = [
    "BUILTIN_PROMPT_SETS",
    "CHARS_PER_TOKEN",
    "LONG_CONTEXT_TOKENS",
    "PROMPT_SOURCES",
    "ChatMessage",
    "Condition",
    "PromptRequest",
    "WorkloadSpec",
    "build_requests",
]

T = TypeVar("T", int, float)


@dataclass(frozen=True)
class Condition:
    """One (concurrency, temperature) pair of the traffic, and its share of it."""

    concurrency: int
    temperature: float
    weight: float  # level weight x temperature weight; all conditions sum to 1


@dataclass(frozen=True)
class WorkloadSpec:
    """The traffic each trial serves, measured at every (concurrency, temperature) pair.

    Attributes:
        prompt_set: a built-in set name or a path to a JSONL/ShareGPT file.
        input_tokens: mean prompt length in tokens.
        output_tokens: the most tokens a reply may have (files may set their own lengths);
            replies end where the model ends them.
        concurrency: requests in flight, one benchmark per level.
        requests: measured requests per (level, temperature).
        warmup: requests sent first and left out of the results.
        request_rate: Poisson arrival rate (requests/s) for an open loop; None for a closed loop.
        seed: makes prompts and arrival times reproducible.
        duration_s: when set, the measured window lasts this long (prompts are reused in a
            cycle) instead of ending after ``requests`` requests.
        concurrency_weights: each level's share of the time; empty: equal shares.
        temperature: the sampling temperatures the product sends.
        temperature_weights: each temperature's share of the requests; empty: equal shares.

    Raises:
        ConfigError: a field is out of the bounds of the ``workload`` schema; the prompt set
            is looked up when it is read.
    """

    prompt_set: str = "code"
    input_tokens: int = 512
    output_tokens: int = 256
    concurrency: tuple[int, ...] = (1,)
    requests: int = 40
    warmup: int = 1
    request_rate: float | None = None
    seed: int = 0
    duration_s: float | None = None
    concurrency_weights: tuple[float, ...] = ()
    temperature: tuple[float, ...] = (DEFAULT_TEMPERATURE,)
    temperature_weights: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        # The bounds live in the schema, for specs from YAML, flags and code alike.
        check_workload(asdict(self))
        for values, weights, name in (
            (self.concurrency, self.concurrency_weights, "concurrency"),
            (self.temperature, self.temperature_weights, "temperature"),
        ):
            if weights and len(weights) != len(values):
                raise ConfigError(
                    f"workload.{name}: {len(weights)} weights for {len(values)} values; "
                    "give one weight per value"
                )

    @property
    def primary_concurrency(self) -> int:
        """The heaviest level of the traffic profile (the first of equals)."""
        return max(self.load_profile, key=lambda share: share[1])[0]

    @property
    def load_profile(self) -> tuple[tuple[int, float], ...]:
        """(level, share of the time) per concurrency level; the shares sum to 1."""
        return _shares(self.concurrency, self.concurrency_weights)

    @property
    def temperature_mix(self) -> tuple[tuple[float, float], ...]:
        """(temperature, share of the requests) per temperature; the shares sum to 1."""
        return _shares(self.temperature, self.temperature_weights)

    @property
    def mean_temperature(self) -> float:
        """The traffic-weighted mean temperature (a forecast's stand-in for the mix)."""
        return round(sum(t * w for t, w in self.temperature_mix), 4)

    @property
    def conditions(self) -> tuple[Condition, ...]:
        """Every (level, temperature) pair to measure, level by level, with its share."""
        return tuple(
            Condition(level, temperature, level_weight * temperature_weight)
            for (level, level_weight), (temperature, temperature_weight) in product(
                self.load_profile, self.temperature_mix
            )
        )

    def serving(self, temperature: float) -> WorkloadSpec:
        """The same traffic at one temperature (a trial that tunes the temperature)."""
        return replace(self, temperature=(temperature,), temperature_weights=())


def _shares(values: tuple[T, ...], weights: tuple[float, ...]) -> tuple[tuple[T, float], ...]:
    given = weights or (1.0,) * len(values)
    total = sum(given)
    return tuple((value, weight / total) for value, weight in zip(values, given, strict=True))


def build_requests(spec: WorkloadSpec, count: int) -> list[PromptRequest]:
    """Expands a workload into ``count`` prompts, the same ones for the same spec.

    Args:
        spec: the workload; ``prompt_set`` names a built-in set or a JSONL/ShareGPT file.
        count: how many prompts to return (a file's prompts are reused in a cycle).

    Returns:
        ``count`` requests, deterministic for ``spec.seed``.

    Raises:
        ConfigError: unknown prompt set, missing or malformed file.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    rng = random.Random(f"{spec.prompt_set}:{spec.seed}")
    if spec.prompt_set in BUILTIN_PROMPT_SETS:
        return [
            builtin_request(spec.prompt_set, spec.input_tokens, spec.output_tokens, rng)
            for _ in range(count)
        ]
    entries = load_prompt_file(spec.prompt_set, spec.output_tokens)
    rng.shuffle(entries)
    return [entries[i % len(entries)] for i in range(count)]
