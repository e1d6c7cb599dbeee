"""Order-statistic bounds: exact against rational arithmetic, and fine at thousands of requests."""

from __future__ import annotations

import random
from fractions import Fraction
from math import comb

import pytest

from tuner.bench.percentiles import quantile_interval


def _exact_ranks(n: int, q: int, confidence: Fraction) -> tuple[int, int | None]:
    """The rule of quantile_interval in exact rationals: (low rank or 0, high rank or None)."""
    p, tail = Fraction(q, 100), (1 - confidence) / 2
    cdf, below = [], Fraction(0)
    for k in range(n):
        below += comb(n, k) * p**k * (1 - p) ** (n - k)
        cdf.append(below)
    low = max((r for r in range(1, n + 1) if cdf[r - 1] <= tail), default=0)
    high = next((r for r in range(1, n + 1) if cdf[r - 1] >= 1 - tail), None)
    return low, high


@pytest.mark.parametrize("n", [1, 5, 20, 40, 72, 100, 257])
@pytest.mark.parametrize("q", [50, 90, 95, 99])
def test_bounds_match_the_exact_rule(n: int, q: int) -> None:
    # Ranks as values: the bound returned is the rank picked.
    values = [float(rank) for rank in range(1, n + 1)]
    low, high = quantile_interval(values, q)
    exact_low, exact_high = _exact_ranks(n, q, Fraction(95, 100))
    assert low == (float(exact_low) if exact_low else None)
    assert high == (None if exact_high is None else float(exact_high))


def test_40_samples_bound_p95_from_below_only() -> None:
    low, high = quantile_interval([float(v) for v in range(40)], 95)
    assert low is not None
    assert high is None


@pytest.mark.timeout(30)
def test_4096_requests_get_bounds_around_their_p95() -> None:
    # 1,030 requests once overflowed a float; 4,096 is `bench --requests 4096`.
    rng = random.Random(7)
    values = sorted(rng.expovariate(1 / 200) for _ in range(4096))
    low, high = quantile_interval(values, 95)
    assert low is not None and high is not None
    p95 = values[round(0.95 * 4096) - 1]
    assert low < p95 < high
    # About 1.96 standard deviations of the count below the p95, sqrt(n p (1 - p)) = 13.9.
    assert values.index(low) + 1 == pytest.approx(0.95 * 4096 - 1.96 * 13.9, abs=2)
    assert values.index(high) + 1 == pytest.approx(0.95 * 4096 + 1.96 * 13.9, abs=2)
