"""The screen of a search space: the points a forecast ranks, and how it ranks them.

Two screens predict the points of a space. The warm start's (:mod:`tuner.search.strategy`)
runs before any trial, with the shipped simulator, in stages around the best so far; the
twin's (:class:`tuner.search.twin_screen.TwinScreen`) runs after every trial, with the twin
fitted to the trials, over every point in closed form. Only the physics differs; both are a
:class:`Screen`, which holds what they share:

- the arms: every (draft, K) of the space, each with every variant of its method's own
  settings and options in the choice's one-at-a-time design (block verification, adaptive
  verification, prompt-lookup sizes, ...: :meth:`SpecChoice.design`), at every memory setting
  (utilization, batched tokens) and temperature, named as :meth:`SearchSpace.suggest` names
  them (the whole product of every setting is :func:`grid_params`, a benchmark's truth);
- the tail prompt: p95 TTFT is set by the longest prompts, while a noise-free prediction sends
  prompts of the mean length, so each screen also predicts prompts as long as the
  simulator's longest;
- the memory filter: a setting is kept when the screen's physics leaves it the margin to spare;
- the order: best first within the TTFT limit (for the longest prompts too), then faster,
  sooner for the longest prompts, more memory to spare;
- a config's traffic, as a trial scores it: every (level, temperature) pair of its workload
  with its share, each predicted at the screened size of :func:`screened_workload`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any, NamedTuple, TypeVar

from tuner.catalog.models import ModelSpec
from tuner.config.choices import K_PARAM
from tuner.config.space import NO_DRAFT, Range, SearchSpace
from tuner.config.trial import SpeculativeConfig, TrialConfig
from tuner.config.workload import Condition, WorkloadSpec
from tuner.results import TrialResult
from tuner.sim.virtual_time import INPUT_SPREAD, predict

__all__ = [
    "Arm",
    "Screen",
    "Setting",
    "grid_params",
    "screened_traffic",
    "screened_workload",
]


class Arm(NamedTuple):
    """One speculation config a screen forecasts: the choice, K (0 without speculation) and
    the vLLM settings they make, the method's own settings and options included (None
    without speculation)."""

    draft: str
    k: int
    spec: SpeculativeConfig | None


Setting = tuple[float, int]  # (gpu_memory_utilization, max_num_batched_tokens)

T = TypeVar("T")

# A float range without a step is screened at this many equal intervals.
_FLOAT_INTERVALS = 10


class Screen:
    """The discretised points of a space, as both screens predict them.

    Attributes:
        space: the space screened.
        arms: every (draft, K) in the space's order of drafts, K ascending, each in every
            variant of the choice's design (its defaults first).
        settings: every memory setting, utilization ascending, then the space's batch sizes
            in its order (the twin's screen walks them in an order of its own); every arm is
            screened at each.
        temperatures: every temperature, ascending (the space's own where it fixes one).
        tail_prompt: the longest prompt the simulator sends, in tokens.
    """

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.arms: tuple[Arm, ...] = tuple(
            self.arm(draft, k, own)
            for draft in space.drafts
            for k in space.k_range(draft)
            for own in space.choice(draft).design()
        )
        self.settings: tuple[Setting, ...] = tuple(
            (util, mnbt)
            for util in _values(space.gpu_memory_utilization)
            for mnbt in space.max_num_batched_tokens
        )
        self.temperatures = _temperatures(space)
        self.tail_prompt = round(space.workload.input_tokens * (1 + INPUT_SPREAD))

    def arm(self, draft: str, k: int, own: dict[str, Any] | None = None) -> Arm:
        """The arm of ``draft`` at K = ``k`` with its own settings and options ``own`` (the
        design's first: defaults and first values, where None)."""
        choice = self.space.choice(draft)
        spec = choice.speculative(k, choice.design()[0] if own is None else own)
        return Arm(draft, k if spec is not None else 0, spec)

    def arm_of(self, params: Mapping[str, Any]) -> Arm | None:
        """The arm a trial of ``params`` (as :meth:`SearchSpace.suggest` names them) runs;
        None where they name none of this space: another space's draft, or K not chosen yet
        (a sampler's joint sample may leave it to later). An own value not named is the
        design's first (a fixed setting's, an option's only value)."""
        draft = str(params.get("draft"))
        if draft not in self.space.drafts:
            return None
        if draft == NO_DRAFT:
            return Arm(draft, 0, None)
        k = params.get(K_PARAM)
        if k is None or int(k) not in self.space.k_range(draft):
            return None
        first = self.space.choice(draft).design()[0]
        return self.arm(draft, int(k), {**first, **{n: params[n] for n in first if n in params}})

    def points(self) -> Iterator[tuple[Arm, Setting, float]]:
        """Every point of the screen: arm by arm, setting by setting, temperature last."""
        for arm in self.arms:
            for setting in self.settings:
                for temperature in self.temperatures:
                    yield arm, setting, temperature

    def config(self, arm: Arm, setting: Setting, temperature: float) -> TrialConfig:
        """The trial config of one point."""
        return self.space.config(arm.spec, setting[0], setting[1], temperature)

    def params(self, arm: Arm, setting: Setting, temperature: float) -> dict[str, Any]:
        """One point named as :meth:`SearchSpace.suggest` names it: K and the method's own
        settings left out where there is no draft, the temperature where the space fixes it."""
        choice = self.space.choice(arm.draft)
        own = {} if arm.spec is None else choice.own(arm.spec)
        params: dict[str, Any] = {"draft": arm.draft, **choice.params(arm.k, own)}
        params["gpu_memory_utilization"], params["max_num_batched_tokens"] = setting
        if not isinstance(self.space.trial_temperature, float):
            params["temperature"] = temperature
        return params

    def settings_leaving(
        self, headroom: Callable[[Setting], float], margin_gib: float
    ) -> dict[Setting, float]:
        """The settings whose ``headroom`` (GiB to spare under the screen's memory physics)
        is at least ``margin_gib``, with it, in the order of :attr:`settings`."""
        found = {setting: headroom(setting) for setting in self.settings}
        return {setting: room for setting, room in found.items() if room >= margin_gib}

    def best_first(
        self, points: Iterable[T], forecast: Callable[[T], tuple[float, float, float, float]]
    ) -> list[T]:
        """``points`` best first, by ``forecast``: (throughput, p95 TTFT, p95 TTFT of the tail
        prompt, GiB to spare). Within the space's TTFT limit first (for the tail prompt too),
        then faster, sooner for the tail prompt, safer; stable among equals."""
        limit = self.space.ttft_limit_ms

        def key(point: T) -> tuple[bool, bool, float, float, float]:
            throughput, ttft, tail_ttft, headroom = forecast(point)
            return ttft > limit, tail_ttft > limit, -throughput, tail_ttft, -headroom

        return sorted(points, key=key)


def grid_params(space: SearchSpace) -> Iterator[dict[str, Any]]:
    """Every point of the discretised space, named as :meth:`SearchSpace.suggest` names them:
    every (draft, K) with every combination of its method's own settings and options
    (:meth:`SpecChoice.grid`), every memory setting and temperature.

    Float ranges are taken at their step (or at 10 equal intervals when they have none); K is
    left out where there is no draft, and the temperature where the space fixes it.
    """
    screen = Screen(space)
    for draft in space.drafts:
        choice = space.choice(draft)
        for k in space.k_range(draft):
            for own in choice.grid() if draft != NO_DRAFT else ({},):
                arm = screen.arm(draft, k, own)
                for setting in screen.settings:
                    for temperature in screen.temperatures:
                        yield screen.params(arm, setting, temperature)


def screened_workload(workload: WorkloadSpec, concurrency: int) -> WorkloadSpec:
    """The workload a screen predicts at one level (``concurrency`` first). Without noise,
    one request at a time in a closed loop, every request after the warm-up runs the same
    steps: two give the throughput and p95 TTFT of forty (a one-request space screens in 3 s,
    not 25 s); with more in flight, two waves of requests stand for more. Paced traffic (a
    goodput climb too) is predicted whole: its queues depend on how many requests arrive."""
    level = replace(workload, concurrency=(concurrency,), concurrency_weights=())
    if workload.request_rate is not None or workload.rate_steps:
        return level
    # More requests in flight: two waves give the throughput and p95 TTFT of more within 1 %.
    return replace(level, requests=min(workload.requests, 2 * concurrency))


def screened_traffic(
    space: SearchSpace, config: TrialConfig, draft: ModelSpec | None
) -> Iterator[tuple[Condition, TrialResult]]:
    """``config``'s traffic as a screen forecasts it with the shipped simulator: each (level,
    temperature) pair of its workload (:attr:`WorkloadSpec.conditions`, the pairs a trial
    measures, each with its share), noise-free at its :func:`screened_workload`.

    Lazily, pair by pair: a caller may stop at the first pair that rules ``config`` out.

    Raises:
        StartupFailure: kind OOM when the server would not start for lack of memory.
    """
    workload = config.client.workload
    for condition in workload.conditions:
        result = predict(
            space.hardware,
            space.target,
            draft,
            config.server,
            condition.sampling_temperature,
            screened_workload(workload, condition.concurrency),
            condition.concurrency,
            version=space.version,
        )
        yield condition, result


def _temperatures(space: SearchSpace) -> tuple[float, ...]:
    if isinstance(space.trial_temperature, float):
        return (space.trial_temperature,)
    return _values(space.trial_temperature)


def _values(value: Range) -> tuple[float, ...]:
    """The points Optuna's ``suggest_float`` can return for ``value``, rounded as it checks them."""
    if value.high <= value.low:
        return (value.low,)
    step = value.step or (value.high - value.low) / _FLOAT_INTERVALS
    count = math.floor((value.high - value.low) / step + 1e-9)
    return tuple(round(value.low + i * step, 10) for i in range(count + 1))
