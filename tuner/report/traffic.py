"""The report's traffic sections: what was served, what failed, and the best per temperature.

A study measures every server config on the workload's traffic: concurrency levels and
temperatures, each with its share. These sections say which traffic that was, how many trials
lost requests (never scored, never recommended), and, where the study tuned the temperature
because the product may choose it, the best server config at each temperature tried.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from tuner.analysis.levels import LevelChoice, speculation_stops
from tuner.analysis.picks import Candidate
from tuner.config.prompt_sets import describe_prompt_set
from tuner.config.space import SearchSpace
from tuner.trial.record import TrialRecord

__all__ = ["per_temperature_section", "speculation_note", "traffic_rows"]


def _shares(pairs: Sequence[tuple[float, float]]) -> str:
    return ", ".join(f"{value:g} ({share * 100:.0f} %)" for value, share in pairs)


def traffic_rows(space: SearchSpace, done: Sequence[TrialRecord]) -> list[tuple[str, str]]:
    """Summary rows: the traffic measured, the prompts, and the failed requests."""
    workload = space.workload
    temperatures = (
        "tuned by the study (search.temperature)"
        if space.tunes_temperature
        else _shares(workload.temperature_mix) + ", measured on every server config"
    )
    lost = [r for r in done if r.lost_requests]
    first = next((r.failure for r in lost if r.failure), None)
    failed = f"{len(lost)} trials lost requests (at most {space.max_failed_requests:.0%} allowed)"
    if first:
        failed += f"; first: {first}"
    load = (
        ("request rates", ", ".join(f"{r:g}" for r in workload.rate_steps) + " per s, climbed")
        if space.goodput
        else ("concurrency", _shares([(float(c), w) for c, w in workload.load_profile]))
    )
    pair = "(rate, temperature)" if space.goodput else "(level, temperature)"
    return [
        load,
        ("temperatures", temperatures),
        ("prompts", describe_prompt_set(workload.prompt_set)),
        ("requests", f"{workload.requests} measured per {pair}"),
        ("failed requests", failed),
    ]


def per_temperature_section(space: SearchSpace, candidates: Sequence[Candidate]) -> str:
    """The best feasible server config at each temperature the study tuned over ('' when the
    study did not tune it: then every config was measured on the same mix)."""
    if not space.tunes_temperature:
        return ""
    best: dict[float, Candidate] = {}
    for candidate in candidates:  # best first
        best.setdefault(round(candidate.record.trial_temperature, 4), candidate)
    if not best:
        return ""
    rows = "".join(
        f"<tr><td>{t:g}</td><td>{c.number}</td><td class='l'>{html.escape(c.record.draft)}</td>"
        f"<td>{c.record.server.k or '-'}</td><td>{c.record.server.memory_label}</td>"
        f"<td>{c.record.server.max_num_batched_tokens}</td><td>{c.throughput:.{space.objective.digits}f}</td></tr>"
        for t, c in sorted(best.items())
    )
    return (
        "<h2>Best server config per temperature</h2><table id='per-temperature'><tr>"
        "<th>temperature</th><th>trial</th><th class='l'>draft</th><th>K</th><th>gpu-mem</th>"
        f"<th>batched</th><th>{space.objective.label}</th></tr>{rows}</table><p class='muted'>The "
        "temperature is your product's choice: pick the row for the one you serve.</p>"
    )


def speculation_note(levels: Sequence[LevelChoice]) -> str:
    """Where speculation stops paying for the recommended draft, as one sentence."""
    if not levels:
        return ""
    stops = speculation_stops(levels)
    if stops is None:
        return (
            f"<p id='spec-stops'>Speculation pays at every measured level, up to "
            f"{levels[-1].concurrency} concurrent requests.</p>"
        )
    return (
        f"<p id='spec-stops'>Speculation stops paying at {stops} concurrent requests: from there "
        "on, running without it is faster.</p>"
    )
