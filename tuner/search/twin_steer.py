"""The study's digital twin: fitted after every trial, stored with the study, steering the search.

:class:`TwinSampler` wraps the study's sampler (TPE). After each trial it
1. refits the twin (:func:`tuner.sim.twin.fit.fit`) to every trial measured so far, from the
   host's calibration when there is one (else the shipped simulator), and stores it as the
   study's ``twin`` attribute (plain JSON, read back by :func:`stored_twin`);
2. re-screens the space with the fitted twin (:class:`TwinScreen`, closed form, milliseconds,
   on the grid the warm start screens too: :mod:`tuner.search.screen`) and enqueues its
   predicted best config, or else the best config of the next speculation method (none,
   ngram, each draft) predicted close to it, when not measured yet: one proposal waits at a
   time, so TPE chooses the trials the twin has no new idea for. Where that config needs a
   new server, a request-only change of the running one (another temperature) forecast
   close enough for the start-up it saves goes first, once per server: start-ups are priced
   per config family as the study timed them (:mod:`tuner.search.startup`);
3. keeps TPE's own proposals inside the memory the trials measured: a utilization or batch
   size the twin predicts to leave less than its fitted margin is moved to the nearest one
   that does (the margin comes from NVML's peaks and the start-ups that ran out of memory,
   whatever their method);
4. re-plans the queue: as a config the warm start or the twin enqueued is taken from the
   queue, one the twin now puts short of memory is moved the same way before it launches, so
   an OOM is not followed by queued configs that would run out the same way.

The closed-form screen serves one request at a time; on a traffic mix whose first level is one
request, its best configs are forecast again on the whole mix (each scaled by its simulated
traffic over one request) before one is proposed. Otherwise (goodput too) only memory steers.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from tuner.config.space import NO_DRAFT, SearchSpace
from tuner.config.trial import ServerConfig, SpeculativeConfig, TrialConfig
from tuner.config.verification import Verification
from tuner.errors import StartupFailure
from tuner.search.screen import Arm, Screen, Setting, screened_traffic
from tuner.search.startup import REUSE_FLOOR, StartupPrice, StartupPrices, reuse_share
from tuner.sim.acceptance import expected_accepted, verified
from tuner.sim.band import Band, error_band, regime_of, widest
from tuner.sim.oom_screen import memory_slacks
from tuner.sim.twin.counters import AcceptedTokens, PositionCounts, reusable
from tuner.sim.twin.fit import FittedTwin, Observation, fit
from tuner.sim.twin.forecast import StepParts, forecast, step_parts
from tuner.sim.twin.model import TwinPhysics
from tuner.trial.race import Incumbent, incumbent_among
from tuner.trial.record import (
    BUDGET_ATTR,
    COUNTED_STATES,
    WARM_START_ATTR,
    TrialRecord,
    records,
    stored_space,
)
from tuner.trial.scoring import TrialStatus

__all__ = [
    "CONTINUED_SOURCE",
    "COUNTERS_SOURCE",
    "PREDICTED_ONLY_ATTR",
    "PRIOR_ATTR",
    "REUSES_KEY",
    "TWIN_ATTR",
    "TwinProposal",
    "TwinSampler",
    "TwinScreen",
    "observations",
    "stored_twin",
]

TWIN_ATTR = "twin"
# The twin a study starts from when the host was calibrated (``spectune calibrate``).
PRIOR_ATTR = "twin_prior"
# The user attribute a trial the twin proposed carries (its forecast).
PROPOSED_ATTR = "twin_proposal"
# Another method's best is proposed when the twin puts it within this share of the best.
_CLOSE_SHARE = REUSE_FLOOR
# Where a proposal stores the trial whose running server it reuses instead of a new one.
REUSES_KEY = "reuses_server_of"
_FIXED_PARAMS = "fixed_params"  # where Study.enqueue_trial keeps a queued trial's parameters
# Proposals forecast on a traffic mix: the best of each (method, K), and the best few overall.
_TRAFFIC_TOP = 4
# The study attribute that keeps the configs predicted from counters and not measured.
PREDICTED_ONLY_ATTR = "twin_predicted_only"
# How a forecast whose acceptance was read off a measured K's counters says so.
COUNTERS_SOURCE = "per-position counters measured at this K or above (this config not measured)"
CONTINUED_SOURCE = (
    "per-position counters measured at K={counted}, continued past it from its last position's "
    "rate at the fitted decay (this config not measured)"
)


def stored_twin(study: optuna.Study) -> FittedTwin | None:
    """The twin fitted to ``study``'s trials; None before its first trial."""
    raw = study.user_attrs.get(TWIN_ATTR)
    return None if raw is None else FittedTwin.from_json(raw)


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


