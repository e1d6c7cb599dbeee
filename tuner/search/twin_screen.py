"""Every point of a space under the study's fitted twin: what the twin forecasts for a config.

:class:`TwinScreen` walks the arms and settings the warm start screens too
(:mod:`tuner.search.screen`) with the twin's closed form (milliseconds per space, from parts
computed once), reads acceptance off the study's per-position counters where they reach a K,
and knows how sure each forecast is (:meth:`TwinScreen.band`, :meth:`TwinScreen.ceiling`).
The proposals (:mod:`tuner.search.proposals`), the memory guard
(:mod:`tuner.search.memory_guard`) and the queue (:mod:`tuner.search.queue`) ask it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, cast

import optuna

from tuner.config.space import NO_DRAFT, SearchSpace
from tuner.config.trial import SpeculativeConfig, TrialConfig
from tuner.config.verification import Verification
from tuner.errors import StartupFailure
from tuner.search.screen import Arm, Screen, Setting, screened_traffic
from tuner.sim.acceptance import expected_accepted, verified
from tuner.sim.band import Band, error_band, regime_of, widest
from tuner.sim.oom_screen import memory_slacks
from tuner.sim.perfmodel import verifies_adaptively
from tuner.sim.twin.counters import AcceptedTokens, PositionCounts, reusable
from tuner.sim.twin.fit import FittedTwin
from tuner.sim.twin.forecast import StepParts, drafted, forecast, step_parts
from tuner.sim.twin.model import TwinPhysics

__all__ = ["TwinProposal", "TwinScreen", "params_key", "trial_config", "twin_screen"]


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
            step-time model's band not yet added: :meth:`TwinScreen.ceiling`).
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

    def scaled(self, ratio: float) -> TwinProposal:
        """This forecast scaled to the space's traffic (``ratio``: traffic over one request)."""
        high = None if self.high_tok_s is None else self.high_tok_s * ratio
        return replace(self, output_tok_s=self.output_tok_s * ratio, high_tok_s=high)


class _Accepted(NamedTuple):
    """A config's expected accepted tokens per step, and what they were read from."""

    mean: float
    measured: AcceptedTokens | None  # from the study's counters
    reach: tuple[float, ...] = ()  # each position's, from the fitted acceptance


