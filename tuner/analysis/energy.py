"""Energy beside speed: the front of throughput against joules per token, and what the fastest
config costs in energy against the most frugal.

Only candidates whose trial read the GPUs' energy take part (:attr:`Candidate.joules_per_token`;
the simulator and hosts without NVML read none). A candidate's throughput is its confirmed mean
where it has one, its joules per token always its trial's own reading: confirmation runs read
no energy. Who beats whom is decided as the picks decide it
(:attr:`~tuner.analysis.picks.Candidate.ranking_throughput`).
"""

from __future__ import annotations

from collections.abc import Sequence

from tuner.analysis.picks import Candidate, choose
from tuner.config.preference import Preference

__all__ = ["energy_cost", "energy_front", "energy_note"]


def _read(cands: Sequence[Candidate]) -> list[Candidate]:
    return [c for c in cands if c.joules_per_token is not None]


def _dominates(a: Candidate, b: Candidate) -> bool:
    a_j, b_j = a.joules_per_token or 0.0, b.joules_per_token or 0.0
    a_tok, b_tok = a.ranking_throughput, b.ranking_throughput
    no_worse = a_tok >= b_tok and a_j <= b_j
    return no_worse and (a_tok > b_tok or a_j < b_j)


def energy_front(cands: Sequence[Candidate]) -> list[Candidate]:
    """The candidates no other beats on both throughput and joules per token, fastest first;
    empty where none had its energy read."""
    read = _read(cands)
    front = [c for c in read if not any(_dominates(o, c) for o in read)]
    return sorted(front, key=lambda c: (-c.ranking_throughput, c.number))


def energy_cost(cands: Sequence[Candidate], unit: str = "tok/s") -> str | None:
    """One sentence: what the fastest config whose energy was read costs per output token
    against the most frugal; None where no candidate's energy was read.

    Args:
        cands: the study's candidates (:func:`~tuner.analysis.picks.ranked`).
        unit: the first objective's unit (tok/s, or req/s for goodput).
    """
    read = _read(cands)
    fastest, frugal = choose(read, "max-throughput"), choose(read, "min-energy")
    if fastest is None or frugal is None:
        return None
    fast_j, frugal_j = fastest.joules_per_token or 0.0, frugal.joules_per_token or 0.0
    if fastest.number == frugal.number:
        return (
            f"The fastest config, trial {fastest.number} ({fastest.throughput:.1f} {unit}), is "
            f"also the most frugal: {fast_j:.3f} J per output token."
        )
    fast_tok, frugal_tok = fastest.ranking_throughput, frugal.ranking_throughput
    slower = 1 - frugal_tok / fast_tok if fast_tok > 0 else 0.0
    return (
        f"The fastest config, trial {fastest.number} ({fastest.throughput:.1f} {unit}, "
        f"{fast_j:.3f} J per output token), spends {fast_j / frugal_j - 1:.0%} more energy per "
        f"token than the most frugal, trial {frugal.number} ({frugal_j:.3f} J per token, "
        f"{frugal.throughput:.1f} {unit}, {slower:.0%} slower)."
    )


def energy_note(prefer: Preference, cands: Sequence[Candidate]) -> str | None:
    """The one line an energy preference gets where energy was not read on every feasible
    config; None where it was, or where the study prefers throughput."""
    if not prefer.energy or not cands:
        return None
    read = len(_read(cands))
    if read == 0:
        return (
            f"slo.prefer {prefer}: no feasible trial had its GPU energy read (no NVML on the "
            "trials' GPUs): the recommendation is the fastest config"
        )
    if read < len(cands):
        return (
            f"slo.prefer {prefer}: GPU energy was read on {read} of {len(cands)} feasible "
            "configs; the others are left out of its comparison"
        )
    return None