@dataclass(frozen=True)
class TwinProposal:
    """A config the fitted twin predicts, as :meth:`SearchSpace.suggest` names its parameters.

    Attributes:
        params: its parameters.
        output_tok_s: the twin's forecast.
        ttft_ms: the twin's forecast of its TTFT.
        headroom_gib: memory it has to spare under the twin.
        accepted: its acceptance read off the counters of its drafter measured at some K
            (continued past the highest K counted: :mod:`tuner.sim.twin.counters`); None where
            the fit predicts it.
        high_tok_s: with ``accepted``, the forecast at the counters' upper bound (the
            step-time model's band not yet added: :func:`_ceiling`).
    """

    params: dict[str, Any]
    output_tok_s: float
    ttft_ms: float
    headroom_gib: float
    accepted: AcceptedTokens | None = None
    high_tok_s: float | None = None

    @property
    def method(self) -> str:
        return str(self.params["draft"])


class TwinScreen(Screen):
    """Every point of a space under a fitted twin, from parts computed once per space."""

    def __init__(self, space: SearchSpace) -> None:
        super().__init__(space)
        # The twin walks the settings in the order a set of them iterates, as it always has:
        # that order breaks its ties (one request's prompt fits every batch size, and the
        # memory to spare often does not depend on it), so its proposals, guards and the
        # calibration design stay what they were.
        self.settings = tuple(set(self.settings))
        self._parts: dict[tuple[Arm, int, int], StepParts] = {}
        # Shipped (outside slack, KV slack) of each setting, negative where it falls short.
        self._slack: dict[tuple[Arm, Setting], tuple[float, float]] = {}
        # Each config's traffic over one request, simulated once (None: misses a limit).
        self._ratio: dict[tuple[tuple[str, Any], ...], float | None] = {}

    def parts(self, arm: Arm, mnbt: int, prompt: int) -> StepParts:
        key = (arm, mnbt, prompt)
        if key not in self._parts:
            server = self.config(arm, (max(self.settings)[0], mnbt), 0.0).server
            space, draft = self.space, self.space.draft_model(arm.draft)
            self._parts[key] = step_parts(
                space.hardware,
                space.target,
                draft,
                server,
                prompt,
                space.workload.output_tokens,
                space.version,
            )
        return self._parts[key]

    def headroom(self, twin: FittedTwin, arm: Arm, setting: Setting) -> float:
        """GiB a start-up may need beyond the twin's memory before it fails (< 0: it fails)."""
        key = (arm, setting)
        if key not in self._slack:
            server = self.config(arm, setting, 0.0).server
            space = self.space
            # Signed: a config the shipped model puts short may fit a twin that learned the
            # GPUs hold less than modelled.
            self._slack[key] = memory_slacks(
                space.hardware, space.target, space.draft_model(arm.draft), server, space.version
            )
        slack = self._slack[key]
        return min(slack[0] - twin.params.outside_gib, slack[1] - twin.params.inside_gib)

    def traffic_ratio(self, params: dict[str, Any]) -> float | None:
        """Traffic-weighted tok/s over tok/s at one request of ``params`` (shipped physics);
        None where it misses the TTFT limit at some level or does not fit."""
        key = _key(params)
        if key not in self._ratio:
            found = _traffic_tok_s(self.space, params)
            self._ratio[key] = None if found is None else found[0] / found[1]
        return self._ratio[key]

    def safe(self, twin: FittedTwin, arm: Arm, setting: Setting) -> bool:
        """Whether ``setting`` leaves ``arm`` the twin's margin to spare."""
        return self.headroom(twin, arm, setting) >= twin.margin_gib

    def safe_settings(self, twin: FittedTwin, arm: Arm) -> dict[Setting, float]:
        """The settings of the grid that leave ``arm`` the twin's margin, with the GiB to
        spare (:meth:`Screen.settings_leaving` under the twin's memory)."""
        return self.settings_leaving(functools.partial(self.headroom, twin, arm), twin.margin_gib)

    def rank(self, twin: FittedTwin) -> list[TwinProposal]:
        """The best config of every (arm, temperature) under the twin, best first."""
        space, physics = self.space, TwinPhysics(twin.params)
        output = space.workload.output_tokens
        out: list[tuple[TwinProposal, float]] = []  # each with its tail prompt's TTFT
        for arm in self.arms:
            safe = self.safe_settings(twin, arm)
            by_mnbt: dict[int, tuple[Setting, float]] = {}
            for setting, room in safe.items():  # per batch size, the most memory to spare
                best = by_mnbt.get(setting[1])
                if best is None or room > best[1]:
                    by_mnbt[setting[1]] = (setting, room)
            for temperature in self.temperatures:
                accepted, measured = self._accepted(twin, physics, arm, temperature)
                for mnbt, (setting, room) in by_mnbt.items():
                    parts = self.parts(arm, mnbt, space.workload.input_tokens)
                    mean = forecast(parts, twin.params, accepted, output)
                    tail = forecast(
                        self.parts(arm, mnbt, self.tail_prompt), twin.params, accepted, output
                    )
                    params = self.params(arm, setting, temperature)
                    high = None
                    if measured is not None:
                        high = forecast(parts, twin.params, measured.high, output).output_tok_s
                    proposal = TwinProposal(
                        params, mean.output_tok_s, mean.ttft_ms, room, measured, high
                    )
                    out.append((proposal, tail.ttft_ms))
        ranked = self.best_first(out, _forecast)
        return [p for p, _ in ranked if p.ttft_ms <= space.ttft_limit_ms]

    def _accepted(
        self, twin: FittedTwin, physics: TwinPhysics, arm: Arm, temperature: float
    ) -> tuple[float, AcceptedTokens | None]:
        """Expected accepted tokens per step: from the counters where they reach this K,
        else from the fitted acceptance (and then None beside it)."""
        if arm.draft == NO_DRAFT:
            return 0.0, None
        measured = self.measured(twin, arm, temperature)
        if measured is not None:
            return measured.mid, measured
        spec = arm.spec
        assert spec is not None
        rates = physics.position_rates(
            self.space.target,
            self.space.draft_model(arm.draft),
            spec.method,
            self.space.workload.prompt_set,
            temperature,
            arm.k,
            speculative=spec,  # its verification, sampled drafts, parallel drafting
        )
        return sum(expected_accepted(rates)), None

    def measured(self, twin: FittedTwin, arm: Arm, temperature: float) -> AcceptedTokens | None:
        """Accepted tokens per step of ``arm`` read off the study's counters, where its
        drafter was measured at every temperature the trial would serve (the trial's own when
        the space tunes it, else the workload's mix, weighted), continued past the highest K
        counted at the twin's fitted decay; None where it was not, or where its counters do
        not carry to another K.

        Counters are kept from standard verification only (block verification accepts the
        positions jointly); an arm verifying by another rule reads them scaled by what that
        rule adds at their rates (:func:`_verifier_gain`), so a study that measured standard
        verification moves K for block verification too."""
        spec = arm.spec
        if spec is None:
            return None
        standard = replace(spec, rejection_sample_method=Verification.STANDARD)
        if not reusable(standard):
            return None
        workload = self.space.workload
        mix = ((temperature, 1.0),) if self.space.tunes_temperature else workload.temperature_mix
        decay = TwinPhysics(twin.params).decay(
            self.space.draft_model(arm.draft), spec.method, workload.prompt_set
        )
        found = []
        for t, weight in mix:
            counted = twin.measured_accepted(arm.draft, workload.prompt_set, t, arm.k, decay)
            if counted is None:
                return None
            if spec != standard:
                counts = twin.counters[(arm.draft, workload.prompt_set, round(t, 4))]
                gain = _verifier_gain(counts, arm.k, spec, t, workload.prompt_set)
                counted = replace(
                    counted,
                    mid=counted.mid * gain,
                    low=counted.low * gain,
                    high=counted.high * gain,
                )
            found.append((weight, counted))
        total = sum(w for w, _ in found)
        return AcceptedTokens(
            arm.k,
            sum(w * a.mid for w, a in found) / total,
            sum(w * a.low for w, a in found) / total,
            sum(w * a.high for w, a in found) / total,
            min(a.counted for _, a in found),
        )


