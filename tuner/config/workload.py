"""What a workload is: the traffic a server config is measured and scored on.

A workload names its prompts (:mod:`tuner.config.prompts`), their lengths, and the traffic the
user serves: concurrency levels and sampling temperatures, each with its share (a weight). Every
server config is measured at every (level, temperature) pair on one server and scored on the
weighted result (:mod:`tuner.trial.scoring`). A goodput study instead climbs request-rate steps
(``rate_steps``), each measured at every temperature (:mod:`tuner.trial.traffic`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from itertools import product
from typing import TypeVar

from tuner.config.prompts import (
    CHARS_PER_TOKEN,
    LONG_CONTEXT_TOKENS,
    ChatMessage,
    PromptRequest,
    builtin_request,
    load_prompt_file,
)
from tuner.config.schema import (
    BUILTIN_PROMPT_SETS,
    DEFAULT_TEMPERATURE,
    Objective,
    SpaceModel,
    check_workload,
)
from tuner.errors import ConfigError

__all__ = [
    "BUILTIN_PROMPT_SETS",
    "CHARS_PER_TOKEN",
    "LONG_CONTEXT_TOKENS",
    "ChatMessage",
    "Condition",
    "PromptRequest",
    "WorkloadSpec",
    "build_requests",
    "workload_from_space",
]

T = TypeVar("T", int, float)


@dataclass(frozen=True)
class Condition:
    """One (concurrency, temperature) pair of the traffic, and its share of it.

    A goodput step offers ``request_rate`` requests/s (Poisson) instead, ``concurrency`` then
    being no more than a cap that never holds a request back.
    """

    concurrency: int
    # What its requests sample at: one temperature of the workload's mix, or the trial's own
    # when the space tunes it.
    sampling_temperature: float
    weight: float  # level weight x temperature weight; all conditions sum to 1
    request_rate: float | None = None

    @property
    def label(self) -> str:
        """The pair as a reader names it: ``concurrency 8, temperature 0.2``."""
        load = (
            f"concurrency {self.concurrency}"
            if self.request_rate is None
            else f"{self.request_rate:g} requests/s"
        )
        return f"{load}, temperature {self.sampling_temperature:g}"


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
        rate_steps: the request rates a goodput study climbs, lowest first; empty otherwise.

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
    rate_steps: tuple[float, ...] = ()

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
    def scored_alone(self) -> bool:
        """Whether the score's first level serves one request at a time (no goodput steps)."""
        return self.concurrency[0] == 1 and not self.rate_steps

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

    def step(self, rate: float) -> tuple[Condition, ...]:
        """One goodput step: ``rate`` requests/s at each temperature, every request let in."""
        return tuple(
            Condition(self.requests, temperature, weight, rate)
            for temperature, weight in self.temperature_mix
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


def workload_from_space(model: SpaceModel, origin: str, lenient: bool) -> WorkloadSpec:
    """A space's ``workload`` section as a spec; a single ``search.temperature`` (what earlier
    spaces wrote for the temperature they serve) is the workload's temperature.

    Raises:
        ConfigError: one line naming ``origin``: both temperatures set, or request rates that
            do not fit the space's objective.
    """
    section, fixed = model.workload, model.search.temperature
    mix = [(share.value, share.weight) for share in section.temperature]
    if isinstance(fixed, int | float):
        if "temperature" in section.model_fields_set and not lenient:
            raise ConfigError(
                f"{origin}: search.temperature {fixed} and workload.temperature both set: the "
                "temperatures you serve go in workload.temperature; remove search.temperature"
            )
        mix = [(float(fixed), 1.0)]
    data = section.model_dump(exclude={"concurrency", "temperature", "request_rate"})
    levels = [(level.level, level.weight) for level in section.concurrency]
    rates = _rates(model, origin)
    goodput = model.slo.objective is Objective.GOODPUT
    return WorkloadSpec(
        **data,
        concurrency=tuple(level for level, _ in levels),
        concurrency_weights=_unequal(weight for _, weight in levels),
        temperature=tuple(value for value, _ in mix),
        temperature_weights=_unequal(weight for _, weight in mix),
        request_rate=None if goodput or not rates else rates[0],
        rate_steps=rates if goodput else (),
    )


def _rates(model: SpaceModel, origin: str) -> tuple[float, ...]:
    """``workload.request_rate`` as rates, held to the objective: goodput climbs its steps (and
    needs a TPOT limit), throughput takes one open-loop rate at most."""
    section, slo = model.workload, model.slo
    given = section.request_rate
    rates = tuple(
        float(r) for r in (given if isinstance(given, list) else [given] if given else [])
    )
    if slo.objective is not Objective.GOODPUT:
        if len(rates) > 1:
            raise ConfigError(
                f"{origin}: workload.request_rate has {len(rates)} rates, the steps of "
                "slo.objective goodput: give one rate for an open loop, or set objective: goodput"
            )
        return rates
    if not rates:
        raise ConfigError(
            f"{origin}: slo.objective goodput climbs request rates: set workload.request_rate "
            "to its steps in requests/s (e.g. [0.5, 1, 2, 4, 8])"
        )
    if slo.tpot_ms is None:
        raise ConfigError(
            f"{origin}: slo.objective goodput needs slo.tpot_ms, the p95 time per output token "
            "every step must meet (e.g. tpot_ms: 50)"
        )
    if "concurrency" in section.model_fields_set:
        raise ConfigError(
            f"{origin}: workload.concurrency and slo.objective goodput both set: goodput offers "
            "the workload.request_rate steps with no cap on requests in flight; remove "
            "workload.concurrency"
        )
    return rates


def _unequal(weights: Iterable[float]) -> tuple[float, ...]:
    """The weights, or none when they are all equal (equal shares are the default)."""
    given = tuple(weights)
    return given if len(set(given)) > 1 else ()
