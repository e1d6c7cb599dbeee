"""Why a study has no feasible trial, counted per reason, and what to change for the commonest.

"Relax the TTFT limit" is the wrong advice when every trial lost requests or ran out of memory:
the hint names each reason with its count, and advises on the one most trials hit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from tuner.trial.scoring import TrialStatus

__all__ = ["infeasible_reasons"]

# A reason per status (both OOMs are one), the advice for it, in the order hints list them.
_REASONS: dict[str, tuple[tuple[TrialStatus, ...], str]] = {
    "out of memory": (
        (TrialStatus.OOM, TrialStatus.OOM_PREDICTED),
        "use more GPUs, a smaller draft or K, or lower max_num_batched_tokens",
    ),
    "over the TTFT limit": ((TrialStatus.OVER_TTFT,), "relax slo.ttft_ms (--slo-ttft-ms)"),
    "over the TPOT limit": ((TrialStatus.OVER_TPOT,), "relax slo.tpot_ms"),
    "lost requests": (
        (TrialStatus.FAILED_REQUESTS,),
        "read the trial logs for why the server failed requests (or raise slo.max_failed_requests)",
    ),
    "stream gaps": (
        (TrialStatus.OVER_STREAM,),
        "relax slo.stream_gap_p99_ms, or lower the concurrency",
    ),
    "failed to run": ((TrialStatus.FAILED,), "read the trial logs: the server crashed or hung"),
}


def infeasible_reasons(statuses: Iterable[TrialStatus]) -> str:
    """``4 trials, none feasible: 3 lost requests, 1 over the TTFT limit; read the ...``.

    Args:
        statuses: how the study's trials ended; feasible ones are not counted (the caller
            asks because there are none).
    """
    counts: Counter[str] = Counter()
    for status in statuses:
        reason = next((name for name, (hit, _) in _REASONS.items() if status in hit), None)
        if reason is not None:
            counts[reason] += 1
    total = sum(counts.values())
    if not total:
        return "no trial has finished yet: run more trials"
    listed = ", ".join(f"{counts[name]} {name}" for name in _REASONS if counts[name])
    commonest = max(_REASONS, key=lambda name: counts[name])  # the first listed of equals
    return f"{total} trial{'s' * (total > 1)}, none feasible: {listed}; {_REASONS[commonest][1]}"