def _verifier_gain(
    counts: PositionCounts, k: int, spec: SpeculativeConfig, temperature: float, prompt_set: str
) -> float:
    """Accepted tokens per step under ``spec``'s verifier over the standard one's, at the
    conditional rates ``counts`` measured (up to ``k``) under standard verification."""
    reach = [r[0] for r in counts.reach()[:k]]
    rates = tuple(
        now / before if before > 0 else 0.0
        for now, before in zip(reach, [1.0, *reach[:-1]], strict=True)
    )
    plain = sum(expected_accepted(rates))
    if plain <= 0:
        return 1.0
    return sum(expected_accepted(verified(rates, spec, temperature, prompt_set=prompt_set))) / plain


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
            self._screen = None if space is None else _screen(space)
        return self._screen

    def start(self, study: optuna.Study) -> FittedTwin:
        """The twin before any trial: the host's calibration, else ``prior``."""
        raw = study.user_attrs.get(PRIOR_ATTR)
        return self.prior if raw is None else FittedTwin.from_json(raw)

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
        return _safe_params(screen, self.twin(study), params)

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
        guarded = _guard(screen, self.twin(study), {**trial.params, param_name: value})
        return guarded[param_name]

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.inner.before_trial(study, trial)
        screen = self._space(study)
        if screen is not None and self.steer:
            _replan(screen, self.twin(study), trial)

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
        study.set_user_attr(TWIN_ATTR, twin.to_json())
        if self.steer and screen.space.workload.scored_alone:  # the closed form's first level
            _propose(study, screen, twin, seen)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()


