"""What the fitted twin asks to measure next, and what it stores as predicted only.

After each trial the sampler (:mod:`tuner.search.twin_steer`) asks :func:`propose`: the twin's
best config not measured yet, or the best of another speculation method forecast close to it,
is enqueued with its forecast (user attribute :data:`PROPOSED_ATTR`); one proposal waits at a
time, so TPE chooses the trials the twin has no new idea for. Where that config needs a new
server, a request-only change of the running one (another temperature) forecast close enough
for the start-up it saves goes first, once per server (:mod:`tuner.search.startup`). A config
whose acceptance is read off counters and cannot reach the incumbent even at the top of its
band is stored as predicted only (:data:`PREDICTED_ONLY_ATTR`), not measured.

The closed form serves one request at a time; on a traffic mix whose first level is one
request, the best configs are forecast again on the whole mix (:func:`on_traffic`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.config.space import SearchSpace
from tuner.config.trial import ServerConfig
from tuner.search.queue import place, queued_params, warm_start_waits
from tuner.search.startup import REUSE_FLOOR, StartupPrice, StartupPrices, reuse_share
from tuner.search.twin_screen import TwinProposal, TwinScreen, params_key, trial_config
from tuner.sim.twin.fit import FittedTwin
from tuner.trial.race import Incumbent, incumbent_among
from tuner.trial.record import (
    BUDGET_ATTR,
    COUNTED_STATES,
    PROPOSED_ATTR,
    TrialRecord,
    records,
)

__all__ = [
    "CONTINUED_SOURCE",
    "COUNTERS_SOURCE",
    "PREDICTED_ONLY_ATTR",
    "PROPOSED_ATTR",
    "REUSES_KEY",
    "on_traffic",
    "propose",
]

# Another method's best is proposed when the twin puts it within this share of the best.
_CLOSE_SHARE = REUSE_FLOOR
# Where a proposal stores the trial whose running server it reuses instead of a new one.
REUSES_KEY = "reuses_server_of"
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


def propose(
    study: optuna.Study, screen: TwinScreen, twin: FittedTwin, done: Sequence[FrozenTrial]
) -> None:
    """Enqueues the twin's best config not measured yet, unless a proposal already waits;
    first, once per server, a request-only change of the running server forecast close
    enough to it for the start-up it saves (:func:`_reusing`)."""
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING))
    if any(t.user_attrs.get(PROPOSED_ATTR) for t in waiting):
        return
    live = len(study.get_trials(deepcopy=False, states=COUNTED_STATES))
    if live >= float(study.user_attrs.get(BUDGET_ATTR, "inf")):  # enqueued: past the budget
        return
    ranked = on_traffic(screen, twin, screen.rank(twin))
    if not ranked:
        return
    known = {params_key(queued_params(t)) for t in [*done, *waiting]}
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
    # order), else the trial just told; that one too where warm-start configs wait, since the
    # queue holds the proposal for the next turn, or drops it (tuner.search.queue).
    queued = [t for t in waiting if t.state is TrialState.WAITING]
    held = warm_start_waits(queued)
    before = max(queued, key=lambda t: t.number) if queued and not held else done[-1]

    def worth(proposal: TwinProposal) -> dict[str, Any] | None:
        """Its forecast attributes; None (stored as predicted only) where it cannot win."""
        ceiling = screen.ceiling(proposal)
        attrs = {
            "output_tok_s": round(proposal.output_tok_s, 3),
            "ttft_ms": round(proposal.ttft_ms, 3),
            "error_band": screen.band(proposal).describe(),
            "trials_fitted": twin.observations,
        }
        if proposal.accepted is not None:
            attrs.update(_counted(proposal, ceiling))
        if incumbent is not None and ceiling is not None and ceiling < incumbent.low:
            _not_measured(study, proposal, attrs, incumbent)
            return None
        return attrs

    for proposal in candidates:
        if params_key(proposal.params) in known:
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
        place(study, proposal.params, attrs)
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
    params = queued_params(before)
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
        if params_key(proposal.params) not in known and _server(space, proposal.params) == running:
            return proposal, start
    return None


def _bench_s(record: TrialRecord) -> float:
    """The seconds a trial's pairs were measured (its start-up and warm-ups left out)."""
    return sum(float(level.get("duration_s") or 0.0) for level in record.levels)


def _server(space: SearchSpace, params: dict[str, Any]) -> ServerConfig:
    """The server a trial of ``params`` runs (the runner restarts when it differs)."""
    return trial_config(space, params).server


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
    stored[repr(params_key(proposal.params))] = entry
    study.set_user_attr(PREDICTED_ONLY_ATTR, stored)


def on_traffic(
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
        arm = screen.arm_named(proposal.params)
        return arm.draft, arm.k

    chosen: dict[tuple[tuple[str, Any], ...], TwinProposal] = {}
    pairs: set[tuple[str, int]] = set()
    for proposal in ranked:
        if pair(proposal) not in pairs or len(chosen) < _TRAFFIC_TOP:
            chosen.setdefault(params_key(proposal.params), proposal)
            pairs.add(pair(proposal))
    best = list(dict.fromkeys(pair(p) for p in _scaled(screen, chosen.values())))[:_TRAFFIC_TOP]
    for proposal in ranked:
        if pair(proposal) in best:
            chosen.setdefault(params_key(proposal.params), proposal)
    return _scaled(screen, chosen.values())


def _scaled(screen: TwinScreen, proposals: Iterable[TwinProposal]) -> list[TwinProposal]:
    """``proposals`` forecast on the space's traffic (those that miss a limit left out), best
    first."""
    scored = []
    for proposal in proposals:
        ratio = screen.traffic_ratio(proposal.params)
        if ratio is not None:
            scored.append(proposal.scaled(ratio))
    return sorted(scored, key=lambda p: -p.output_tok_s)
