"""How far a measured percentile can be trusted: distribution-free order-statistic bounds.

For n independent samples, the true q-quantile lies between the l-th and u-th smallest sample
with probability sum_{i=l}^{u-1} C(n, i) q^i (1 - q)^(n - i) (a binomial count of the samples
below it). :func:`quantile_interval` picks l and u so each tail holds at most (1 - confidence)/2.
No shape is assumed, which matters for latencies: their tails are long and lumpy.

With too few samples a bound does not exist: from 40 samples the 95th percentile has a lower
bound at 95 % confidence but no upper one (even the largest sample lies below the true p95 with
probability 0.95^40 = 13 %); about 72 samples give it both.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

__all__ = ["MIN_SAMPLES_FOR_P95", "quantile_interval"]

MIN_SAMPLES_FOR_P95 = 40
"""Requests per level below which a p95 is little more than the maximum."""


def _binomial_cdfs(n: int, p: float) -> list[float]:
    """P(X <= k) for X ~ Binomial(n, p), for k = 0 .. n - 1, in one pass.

    Each term is taken in log space (``lgamma``), where C(n, k) p^k (1 - p)^(n - k) neither
    overflows nor underflows to a wrong zero at thousands of samples; n terms in all.
    """
    if p <= 0.0:
        return [1.0] * n
    if p >= 1.0:
        return [0.0] * n
    log_p, log_q, log_n = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    cdfs, total = [], 0.0
    for k in range(n):
        log_term = log_n - math.lgamma(k + 1) - math.lgamma(n - k + 1)
        total += math.exp(log_term + k * log_p + (n - k) * log_q)
        cdfs.append(min(total, 1.0))
    return cdfs


def quantile_interval(
    values: Sequence[float], q: float, confidence: float = 0.95
) -> tuple[float | None, float | None]:
    """Order-statistic bounds on the ``q``-th percentile (``q`` in 0..100) of ``values``.

    Returns:
        (low, high); a side is None where the samples are too few to bound it (low: below the
        smallest sample, high: above the largest).
    """
    n = len(values)
    if n == 0:
        return None, None
    ordered = sorted(values)
    p, tail = q / 100.0, (1.0 - confidence) / 2.0
    # P(fewer than r samples below the quantile) is cdfs[r - 1], rising with r.
    cdfs = _binomial_cdfs(n, p)
    # low: the largest rank l with P(fewer than l samples below the quantile) <= tail.
    low_rank = bisect.bisect_right(cdfs, tail)
    # high: the smallest rank u with P(fewer than u samples below the quantile) >= 1 - tail.
    above = bisect.bisect_left(cdfs, 1 - tail)
    high_rank = above + 1 if above < n else None
    low = ordered[low_rank - 1] if low_rank else None
    high = ordered[high_rank - 1] if high_rank else None
    return low, high