@functools.lru_cache(maxsize=8)  # one per space: benchmarks run many studies of one space
def _screen(space: SearchSpace) -> TwinScreen:
    return TwinScreen(space)


def _forecast(ranked: tuple[TwinProposal, float]) -> tuple[float, float, float, float]:
    """What :meth:`Screen.best_first` ranks a proposal by (with its tail prompt's TTFT)."""
    proposal, tail_ttft_ms = ranked
    return proposal.output_tok_s, proposal.ttft_ms, tail_ttft_ms, proposal.headroom_gib


def _key(params: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, round(v, 6) if isinstance(v, float) else v) for k, v in params.items()))


def _propose(
    study: optuna.Study, screen: TwinScreen, twin: FittedTwin, done: Sequence[FrozenTrial]
) -> None:
    """Enqueues the twin's best config not measured yet, unless a proposal already waits;
    first, once per server, a request-only change of the running server forecast close
    enough to it for the start-up it saves (:func:`_reusing`)."""
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING))
    if any(PROPOSED_ATTR in t.user_attrs for t in waiting):
        return
    live = len(study.get_trials(deepcopy=False, states=COUNTED_STATES))
    if live >= float(study.user_attrs.get(BUDGET_ATTR, "inf")):  # enqueued: past the budget
        return
    ranked = _on_traffic(screen, twin, screen.rank(twin))
    if not ranked:
        return
    known = {_key(_params(t)) for t in [*done, *waiting]}
    best = ranked[0].output_tok_s
    per_method: dict[str, TwinProposal] = {}
    for proposal in ranked:
        per_method.setdefault(proposal.method, proposal)
    candidates = [ranked[0]] + [
        p for p in per_method.values() if p.output_tok_s >= _CLOSE_SHARE * best
    ]
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    incumbent = incumbent_among(records(complete))
    # What runs just before a proposal: the last config queued (Optuna takes its queue in
    # order), else the trial just told.
    queued = [t for t in waiting if t.state is TrialState.WAITING]
    before = max(queued, key=lambda t: t.number) if queued else done[-1]

    def worth(proposal: TwinProposal) -> dict[str, Any] | None:
        """Its forecast attributes; None (stored as predicted only) where it cannot win."""
        ceiling = _ceiling(screen, proposal)
        attrs = {
            "output_tok_s": round(proposal.output_tok_s, 3),
            "ttft_ms": round(proposal.ttft_ms, 3),
            "error_band": _band(screen, proposal).describe(),
            "trials_fitted": twin.observations,
        }
        if proposal.accepted is not None:
            attrs.update(_counted(proposal, ceiling))
        if incumbent is not None and ceiling is not None and ceiling < incumbent.low:
            _not_measured(study, proposal, attrs, incumbent)
            return None
        return attrs

    for proposal in candidates:
        if _key(proposal.params) in known:
            continue
        attrs = worth(proposal)
        if attrs is None:
            continue
        reuse = _reusing(screen, proposal, ranked, known, before, done)
        variant_attrs = None if reuse is None else worth(reuse[0])
        if reuse is not None and variant_attrs is not None:
            variant, start = reuse
            attrs = {
                **variant_attrs,
                REUSES_KEY: before.number,
                "instead_of": {
                    "params": proposal.params,
                    "output_tok_s": round(proposal.output_tok_s, 3),
                    "startup_s": round(start.seconds, 1),
                    "startup_from": start.describe(),
                },
            }
            proposal = variant
        study.enqueue_trial(proposal.params, user_attrs={PROPOSED_ATTR: attrs})
        return


