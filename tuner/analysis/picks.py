"""Which config to hand out: the study's feasible trials, its Pareto front, and the picks.

A candidate's numbers are its confirmation means when it was confirmed (see
:mod:`tuner.study.confirm`) and its single measurement otherwise. Once any config has passed
confirmation, only confirmed configs are candidates: a single lucky measurement must not beat
a mean of several. A confirmed config that ran out of memory, crashed or broke the TTFT limit
when re-measured is dropped. Picks rank a confirmed config on throughput by its trial's
measurement and its confirmation runs together (:attr:`Candidate.ranking_throughput`): the
configs a study ends near are often closer than one run's noise, and a confirmation a budget
cuts to one run each would otherwise choose between them on a single draw
(``benchmarks/confirmation_noise.py``: of EAGLE at K=6, K=5 and K=4 on one 4090, the first two
1.3 % apart with 1.3 % noise a run, one run each picks K=6 72 % of the time, the run and the
trial together 85 %, with every config measured; a study's top trials are its luckiest, which
the trial's share of the mean carries, and the script does not model). The numbers shown stay
the confirmation's alone, which that selection did not lift; comparisons (who is faster, by
how much) follow the ranking. A trial that reused an earlier one's result
("same as #N") is that trial again, not a candidate of its own. A trial measured while heat
or a hardware slowdown throttled the GPUs (and throttled again when measured once more) is no
candidate while an unthrottled one is: its numbers are the GPU's state, not its config's;
where every candidate was throttled they stay, and :mod:`tuner.analysis.gpu` says so.

The Pareto front is Optuna's (``study.best_trials``: for a constrained study, the feasible
trials no other feasible trial beats on both throughput and p95 TTFT), without the repeats.

``balanced`` is the candidate on the Pareto front nearest the ideal point (the best throughput
and the best p95 TTFT among those candidates, on their numbers), each axis scaled to the
front's range, so neither unit dominates. When confirmation dropped every front config, the
nearest of all candidates is taken.

``min-energy`` is the candidate with the most output tokens per joule of GPU energy, as its
trial read it (confirmation runs read no energy), where the GPUs were read at all. The study's
own pick follows its space's ``slo.prefer`` (:data:`PREFERRED_PICK`); where that is
min-energy and no candidate's energy was read, the fastest is recommended instead
(:func:`study_pick`, and :mod:`tuner.analysis.energy` says so).

:func:`recommend` is the one recommendation: optimize, export and the report all take it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import optuna
from optuna.trial import TrialState

from tuner.analysis.confirmed import Confirmed, load_confirmed
from tuner.analysis.estimates import Numbers, numbers_of
from tuner.analysis.infeasible import infeasible_reasons
from tuner.analysis.pick_names import DEFAULT_PICK, PICKS, PREFERRED_PICK
from tuner.config.trial import SpecMethod
from tuner.errors import ConfigError
from tuner.trial.record import TrialRecord, records, stored_space

__all__ = [
    "DEFAULT_PICK",
    "PICKS",
    "Candidate",
    "best_per_method",
    "candidates",
    "check_pick",
    "choose",
    "confirmation_order",
    "feasible",
    "pareto_front",
    "pick_candidate",
    "ranked",
    "recommend",
    "study_pick",
]


@dataclass(frozen=True)
class Candidate:
    """A feasible trial with the numbers a pick ranks it by."""

    record: TrialRecord
    confirmed: Confirmed | None = None
    on_front: bool = False  # on the study's Pareto front (single measurements)

    @property
    def number(self) -> int:
        """The trial number."""
        return self.record.number

    @cached_property
    def numbers(self) -> Numbers:
        """Its numbers with their bounds: the confirmation's where it has one, else the
        trial's single measurement (:mod:`tuner.analysis.estimates`)."""
        return numbers_of(self.record, self.confirmed)

    @property
    def throughput(self) -> float:
        """The study's first objective (output tok/s, or goodput req/s): the confirmed mean,
        else the single measurement."""
        return self.numbers.throughput.value

    @property
    def ranking_throughput(self) -> float:
        """What picks rank it by on throughput: the mean of its trial's measurement and its
        confirmation runs, where it was confirmed (see the module docstring); else its single
        measurement. A trial the GPUs' throttling slowed measured their state, and is left
        out."""
        if self.confirmed is None:
            return self.throughput
        runs = [r.throughput for r in self.confirmed.measured if r.throughput is not None]
        if self.record.throttled or not runs:
            return self.throughput
        return sum((self.record.objective[0], *runs)) / (len(runs) + 1)

    @property
    def p95_ttft_ms(self) -> float:
        """p95 TTFT in ms: the confirmed mean, else the single measurement."""
        return self.numbers.p95_ttft_ms.value

    @property
    def tokens_per_joule(self) -> float | None:
        """Output tokens per joule of GPU energy: the confirmation runs' mean where they read
        it, else as the trial read it; None where its GPUs were not read (no NVML)."""
        confirmed = self.confirmed.tokens_per_joule if self.confirmed is not None else None
        return self.record.tokens_per_joule if confirmed is None else confirmed

    @property
    def joules_per_token(self) -> float | None:
        """GPU joules per output token: the inverse of :attr:`tokens_per_joule`."""
        per_joule = self.tokens_per_joule
        return 1.0 / per_joule if per_joule else None


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