class TwinScreen(Screen):
    """Every point of a space under a fitted twin, from parts computed once per space."""

    def __init__(self, space: SearchSpace) -> None:
        super().__init__(space)
        # The twin walks the settings in the order a set of them iterates, as it always has:
        # that order breaks its ties (one request's prompt fits every batch size, and the
        # memory to spare often does not depend on it), so its proposals, guards and the
        # calibration design stay what they were.
        self.settings = tuple(set(self.settings))
        self._parts: dict[tuple[Arm, int, int, int], StepParts] = {}
        # Shipped (outside slack, KV slack) of each setting, negative where it falls short.
        self._slack: dict[tuple[Arm, Setting], tuple[float, float]] = {}
        # Each config's traffic over one request, simulated once (None: misses a limit).
        self._ratio: dict[tuple[tuple[str, Any], ...], float | None] = {}

    def parts(self, arm: Arm, mnbt: int, prompt: int, k: int) -> StepParts:
        """The step-time parts of ``arm``'s requests of ``prompt`` tokens, drafting ``k`` a
        step (its K, or fewer where adaptive verification sizes the step: :meth:`drafted`)."""
        key = (arm, mnbt, prompt, k)
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
                k,
            )
        return self._parts[key]

    def drafted(self, twin: FittedTwin, arm: Arm, mnbt: int, reach: tuple[float, ...]) -> int:
        """The tokens ``arm`` drafts a step for one request at a time under ``twin``
        (:func:`tuner.sim.twin.forecast.drafted`): its K but under adaptive verification."""
        if not verifies_adaptively(arm.spec):
            return arm.k  # without building its config: the re-screen asks for every arm
        server = self.config(arm, (max(self.settings)[0], mnbt), 0.0).server
        space, workload = self.space, self.space.workload
        return drafted(
            space.hardware,
            space.target,
            space.draft_model(arm.draft),
            server,
            workload.input_tokens,
            workload.output_tokens,
            space.version,
            twin.params,
            reach,
        )

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
        key = params_key(params)
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

    def arm_named(self, params: dict[str, Any]) -> Arm:
        """The arm of parameters the screen named (complete: every setting of the arm)."""
        arm = self.arm_of(params)
        assert arm is not None
        return arm

    def band(self, proposal: TwinProposal) -> Band:
        """The step-time model's error band for ``proposal``'s config: the least certain over
        the workload's levels (:mod:`tuner.sim.band`), as the warm start's forecasts carry."""
        params = proposal.params
        setting = (float(params["gpu_memory_utilization"]), int(params["max_num_batched_tokens"]))
        temperature = float(params.get("temperature", self.space.trial_temperature))
        server = self.config(self.arm_named(params), setting, temperature).server
        hardware = self.space.hardware
        levels = self.space.workload.concurrency
        band = widest(error_band(regime_of(hardware, server, c)) for c in levels)
        assert band is not None  # a workload has at least one level
        return band

    def ceiling(self, proposal: TwinProposal) -> float | None:
        """A config's best case, where its acceptance is read off counters: the forecast at
        the counters' upper bound, raised by the step-time model's error band (the widest over
        the workload's levels: :mod:`tuner.sim.band`). None: not from counters, or too few
        public sources make a band (then it cannot be ruled out)."""
        if proposal.high_tok_s is None:
            return None
        band = self.band(proposal)
        if band.error is None:
            return None
        return proposal.high_tok_s * (1.0 + band.error)

    def rank(self, twin: FittedTwin) -> list[TwinProposal]:
        """The best config of every (arm, temperature) under the twin, best first."""
        space, physics = self.space, TwinPhysics(twin.params)
        out: list[tuple[TwinProposal, float]] = []  # each with its tail prompt's TTFT
        for arm in self.arms:
            safe = self.safe_settings(twin, arm)
            by_mnbt: dict[int, tuple[Setting, float]] = {}
            for setting, room in safe.items():  # per batch size, the most memory to spare
                best = by_mnbt.get(setting[1])
                if best is None or room > best[1]:
                    by_mnbt[setting[1]] = (setting, room)
            for temperature in self.temperatures:
                accepted = self._accepted(twin, physics, arm, temperature)
                for setting, room in by_mnbt.values():
                    out.append(self._proposal(twin, arm, setting, room, temperature, accepted))
        ranked = self.best_first(out, _forecast)
        return [p for p, _ in ranked if p.ttft_ms <= space.ttft_limit_ms]

    def forecast_of(self, twin: FittedTwin, params: dict[str, Any]) -> TwinProposal | None:
        """The twin's forecast of one config as a proposal of it would carry (on the space's
        traffic where it has more than one level); None where the screen cannot name it or
        it misses a limit."""
        arm = self.arm_of(params)
        util, mnbt = params.get("gpu_memory_utilization"), params.get("max_num_batched_tokens")
        if arm is None or util is None or mnbt is None:
            return None
        setting = (float(util), int(mnbt))
        temperature = float(params.get("temperature", self.space.trial_temperature))
        accepted = self._accepted(twin, TwinPhysics(twin.params), arm, temperature)
        room = self.headroom(twin, arm, setting)
        proposal, _ = self._proposal(twin, arm, setting, room, temperature, accepted)
        proposal = replace(proposal, params=params)
        if proposal.ttft_ms > self.space.ttft_limit_ms:
            return None
        if len(self.space.workload.concurrency) < 2:
            return proposal
        ratio = self.traffic_ratio(params)
        return None if ratio is None else proposal.scaled(ratio)

    def _proposal(
        self,
        twin: FittedTwin,
        arm: Arm,
        setting: Setting,
        room: float,
        temperature: float,
        accepted: _Accepted,
    ) -> tuple[TwinProposal, float]:
        """One config's forecast, with its tail prompt's TTFT (``accepted``: :meth:`_accepted`)."""
        mean_accepted, measured, reach = accepted
        output, mnbt = self.space.workload.output_tokens, setting[1]
        k = self.drafted(twin, arm, mnbt, reach)
        if k != arm.k:
            mean_accepted = sum(reach[:k])
        parts = self.parts(arm, mnbt, self.space.workload.input_tokens, k)
        mean = forecast(parts, twin.params, mean_accepted, output)
        tail_parts = self.parts(arm, mnbt, self.tail_prompt, k)
        tail = forecast(tail_parts, twin.params, mean_accepted, output)
        high = None
        if measured is not None:
            high = forecast(parts, twin.params, measured.high, output).output_tok_s
        params = self.params(arm, setting, temperature)
        proposal = TwinProposal(params, mean.output_tok_s, mean.ttft_ms, room, measured, high)
        return proposal, tail.ttft_ms

    def _accepted(
        self, twin: FittedTwin, physics: TwinPhysics, arm: Arm, temperature: float
    ) -> _Accepted:
        """Expected accepted tokens per step: from the counters where they reach this K,
        else from the fitted acceptance (and then with each position's reach)."""
        if arm.draft == NO_DRAFT:
            return _Accepted(0.0, None)
        measured = self.measured(twin, arm, temperature)
        if measured is not None:
            return _Accepted(measured.mid, measured)
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
        reach = expected_accepted(rates)
        return _Accepted(sum(reach), None, reach)

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


@functools.lru_cache(maxsize=8)  # one per space: benchmarks run many studies of one space
def twin_screen(space: SearchSpace) -> TwinScreen:
    return TwinScreen(space)


def _forecast(ranked: tuple[TwinProposal, float]) -> tuple[float, float, float, float]:
    """What :meth:`Screen.best_first` ranks a proposal by (with its tail prompt's TTFT)."""
    proposal, tail_ttft_ms = ranked
    return proposal.output_tok_s, proposal.ttft_ms, tail_ttft_ms, proposal.headroom_gib


def params_key(params: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, round(v, 6) if isinstance(v, float) else v) for k, v in params.items()))


def trial_config(space: SearchSpace, params: dict[str, Any]) -> TrialConfig:
    if space.power_limits_w and "power_limit_w" not in params:
        # The twin has no power model: its proposals leave the limit to the sampler, and it
        # reads them at the highest limit searched, the nearest to the full power it models.
        params = {**params, "power_limit_w": max(space.power_limits_w)}
    return space.suggest(cast(optuna.Trial, optuna.trial.FixedTrial(params)))


def _traffic_tok_s(space: SearchSpace, params: dict[str, Any]) -> tuple[float, float] | None:
    """(traffic-weighted tok/s, tok/s at one request) of ``params``, noise-free with the
    shipped physics; None: over the TTFT limit at some level, or out of memory."""
    config = trial_config(space, params)
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
