"""What vLLM's per-position acceptance counters say about a lower K of the same drafter.

vLLM counts, per verification step ("draft"), how often each drafted position was accepted
(``spec_decode_num_accepted_tokens_per_pos_total``). Position i is accepted only when every
position before it was, so ``accepted[i] / drafts`` is the unconditional probability that a
step keeps at least i drafted tokens (its "reach").

A drafter that proposes its tokens one after another (a draft model, an EAGLE head, MTP
layers, prompt lookup) proposes at K' the first K' tokens it would propose at K, and each is
verified against the same target distribution, so the positions 1..K' behave at K' as they
did at K: the expected accepted tokens per step at any K' <= K is the sum of the first K'
reaches, read off the counters with no model in between. Only the mix of contexts drafting
starts from differs between K and K' (steps end at other places), a second-order effect the
counters cannot see. Drafters whose proposal depends on K are left out (:func:`reusable`).

Above the highest K counted there are no counters, only a bound and a guess. Reach never rises
with the position, so K' > K keeps at most the last counted reach at each extra position (the
upper bound), and at least nothing there (the lower bound). The estimate continues from the last
counted position's conditional rate, the share of steps keeping position K among those keeping
K - 1, falling by the drafter's per-position decay at each position past it (the twin's
acceptance model: conditional rates ``alpha * decay**i``, its decay fitted to the counters).
The counters set the level the fitted model gets wrong, on these prompts at this temperature;
the model only says how fast it falls from there.

Each reach is a binomial proportion; its 95 % interval is **Wilson's score interval** (it
stays inside [0, 1] and covers close to its nominal level at the small counts and rates near
1 speculative decoding gives). The positions share their drafts, so their errors are
correlated; the interval of the sum is the sum of the positions' bounds, which is never
narrower than the sum's own normal interval whatever that correlation (the standard deviation
of a sum is at most the sum of the standard deviations).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.config.methods import method_of
from tuner.config.trial import SpeculativeConfig
from tuner.config.verification import Verification

__all__ = ["WILSON_Z", "AcceptedTokens", "PositionCounts", "reusable", "wilson"]

WILSON_Z = 1.959964  # two-sided 95 %


def reusable(spec: SpeculativeConfig | None) -> bool:
    """Whether ``spec``'s counters at K give its acceptance at every K' <= K.

    Block drafters (DFlash, DSpark) draft all K positions in one pass, each seeing the
    block: their counters carry about, not exactly (``Method.counters_carry``).
    Not for: suffix decoding (its proposal length follows its tree and K), P-EAGLE heads (a
    head trained token by token, drafting K at once: its later positions drift with K), block
    verification (the positions are accepted jointly), a K that changes with the batch size,
    or adaptive verification (each request's draft length chosen step by step).
    """
    if spec is None or not method_of(spec.method).counters_carry:
        return False
    return not (
        spec.parallel_drafting
        or spec.rejection_sample_method is Verification.BLOCK
        or spec.k_by_batch_size
        or spec.enable_adaptive_verification
    )


def wilson(successes: float, trials: float, z: float = WILSON_Z) -> tuple[float, float]:
    """Wilson's score interval of a binomial proportion (``(0, 1)`` without a trial)."""
    if trials <= 0:
        return 0.0, 1.0
    p = min(max(successes / trials, 0.0), 1.0)
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z / (1 + z2 / trials) * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials))
    return max(centre - half, 0.0), min(centre + half, 1.0)


@dataclass(frozen=True)
class AcceptedTokens:
    """Expected accepted draft tokens per verification step at ``k``, with 95 % bounds.

    ``counted``: the positions read off counters; below ``k``, the rest were continued past
    them (:meth:`PositionCounts.accepted_at`).
    """

    k: int
    mid: float
    low: float
    high: float
    counted: int

    @property
    def continued(self) -> bool:
        return self.counted < self.k


@dataclass(frozen=True)
class PositionCounts:
    """Per-position acceptance counters of one drafter, prompt set and temperature.

    Attributes:
        drafts: per position, the verification steps that drafted it (a trial at K counts
            its steps at positions 1..K; trials at several K pool position by position).
        accepted: per position, the steps that accepted it.
    """

    drafts: tuple[float, ...]
    accepted: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.drafts) != len(self.accepted):
            raise ValueError("per-position drafts and accepted counts differ in length")
        for shown, taken in zip(self.drafts, self.accepted, strict=True):
            if taken < 0 or shown < 0 or taken > shown * (1 + 1e-9):
                raise ValueError(f"accepted count {taken} outside 0..{shown} drafts")

    @classmethod
    def measured(cls, drafts: float, accepted: Sequence[float]) -> PositionCounts:
        """The counters of one measurement at K = ``len(accepted)`` over ``drafts`` steps."""
        return cls(tuple(float(drafts) for _ in accepted), tuple(float(a) for a in accepted))

    @property
    def k(self) -> int:
        """The highest position counted."""
        return len(self.accepted)

    def __add__(self, other: PositionCounts) -> PositionCounts:
        """Both measurements pooled, position by position."""
        width = max(self.k, other.k)

        def at(values: tuple[float, ...], i: int) -> float:
            return values[i] if i < len(values) else 0.0

        return PositionCounts(
            tuple(at(self.drafts, i) + at(other.drafts, i) for i in range(width)),
            tuple(at(self.accepted, i) + at(other.accepted, i) for i in range(width)),
        )

    def reach(self) -> tuple[tuple[float, float, float], ...]:
        """Each position's unconditional acceptance as ``(estimate, low, high)`` (Wilson)."""
        out = []
        for shown, taken in zip(self.drafts, self.accepted, strict=True):
            low, high = wilson(taken, shown)
            out.append((taken / shown if shown else 0.0, low, high))
        return tuple(out)

    def accepted_at(self, k: int, decay: float = 1.0) -> AcceptedTokens:
        """Expected accepted tokens per step at ``k``: within the counted positions, the sum of
        the first ``k`` reaches, its bounds the sums of theirs; above them, continued from the
        last position's conditional rate, falling by ``decay`` a position, bounded by its
        reach (see the module's docstring)."""
        if k < 1:
            raise ValueError(f"K={k} has no drafted position")
        if not self.k:
            raise ValueError(f"K={k}: no position was counted")
        reach = self.reach()
        first = reach[:k]
        mid = sum(r[0] for r in first)
        low = sum(r[1] for r in first)
        high = sum(r[2] for r in first)
        extra = k - self.k
        if extra > 0:
            kept = reach[-1][0]
            before = reach[-2][0] if self.k > 1 else 1.0
            rate = min(kept / before, 1.0) if before > 0 else 0.0
            for _ in range(extra):
                rate = min(rate * decay, 1.0)
                kept *= rate
                mid += kept
            high += extra * reach[-1][2]
        return AcceptedTokens(k, mid, low, high, min(k, self.k))
