"""Which config to hand out: max-throughput, min-ttft or balanced, on confirmed numbers.

A candidate's numbers are its confirmation means when it was confirmed (see
:mod:`tuner.study.confirm`) and its single measurement otherwise. Once any config has passed
confirmation, only confirmed configs are candidates: a single lucky measurement must not beat
a mean of several. A confirmed config that ran out of memory, crashed or broke the TTFT limit
when re-measured is dropped.

``balanced`` is the Pareto-front config nearest the ideal point (the best throughput and the
best p95 TTFT seen on the front), each axis scaled to the front's range, so neither unit
dominates.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial

from tuner.analysis.confirmed import Confirmed, Interval, load_confirmed
from tuner.analysis.recommend import TrialView, feasible, trial_view
from tuner.errors import ConfigError
from tuner.trial.record import stored_space

__all__ = [
    "DEFAULT_PICK",
    "PICKS",
    "Candidate",
    "candidates",
    "check_pick",
    "choose",
    "confirmation_order",
    "pick_candidate",
    "pick_trial",
]

PICKS = ("max-throughput", "min-ttft", "balanced")
DEFAULT_PICK = "max-throughput"


@dataclass(frozen=True)
class Candidate:
    """A feasible trial with the numbers a pick ranks it by."""

    view: TrialView
    confirmed: Confirmed | None = None

    @property
    def number(self) -> int:
        """The trial number."""
        return self.view.number

    @property
    def tok_s_interval(self) -> Interval | None:
        """The confirmed throughput interval, if confirmed."""
        return None if self.confirmed is None else self.confirmed.output_tok_s

    @property
    def ttft_interval(self) -> Interval | None:
        """The confirmed p95 TTFT interval, if confirmed."""
        return None if self.confirmed is None else self.confirmed.p95_ttft_ms

    @property
    def output_tok_s(self) -> float:
        """Output tokens/s: the confirmed mean, else the single measurement."""
        measured = self.tok_s_interval
        return self.view.output_tok_s if measured is None else measured.mean

    @property
    def p95_ttft_ms(self) -> float:
        """p95 TTFT in ms: the confirmed mean, else the single measurement."""
        measured = self.ttft_interval
        return self.view.p95_ttft_ms if measured is None else measured.mean


def check_pick(pick: str) -> str:
    """Validates a pick name.

    Raises:
        ConfigError: not one of :data:`PICKS`.
    """
    if pick not in PICKS:
        raise ConfigError(
            f"unknown pick {pick!r}: choose one of {', '.join(PICKS)} or a trial number"
        )
    return pick


def candidates(
    trials: Sequence[FrozenTrial], confirmed: Mapping[int, Confirmed], ttft_limit_ms: float
) -> list[Candidate]:
    """Feasible ``trials`` as candidates, best throughput first (see the module docstring)."""
    passed = {n: c for n, c in confirmed.items() if c.feasible(ttft_limit_ms)}
    chosen = [
        Candidate(trial_view(t), passed.get(t.number))
        for t in trials
        if t.number not in confirmed or t.number in passed
    ]
    if passed:
        chosen = [c for c in chosen if c.confirmed is not None]
    return sorted(chosen, key=lambda c: (-c.output_tok_s, c.p95_ttft_ms, c.number))


def _front(cands: Sequence[Candidate]) -> list[Candidate]:
    def dominated(c: Candidate) -> bool:
        return any(
            o.output_tok_s >= c.output_tok_s
            and o.p95_ttft_ms <= c.p95_ttft_ms
            and (o.output_tok_s > c.output_tok_s or o.p95_ttft_ms < c.p95_ttft_ms)
            for o in cands
        )

    return [c for c in cands if not dominated(c)]


def choose(cands: Sequence[Candidate], pick: str) -> Candidate | None:
    """The candidate ``pick`` selects; None when there are none."""
    check_pick(pick)
    if not cands:
        return None
    if pick == "max-throughput":
        return min(cands, key=lambda c: (-c.output_tok_s, c.p95_ttft_ms, c.number))
    if pick == "min-ttft":
        return min(cands, key=lambda c: (c.p95_ttft_ms, -c.output_tok_s, c.number))
    front = _front(cands)
    tok_hi = max(c.output_tok_s for c in front)
    tok_lo = min(c.output_tok_s for c in front)
    ttft_hi = max(c.p95_ttft_ms for c in front)
    ttft_lo = min(c.p95_ttft_ms for c in front)

    def distance(c: Candidate) -> float:
        tok_gap = (tok_hi - c.output_tok_s) / (tok_hi - tok_lo) if tok_hi > tok_lo else 0.0
        ttft_gap = (c.p95_ttft_ms - ttft_lo) / (ttft_hi - ttft_lo) if ttft_hi > ttft_lo else 0.0
        return math.hypot(tok_gap, ttft_gap)

    return min(front, key=lambda c: (distance(c), -c.output_tok_s, c.number))


def _config_key(trial: FrozenTrial) -> str:
    # The same server config at the same temperature is one config, however often TPE tried it.
    return f"{sorted(trial.user_attrs['server'].items())!r}|{trial.user_attrs['temperature']}"


def confirmation_order(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """Feasible ``trials`` in the order to confirm them, one per distinct config.

    First the configs each pick selects on single measurements (max-throughput, balanced,
    min-ttft), so that whatever pick a user exports was confirmed, then the rest by throughput.
    """
    unique: dict[str, FrozenTrial] = {}
    for trial in sorted(trials, key=lambda t: (-(t.values or [0.0])[0], t.number)):
        unique.setdefault(_config_key(trial), trial)
    cands = candidates(list(unique.values()), {}, math.inf)
    by_number = {t.number: t for t in unique.values()}
    order: list[int] = []
    for pick in ("max-throughput", "balanced", "min-ttft"):
        chosen = choose(cands, pick)
        if chosen is not None and chosen.number not in order:
            order.append(chosen.number)
    order += [c.number for c in cands if c.number not in order]
    return [by_number[n] for n in order]


def pick_candidate(study: optuna.Study, pick: str = DEFAULT_PICK) -> Candidate:
    """The trial a pick name or a trial number (as text) selects, with its confirmation.

    Raises:
        ConfigError: unknown pick, no such completed trial, or nothing feasible yet.
    """
    space = stored_space(study)
    limit = space.ttft_limit_ms if space else float("inf")
    confirmed = load_confirmed(study)
    if pick.isdigit():
        view = pick_trial(study, int(pick))
        record = confirmed.get(view.number)
        return Candidate(view, record if record and record.stable else None)
    check_pick(pick)
    chosen = choose(candidates(feasible(study), confirmed, limit), pick)
    if chosen is None:
        raise ConfigError(
            f"study {study.study_name!r} has no feasible trial yet: run more trials with "
            f"spectune optimize --study {study.study_name}, or relax --slo-ttft-ms"
        )
    return chosen


def pick_trial(study: optuna.Study, trial_number: int | None = None) -> TrialView:
    """The recommended trial (max-throughput, confirmed numbers first), or a given one.

    Raises:
        ConfigError: no such completed trial, or nothing feasible to recommend.
    """
    if trial_number is None:
        return pick_candidate(study).view
    try:
        trial = study.trials[trial_number]
    except IndexError:
        raise ConfigError(
            f"study {study.study_name!r} has no trial {trial_number}: it has "
            f"{len(study.trials)} trials (numbers 0..{len(study.trials) - 1})"
        ) from None
    if trial.values is None or "server" not in trial.user_attrs:
        raise ConfigError(f"trial {trial_number} did not complete: pick a completed trial")
    return trial_view(trial)
