"""The study's digital twin: fitted after every trial, stored with the study, steering the search.

:class:`TwinSampler` wraps the study's sampler (TPE), as Optuna's samplers wrap their parts:
1. after each trial it refits the twin (:func:`tuner.sim.twin.fit.fit`) to every trial measured
   so far, from the host's calibration when there is one (else the shipped simulator), with
   the memory other processes held when the study started (:mod:`tuner.catalog.tenants`) as
   memory outside vLLM's budget, and stores it as the study's ``twin`` attribute (plain
   JSON, read back by :func:`stored_twin`);
2. then asks the twin what to measure next (:mod:`tuner.search.proposals`, on the screen of
   :mod:`tuner.search.twin_screen`); on a traffic mix whose first level is one request only:
   otherwise (goodput too) only memory steers;
3. keeps TPE's own draws inside the memory the trials measured (:mod:`tuner.search.memory_guard`);
4. re-plans the queue as each queued config is taken from it (:mod:`tuner.search.queue`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from tuner import serde
from tuner.catalog.tenants import stored_tenants
from tuner.config.space import SearchSpace
from tuner.search.memory_guard import guard, safe_params
from tuner.search.proposals import propose
from tuner.search.queue import replan, take
from tuner.search.twin_screen import TwinScreen, twin_screen
from tuner.sim.twin.counters import PositionCounts
from tuner.sim.twin.fit import FittedTwin, Observation, fit
from tuner.trial.record import TrialRecord, records, stored_space
from tuner.trial.scoring import TrialStatus

__all__ = ["PRIOR_ATTR", "TWIN_ATTR", "TwinSampler", "observations", "stored_twin"]

TWIN_ATTR = "twin"
# The twin a study starts from when the host was calibrated (``spectune calibrate``).
PRIOR_ATTR = "twin_prior"


def stored_twin(study: optuna.Study) -> FittedTwin | None:
    """The twin fitted to ``study``'s trials; None before its first trial."""
    raw = study.user_attrs.get(TWIN_ATTR)
    return None if raw is None else serde.load(FittedTwin, raw)


def _observation(space: SearchSpace, record: TrialRecord) -> Observation | None:
    workload = space.workload
    base = Observation(
        record.server,
        record.trial_temperature,
        workload.prompt_set,
        workload.input_tokens,
        workload.output_tokens,
        workload.concurrency[0],
    )
    if record.status is TrialStatus.OOM:
        return replace(base, oom=True, failure=f"{record.failure or ''}\n{record.log_tail}")
    summary = record.summary
    # The trial just told is still RUNNING to Optuna: its summary says what it measured.
    if record.status.oom or not summary or record.duplicate_of is not None:
        return None
    length = summary.get("mean_acceptance_length")
    peaks = summary.get("peak_memory_gib") or []
    return replace(
        base,
        concurrency=int(summary.get("concurrency", base.concurrency)),
        step_ms=summary.get("itl_p50_ms"),
        ttft_ms=summary.get("ttft_p50_ms"),
        reach=tuple(float(r) for r in summary.get("acceptance_per_position") or ()),
        drafts=float(summary.get("output_tokens", 0)) / float(length) if length else 0.0,
        peak_gib=max(float(p) for p in peaks) if peaks else None,
        counts=tuple(_counts(level, record.trial_temperature) for level in record.levels),
    )


def _counts(level: Mapping[str, Any], temperature: float) -> tuple[float, PositionCounts]:
    """One measured pair's per-position counters, as ``(temperature, counts)``.

    Records stored before ``spec_drafts`` was kept give the steps back from the tokens: each
    request's first token comes from its prefill, every step after emits one token plus the
    accepted drafts (the mean acceptance length).
    """
    rates = [float(r) for r in level.get("acceptance_per_position") or ()]
    drafts = level.get("spec_drafts")
    if drafts is None:
        length = level.get("mean_acceptance_length")
        ok = int(level.get("requests", 0)) - int(level.get("errors", 0))
        tokens = float(level.get("output_tokens", 0)) - ok
        drafts = tokens / float(length) if length and tokens > 0 else 0.0
    counts = PositionCounts.measured(float(drafts), [r * float(drafts) for r in rates])
    return float(level.get("temperature", temperature)), counts


def observations(space: SearchSpace, trials: Sequence[FrozenTrial]) -> list[Observation]:
    """What the twin learns from: every launched trial (reused results counted once)."""
    found = (_observation(space, r) for r in records(trials))
    return [o for o in found if o is not None]


class TwinSampler(optuna.samplers.BaseSampler):
    """``inner`` (TPE), with the twin refitted after each trial, proposing and guarding memory.

    Args:
        inner: the sampler that chooses every trial the twin does not propose.
        prior: the twin to start from (a host's calibration); default the shipped simulator.
        steer: False fits and stores the twin but leaves the search to ``inner``.
    """

    def __init__(
        self,
        inner: optuna.samplers.BaseSampler,
        prior: FittedTwin | None = None,
        steer: bool = True,
    ) -> None:
        self.inner = inner
        self.prior = prior or FittedTwin()
        self.steer = steer
        self._screen: TwinScreen | None = None

    def _space(self, study: optuna.Study) -> TwinScreen | None:
        if self._screen is None:
            space = stored_space(study)
            self._screen = None if space is None else twin_screen(space)
        return self._screen

    def start(self, study: optuna.Study) -> FittedTwin:
        """The twin before any trial: the host's calibration, else ``prior``, holding what
        other processes held on the GPUs when the study started outside vLLM's budget (no
        calibration saw them)."""
        raw = study.user_attrs.get(PRIOR_ATTR)
        prior = self.prior if raw is None else serde.load(FittedTwin, raw)
        held = stored_tenants(study).gib
        if not held:
            return prior
        params = replace(prior.params, outside_gib=prior.params.outside_gib + held)
        return replace(prior, params=params)

    def twin(self, study: optuna.Study) -> FittedTwin:
        return stored_twin(study) or self.start(study)

    # -- optuna.samplers.BaseSampler ------------------------------------------------------

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return self.inner.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        params = self.inner.sample_relative(study, trial, search_space)
        screen = self._space(study)
        if screen is None or not self.steer or "draft" not in params:
            return params
        return safe_params(screen, self.twin(study), params)

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        value = self.inner.sample_independent(study, trial, param_name, param_distribution)
        screen = self._space(study)
        if screen is None or not self.steer or "draft" not in trial.params:
            return value
        if param_name not in ("gpu_memory_utilization", "max_num_batched_tokens"):
            return value
        guarded = guard(screen, self.twin(study), {**trial.params, param_name: value})
        return guarded[param_name]

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.inner.before_trial(study, trial)
        screen = self._space(study)
        if screen is not None and self.steer:
            twin = self.twin(study)
            replan(screen, twin, trial)
            take(study, screen, twin, trial)

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self.inner.after_trial(study, trial, state, values)
        screen = self._space(study)
        ended = (TrialState.COMPLETE, TrialState.PRUNED)  # a pruned trial measured its first pair
        if screen is None or state not in ended:
            return
        done = study.get_trials(deepcopy=False, states=ended)
        seen = [t for t in done if t.number != trial.number] + [trial]
        space = screen.space
        twin = fit(space.hardware, observations(space, seen), self.start(study), space.version)
        study.set_user_attr(TWIN_ATTR, serde.dump(twin))
        if self.steer and screen.space.workload.scored_alone:  # the closed form's first level
            propose(study, screen, twin, seen)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()