def _reusing(
    screen: TwinScreen,
    chosen: TwinProposal,
    ranked: Sequence[TwinProposal],
    known: set[tuple[tuple[str, Any], ...]],
    before: FrozenTrial,
    done: Sequence[FrozenTrial],
) -> tuple[TwinProposal, StartupPrice] | None:
    """What to propose instead of ``chosen`` where ``chosen`` needs a new server: a
    request-only change (another temperature) of the server ``before`` runs (the trial just
    told, or the last one queued), forecast close enough to ``chosen`` for the start-up it
    saves; with that start-up's price. None: ``chosen`` goes next.

    Close enough is :func:`tuner.search.startup.reuse_share` of ``chosen``'s family's
    start-up as this study timed it (else the prior) and the median benchmark of its trials.

    One such change per server: after it, ``chosen`` is proposed, so a study does not keep
    to the running server while its variants come close and never test the twin's best.
    """
    if REUSES_KEY in (before.user_attrs.get(PROPOSED_ATTR) or {}):
        return None
    space = screen.space
    params = _params(before)
    if "draft" not in params:
        return None
    running = _server(space, params)
    needed = _server(space, chosen.params)
    if needed == running:
        return None
    told = records(done)
    benches = [b for b in (_bench_s(r) for r in told) if b > 0]
    if not benches:
        return None
    start = StartupPrices.of(told).price(needed)
    share = reuse_share(start.seconds, statistics.median(benches))
    for proposal in ranked:  # best first
        if proposal.output_tok_s < share * chosen.output_tok_s:
            return None
        if _key(proposal.params) not in known and _server(space, proposal.params) == running:
            return proposal, start
    return None


def _params(trial: FrozenTrial) -> dict[str, Any]:
    """A trial's parameters; a queued one's are those it was enqueued with (Optuna sets
    ``params`` only as it runs)."""
    fixed = trial.system_attrs.get(_FIXED_PARAMS)
    return trial.params or (fixed if isinstance(fixed, dict) else {})


def _bench_s(record: TrialRecord) -> float:
    """The seconds a trial's pairs were measured (its start-up and warm-ups left out)."""
    return sum(float(level.get("duration_s") or 0.0) for level in record.levels)


def _config(space: SearchSpace, params: dict[str, Any]) -> TrialConfig:
    return space.suggest(cast(optuna.Trial, optuna.trial.FixedTrial(params)))


def _server(space: SearchSpace, params: dict[str, Any]) -> ServerConfig:
    """The server a trial of ``params`` runs (the runner restarts when it differs)."""
    return _config(space, params).server


def _counted(proposal: TwinProposal, ceiling: float | None) -> dict[str, Any]:
    """How a proposal predicted from counters says so where it is stored."""
    accepted = proposal.accepted
    assert accepted is not None
    return {
        "acceptance": (
            CONTINUED_SOURCE.format(counted=accepted.counted)
            if accepted.continued
            else COUNTERS_SOURCE
        ),
        "accepted_per_step": [
            round(accepted.low, 4),
            round(accepted.mid, 4),
            round(accepted.high, 4),
        ],
        "high_tok_s": None if ceiling is None else round(ceiling, 3),
    }


def _not_measured(
    study: optuna.Study, proposal: TwinProposal, forecast_attrs: dict[str, Any], rival: Incumbent
) -> None:
    """Stores (study attribute :data:`PREDICTED_ONLY_ATTR`) a config predicted from counters
    that cannot reach the incumbent, so it is not measured: what was predicted, and why."""
    entry = {
        **forecast_attrs,
        "params": proposal.params,
        "source": "predicted",
        "reason": (
            f"cannot reach trial {rival.number}: at most {forecast_attrs['high_tok_s']:.1f} "
            f"tok/s (acceptance from counters, step times +/- their band) < its "
            f"{rival.low:.1f} tok/s at least"
        ),
    }
    stored = dict(study.user_attrs.get(PREDICTED_ONLY_ATTR) or {})
    stored[repr(_key(proposal.params))] = entry
    study.set_user_attr(PREDICTED_ONLY_ATTR, stored)


