"""One measured (concurrency, temperature) pair as a study stores it and ``bench`` prints it,
and what the GPUs did through all of a trial's pairs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from tuner.bench.percentiles import quantile_interval
from tuner.catalog.gpu_state import combined
from tuner.config.workload import Condition
from tuner.results import TrialResult

__all__ = ["gpu_summary", "level_summary"]


def level_summary(result: TrialResult, condition: Condition | None = None) -> dict[str, Any]:
    """One measured pair as stored: the result's summary, the pair, and honest percentiles.

    ``ttft_p95_interval_ms`` holds order-statistic bounds (95 % confidence) on the p95 TTFT;
    a side is None where the requests were too few to bound it. TPOT is per token (from
    ``usage``), ITL per streamed chunk (under speculation one chunk carries several tokens).

    ``server_ttft_p*_ms`` and ``server_queue_p*_ms`` are percentiles of what the server itself
    reported per request (vLLM's response ``metrics``, sent when it was started with
    ``--enable-per-request-metrics``), stored beside the client's ``ttft_p*_ms``; None where the
    server sent none. The server's TTFT leaves out the queue time; the client's includes it.
    """
    ttfts = [r.ttft * 1000.0 for r in result.succeeded if r.ttft is not None]
    summary = {
        **result.summary(),
        "ttft_p95_interval_ms": list(quantile_interval(ttfts, 95)),
        "tpot_p95_ms": result.tpot_ms(95),
        "failed_share": result.errors / len(result.requests) if result.requests else None,
        **{f"server_ttft_p{q}_ms": result.server_ttft_ms(q) for q in (50, 95)},
        **{f"server_queue_p{q}_ms": result.server_queue_ms(q) for q in (50, 95)},
    }
    if condition is not None:
        summary.update(temperature=condition.sampling_temperature, weight=condition.weight)
        if condition.request_rate is not None:  # a goodput step: the rate it offered
            summary["offered_rate"] = condition.request_rate
    return summary


def gpu_summary(results: Sequence[TrialResult]) -> dict[str, Any] | None:
    """What the GPUs did through every measured pair of a trial, as the trial stores it: the
    pairs' windows combined, how many pairs were throttled (heat or a hardware slowdown) and in
    how many other processes' GPU memory moved, the
    joules per output token of them all and its inverse; None
    when a pair was measured without GPU readings (no NVML, a simulated GPU without board
    power)."""
    windows = [r.gpu for r in results if r.gpu is not None]
    window = combined(windows)
    if window is None or len(windows) != len(results):
        return None
    tokens = sum(r.output_tokens for r in results)
    per_token = window.energy_j / tokens if window.energy_j and tokens else None
    return {
        **asdict(window),
        "power_limit_w": list(window.power_limit_w),
        "throttled_pairs": sum(1 for w in windows if w.throttled),
        "tenants_moved_pairs": sum(1 for w in windows if w.tenants_moved),
        "joules_per_token": per_token,
        "tokens_per_joule": 1.0 / per_token if per_token else None,
    }