def feasible(study: optuna.Study) -> list[TrialRecord]:
    """Completed trials that neither ran out of memory nor broke the TTFT limit, repeats left
    out."""
    done = records(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    return [r for r in done if r.feasible and r.duplicate_of is None]


def pareto_front(study: optuna.Study) -> list[TrialRecord]:
    """The feasible Pareto front (Optuna's ``best_trials``), repeats left out, fastest first."""
    front = [r for r in records(study.best_trials) if r.feasible and r.duplicate_of is None]
    return sorted(front, key=lambda r: (-r.objective[0], r.number))


def candidates(
    trials: Sequence[TrialRecord],
    confirmed: Mapping[int, Confirmed],
    ttft_limit_ms: float,
    front: Collection[int] = (),
) -> list[Candidate]:
    """Feasible ``trials`` as candidates, best throughput first (see the module docstring).

    Args:
        trials: feasible records.
        confirmed: the study's confirmations by trial number.
        ttft_limit_ms: the limit a confirmation's mean must meet.
        front: the trial numbers on the study's Pareto front.
    """
    passed = {n: c for n, c in confirmed.items() if c.feasible(ttft_limit_ms)}
    chosen = [
        Candidate(t, passed.get(t.number), t.number in front)
        for t in trials
        if t.number not in confirmed or t.number in passed
    ]
    if passed:
        chosen = [c for c in chosen if c.confirmed is not None]
    fair = [c for c in chosen if c.confirmed is not None or not c.record.throttled]
    chosen = fair or chosen
    return sorted(chosen, key=lambda c: (-c.ranking_throughput, c.p95_ttft_ms, c.number))


def ranked(study: optuna.Study) -> list[Candidate]:
    """The study's candidates, best throughput first, on confirmed numbers where it has them."""
    space = stored_space(study)
    limit = space.ttft_limit_ms if space else math.inf
    front = {r.number for r in pareto_front(study)}
    return candidates(feasible(study), load_confirmed(study), limit, front)


def best_per_method(study: optuna.Study) -> list[Candidate]:
    """The fastest feasible config of each speculation method, fastest first.

    Unlike :func:`ranked`, single measurements stay beside confirmed configs: a method whose
    best was never confirmed is still compared (each row says which it is). A config whose
    confirmation broke the TTFT limit is left out, as everywhere else.
    """
    space = stored_space(study)
    limit = space.ttft_limit_ms if space else math.inf
    confirmed = load_confirmed(study)
    best: dict[SpecMethod, Candidate] = {}
    for record in feasible(study):
        run = confirmed.get(record.number)
        if run is not None and not run.feasible(limit):
            continue
        found = Candidate(record, run)
        method = record.server.method
        held = best.get(method)
        if held is None or (found.ranking_throughput, -found.p95_ttft_ms) > (
            held.ranking_throughput,
            -held.p95_ttft_ms,
        ):
            best[method] = found
    return sorted(best.values(), key=lambda c: (-c.ranking_throughput, c.number))


def choose(cands: Sequence[Candidate], pick: str) -> Candidate | None:
    """The candidate ``pick`` selects; None when there are none (for min-energy: none whose
    GPU energy was read)."""
    check_pick(pick)
    if not cands:
        return None
    if pick == "min-energy":
        read = [c for c in cands if c.tokens_per_joule is not None]
        if not read:
            return None
        return min(
            read, key=lambda c: (-(c.tokens_per_joule or 0.0), -c.ranking_throughput, c.number)
        )
    if pick == "max-throughput":
        return min(cands, key=lambda c: (-c.ranking_throughput, c.p95_ttft_ms, c.number))
    if pick == "min-ttft":
        return min(cands, key=lambda c: (c.p95_ttft_ms, -c.ranking_throughput, c.number))
    front = [c for c in cands if c.on_front] or list(cands)
    tok_hi = max(c.ranking_throughput for c in front)
    tok_lo = min(c.ranking_throughput for c in front)
    ttft_hi = max(c.p95_ttft_ms for c in front)
    ttft_lo = min(c.p95_ttft_ms for c in front)

    def distance(c: Candidate) -> float:
        tok_gap = (tok_hi - c.ranking_throughput) / (tok_hi - tok_lo) if tok_hi > tok_lo else 0.0
        ttft_gap = (c.p95_ttft_ms - ttft_lo) / (ttft_hi - ttft_lo) if ttft_hi > ttft_lo else 0.0
        return math.hypot(tok_gap, ttft_gap)

    return min(front, key=lambda c: (distance(c), -c.ranking_throughput, c.number))


def study_pick(study: optuna.Study, cands: Sequence[Candidate] | None = None) -> str:
    """The pick the study's recommendation takes: the one its space prefers (``slo.prefer``;
    max-throughput for a study stored before there was a choice), or max-throughput where
    that selects nothing because no candidate's GPU energy was read.

    Args:
        study: the study.
        cands: its candidates (:func:`ranked`), where the caller holds them already.
    """
    space = stored_space(study)
    preferred = DEFAULT_PICK if space is None else PREFERRED_PICK[space.prefer]
    if preferred == DEFAULT_PICK:
        return preferred
    found = choose(ranked(study) if cands is None else cands, preferred)
    return preferred if found is not None else DEFAULT_PICK


def recommend(study: optuna.Study, pick: str | None = None) -> Candidate | None:
    """The config ``pick`` recommends (confirmed numbers first), the study's own pick
    (:func:`study_pick`) by default; None when nothing is feasible, or nothing ``pick`` can
    rank (min-energy without an energy reading)."""
    cands = ranked(study)
    return choose(cands, check_pick(pick) if pick else study_pick(study, cands))


def confirmation_order(study: optuna.Study) -> list[TrialRecord]:
    """The study's feasible trials in the order to confirm them, one per distinct config.

    First the config the study's own pick selects on single measurements and its runner-up on
    the same pick, then those max-throughput, balanced and min-ttft select (so that,
    given enough configs, whatever pick a user exports was confirmed), then the rest by
    throughput. The runner-up comes before
    the other picks because the recommendation is decided between the two: the leader of many
    single measurements is the luckiest of them, and the best two configs are often closer
    than one run's noise (the search benchmark: with the other picks' configs confirmed
    instead, a study that had measured the optimum recommended the config 1.4 % behind it).
    """
    unique: dict[tuple[object, float], TrialRecord] = {}
    for record in sorted(feasible(study), key=lambda r: (-r.objective[0], r.number)):
        # The same server config at the same temperature is one config, however often tried.
        unique.setdefault((record.server, record.trial_temperature), record)
    front = {r.number for r in pareto_front(study)}
    cands = candidates(list(unique.values()), {}, math.inf, front)
    by_number = {r.number: r for r in unique.values()}
    own = study_pick(study, cands)
    leader = choose(cands, own)
    runner_up = choose([c for c in cands if c is not leader], own)
    order = [c.number for c in (leader, runner_up) if c is not None]
    for pick in ("max-throughput", "balanced", "min-ttft"):
        chosen = choose(cands, pick)
        if chosen is not None and chosen.number not in order:
            order.append(chosen.number)
    order += [c.number for c in cands if c.number not in order]
    return [by_number[n] for n in order]


def pick_candidate(study: optuna.Study, pick: str | None = None) -> Candidate:
    """The trial a pick name or a trial number (as text) selects, with its confirmation; the
    study's own pick (:func:`study_pick`) by default.

    Raises:
        ConfigError: unknown pick, no such completed trial, nothing feasible yet, or
            min-energy where no feasible trial's GPU energy was read.
    """
    if pick is not None and pick.isdigit():
        return _numbered(study, int(pick))
    cands = ranked(study)
    chosen = choose(cands, check_pick(pick) if pick else study_pick(study, cands))
    if chosen is None and cands:
        others = ", ".join(p for p in PICKS if p != pick)
        raise ConfigError(
            f"--pick {pick}: no feasible trial of study {study.study_name!r} had its GPU energy "
            f"read (the simulator and hosts without NVML read none): pick {others} instead"
        )
    if chosen is None:
        why = infeasible_reasons(r.status for r in records(study.get_trials(deepcopy=False)))
        raise ConfigError(f"study {study.study_name!r} has no feasible trial: {why}")
    return chosen


def _numbered(study: optuna.Study, number: int) -> Candidate:
    trials = study.get_trials(deepcopy=False)
    if number >= len(trials):
        raise ConfigError(
            f"study {study.study_name!r} has no trial {number}: it has "
            f"{len(trials)} trials (numbers 0..{len(trials) - 1})"
        )
    record = TrialRecord.from_trial(trials[number])
    if record is None or record.values is None:
        raise ConfigError(f"trial {number} did not complete: pick a completed trial")
    confirmation = load_confirmed(study).get(number)
    return Candidate(record, confirmation if confirmation and confirmation.stable else None)