def _ceiling(screen: TwinScreen, proposal: TwinProposal) -> float | None:
    """A config's best case, where its acceptance is read off counters: the forecast at the
    counters' upper bound, raised by the step-time model's error band (the largest held-out
    error of the public figures of its regime, the widest over the workload's levels:
    :mod:`tuner.sim.band`). None: not from counters, or no figure bounds its regime (then it
    cannot be ruled out)."""
    if proposal.high_tok_s is None:
        return None
    band = _band(screen, proposal)
    if band.error is None:
        return None
    return proposal.high_tok_s * (1.0 + band.error)


def _band(screen: TwinScreen, proposal: TwinProposal) -> Band:
    """The step-time model's error band for ``proposal``'s config: the least certain over the
    workload's levels (:mod:`tuner.sim.band`), as the warm start's forecasts carry."""
    params = proposal.params
    setting = (float(params["gpu_memory_utilization"]), int(params["max_num_batched_tokens"]))
    temperature = float(params.get("temperature", screen.space.trial_temperature))
    server = screen.config(_arm(screen, params), setting, temperature).server
    hardware = screen.space.hardware
    levels = screen.space.workload.concurrency
    band = widest(error_band(regime_of(hardware, server, c)) for c in levels)
    assert band is not None  # a workload has at least one level
    return band


def _on_traffic(
    screen: TwinScreen, twin: FittedTwin, ranked: list[TwinProposal]
) -> list[TwinProposal]:
    """``ranked`` (the closed form's, one request at a time), re-ranked by the twin's forecast
    of the space's own traffic where it has more than one level, scored as the trial is (every
    level and temperature weighted), in two stages: the best config of each (method, K) and
    the overall best few; then every variant of the method's own settings and every batch
    size of the best few (method, K). One level: ``ranked`` as it is.

    Every K of every method, not only the K the closed form puts best: serving one request, a
    method that accepts more than expected wants the longest draft, while the busy levels of a
    mix pay for every rejected token and want a shorter one. Every batch size of the best
    pairs: one request's prompt fits any of them, so the closed form cannot tell them apart,
    while many requests in flight prefill together. Every variant of the best pairs, not of
    all: the settings act mostly alone, and block verification's gain at the mix's hotter
    temperature, which one request at its mean temperature understates, shows there.

    The twin's closed form serves one request; a config's whole traffic is simulated once per
    space with the shipped physics (:meth:`TwinScreen.traffic_ratio`), and the twin's forecast
    is scaled by it: a study then pays milliseconds per trial once the space's configs are
    simulated, not a simulation of every level. The twin's corrections are taken to act alike
    at every level.
    """
    if len(screen.space.workload.concurrency) < 2 or not ranked:
        return ranked

    def pair(proposal: TwinProposal) -> tuple[str, int]:
        arm = _arm(screen, proposal.params)
        return arm.draft, arm.k

    chosen: dict[tuple[tuple[str, Any], ...], TwinProposal] = {}
    pairs: set[tuple[str, int]] = set()
    for proposal in ranked:
        if pair(proposal) not in pairs or len(chosen) < _TRAFFIC_TOP:
            chosen.setdefault(_key(proposal.params), proposal)
            pairs.add(pair(proposal))
    best = list(dict.fromkeys(pair(p) for p in _scaled(screen, chosen.values())))[:_TRAFFIC_TOP]
    for proposal in ranked:
        if pair(proposal) in best:
            chosen.setdefault(_key(proposal.params), proposal)
    return _scaled(screen, chosen.values())


def _scaled(screen: TwinScreen, proposals: Iterable[TwinProposal]) -> list[TwinProposal]:
    """``proposals`` forecast on the space's traffic (those that miss a limit left out), best
    first."""
    scored = []
    for proposal in proposals:
        ratio = screen.traffic_ratio(proposal.params)
        if ratio is not None:
            high = None if proposal.high_tok_s is None else proposal.high_tok_s * ratio
            scored.append(
                replace(proposal, output_tok_s=proposal.output_tok_s * ratio, high_tok_s=high)
            )
    return sorted(scored, key=lambda p: -p.output_tok_s)


def _traffic_tok_s(space: SearchSpace, params: dict[str, Any]) -> tuple[float, float] | None:
    """(traffic-weighted tok/s, tok/s at one request) of ``params``, noise-free with the
    shipped physics; None: over the TTFT limit at some level, or out of memory."""
    config = _config(space, params)
    draft = space.draft_model(str(params["draft"]))
    total = value = 0.0
    alone = None
    try:
        for condition, result in screened_traffic(space, config, draft):
            ttft = result.ttft_ms(95)
            if ttft is None or ttft > space.ttft_limit_ms:
                return None
            total += condition.weight
            value += condition.weight * result.output_tok_s
            if condition.concurrency == 1 and alone is None:
                alone = result.output_tok_s
    except StartupFailure:
        return None
    if not total or not alone:
        return None
    return value / total, alone


def _replan(screen: TwinScreen, twin: FittedTwin, trial: FrozenTrial) -> None:
    """Re-checks a queued config as it is taken from the queue, against every result so far:
    one the warm start or the twin enqueued that the twin now puts short of memory (it moved
    after an OOM) moves to the nearest setting the twin deems safe, or to the nearest K of its
    method that has one. Configs enqueued by hand are left as they are: the user asked for them.

    Optuna's ``Trial`` reads an enqueued trial's parameters from the ``fixed_params`` system
    attribute of the very ``FrozenTrial`` it hands the sampler's ``before_trial``, after that
    call (``tests/study/test_optuna_private.py`` checks it), so changing them here is what the
    objective sees.
    """
    if WARM_START_ATTR not in trial.user_attrs and PROPOSED_ATTR not in trial.user_attrs:
        return
    fixed = trial.system_attrs.get(_FIXED_PARAMS)
    if not isinstance(fixed, dict) or "draft" not in fixed:
        return
    moved = _safe_params(screen, twin, fixed)
    if moved != fixed:
        trial.system_attrs[_FIXED_PARAMS] = moved


def _safe_params(screen: TwinScreen, twin: FittedTwin, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` guarded (:func:`_guard`); where no setting of its (draft, K) is safe, at the
    nearest K of the same draft that has one."""
    guarded = _guard(screen, twin, params)
    arm = screen.arm_of(guarded)
    util = guarded.get("gpu_memory_utilization")
    mnbt = guarded.get("max_num_batched_tokens")
    if arm is None or util is None or mnbt is None:
        return guarded
    if screen.safe(twin, arm, (float(util), int(mnbt))):
        return guarded
    own = screen.space.choice(arm.draft).own(arm.spec) if arm.spec is not None else {}
    others = [
        other
        for other in (screen.arm(arm.draft, k, own) for k in screen.space.k_range(arm.draft))
        if other.k != arm.k and screen.safe_settings(twin, other)
    ]
    if not others:
        return guarded
    nearest = min(others, key=lambda a: (abs(a.k - arm.k), a.k))
    return _guard(screen, twin, {**guarded, "num_speculative_tokens": nearest.k})


def _arm(screen: TwinScreen, params: dict[str, Any]) -> Arm:
    """The arm of a proposal's parameters (complete: the screen named them)."""
    arm = screen.arm_of(params)
    assert arm is not None
    return arm


def _guard(screen: TwinScreen, twin: FittedTwin, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with the utilization (then batch size) nearest to it that the twin deems safe."""
    arm = screen.arm_of(params)
    util, mnbt = params.get("gpu_memory_utilization"), params.get("max_num_batched_tokens")
    if arm is None or util is None:
        return params
    util = float(util)
    safe = list(screen.safe_settings(twin, arm))
    if mnbt is not None:
        if (round(util, 6), int(mnbt)) in {(round(u, 6), m) for u, m in safe}:
            return params
        choices = safe
    else:  # the batch size is not chosen yet: any batch size may still make it fit
        if any(math.isclose(u, util) for u, _ in safe):
            return params
        choices = safe
    if not choices:
        return params
    near = min(choices, key=lambda s: (abs(s[0] - util), abs(s[1] - int(mnbt or s[1]))))
    out = dict(params)
    out["gpu_memory_utilization"] = near[0]
    if mnbt is not None:
        out["max_num_batched_tokens"] = near[1]
    return out
