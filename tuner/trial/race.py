"""What a trial races against, and when it has honestly lost: pruning.

The **incumbent** is the study's best feasible trial so far, with each pair's output tok/s
interval (:class:`~tuner.trial.rounds.PairInterval`, stored with its record). After each measured
pair, a trial's best case over the whole traffic mix is the measured pairs' upper bounds plus,
for the pairs not measured yet, the prediction's upper bound (the study's forecast with its
error band, :attr:`Race.ceiling`). When that best case cannot reach the incumbent's worst case
(its lower bounds, weighted the same way), the trial cannot become the best and measuring it
on would only cost GPU time: it ends PRUNED, its measured pairs and the reason stored. A pair
whose prediction has no known error band is unbounded, so a trial is never pruned on a guess.

A trial that measures above its own prediction (:attr:`Race.predicted`) has its other pairs'
ceilings raised by as much (:meth:`Race.surprise`): the pairs of one config share its
acceptance and its step, so a prior wrong about one pair is wrong about the others, by more
than the band, which was measured where the prior was right. Without it a world kinder to a
method than the prior (outputs that repeat the prompt, for prompt lookup and suffix decoding)
pruned that method's best config after its first pair.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tuner import serde
from tuner.config.workload import Condition
from tuner.trial.rounds import PairInterval

__all__ = ["Incumbent", "Race", "incumbent_among"]


@dataclass(frozen=True)
class Incumbent:
    """The best feasible trial so far: its number and each pair's interval, in mix order."""

    number: int
    pairs: tuple[PairInterval, ...]
    weights: tuple[float, ...]

    @property
    def low(self) -> float:
        """Its worst case over the mix (weighted lower bounds)."""
        total = sum(self.weights)
        return sum(w * p.low for w, p in zip(self.weights, self.pairs, strict=True)) / total


class _Record(Protocol):
    """What the incumbent is chosen by (a :class:`~tuner.trial.record.TrialRecord`, which
    imports the runner, and the runner this module)."""

    @property
    def number(self) -> int: ...

    @property
    def feasible(self) -> bool: ...

    @property
    def throughput(self) -> float | None: ...

    @property
    def levels(self) -> tuple[Mapping[str, Any], ...]: ...


def incumbent_among(found: Iterable[_Record]) -> Incumbent | None:
    """The best feasible completed record with an interval at every pair; None if none."""
    best: tuple[float, Incumbent] | None = None
    for record in found:
        incumbent, value = _incumbent(record), record.throughput
        if incumbent is not None and value is not None and (best is None or value > best[0]):
            best = (value, incumbent)
    return None if best is None else best[1]


def _incumbent(record: _Record) -> Incumbent | None:
    if not record.feasible or record.throughput is None or not record.levels:
        return None
    stored = [level.get("tok_s_interval") for level in record.levels]
    weights = [level.get("weight") for level in record.levels]
    if any(s is None for s in stored) or any(w is None for w in weights):
        return None
    pairs = tuple(serde.load(PairInterval, s) for s in stored if s is not None)
    return Incumbent(record.number, pairs, tuple(float(w) for w in weights if w is not None))


def _unbounded(condition: Condition) -> float | None:
    del condition
    return None


@dataclass(frozen=True)
class Race:
    """A trial's race: the incumbent (None: none yet), the best case of a pair not yet
    measured (``ceiling``: its tok/s upper bound, None where unknown) and the prediction that
    ceiling raises by its band (``predicted``: None where there is none)."""

    incumbent: Incumbent | None
    ceiling: Callable[[Condition], float | None]
    predicted: Callable[[Condition], float | None] = _unbounded

    def settled(self, conditions: Iterable[Condition]) -> Race:
        """This race with the ceilings and predictions of ``conditions`` computed now: a plain
        record that a trial run in another process (a Ray slot) can take, with no forecast
        behind it. A condition not among them has no ceiling, so it never prunes."""
        if self.incumbent is None:  # nothing to prune against: no ceiling is ever asked
            return Race(None, _unbounded)
        ceilings = {condition: self.ceiling(condition) for condition in conditions}
        predictions = {condition: self.predicted(condition) for condition in conditions}
        return Race(self.incumbent, ceilings.get, predictions.get)

    def surprise(self, measured: Sequence[tuple[Condition, PairInterval]]) -> float:
        """How far above its prediction the trial measured: the largest ratio of a measured
        pair's estimate to its prediction, never below 1 (a trial below its prediction keeps
        the band it had: the band already covers a prior too kind)."""
        ratios = [
            interval.mid / predicted
            for condition, interval in measured
            if (predicted := self.predicted(condition)) and math.isfinite(interval.mid)
        ]
        return max([1.0, *ratios])

    def pair(self, index: int, count: int) -> PairInterval | None:
        """The incumbent's interval at pair ``index`` of a mix of ``count`` pairs (None when
        there is no incumbent or its mix has another shape)."""
        if self.incumbent is None or len(self.incumbent.pairs) != count:
            return None
        return self.incumbent.pairs[index]

    def prune_reason(
        self, measured: Sequence[tuple[Condition, PairInterval]], rest: Sequence[Condition]
    ) -> str | None:
        """Why the trial cannot win after its ``measured`` pairs, with ``rest`` still to
        measure; None while it still can (or nothing bounds its best case)."""
        incumbent = self.incumbent
        if incumbent is None or not measured:
            return None
        best = sum(c.weight * i.high for c, i in measured)
        surprise = self.surprise(measured)
        for condition in rest:
            ceiling = self.ceiling(condition)
            if ceiling is None:
                return None
            best += condition.weight * ceiling * surprise
        total = sum(c.weight for c, _ in measured) + sum(c.weight for c in rest)
        best /= total
        if not math.isfinite(best) or best >= incumbent.low:
            return None
        parts = f"{len(measured)} of {len(measured) + len(rest)} pairs measured"
        raised = f", raised {surprise:.2f}x as measured above it" if surprise >= 1.005 else ""
        predicted = f", {len(rest)} predicted with their error band{raised}" if rest else ""
        return (
            f"cannot reach trial {incumbent.number}: at most {best:.1f} tok/s over the mix "
            f"({parts}{predicted}) < its {incumbent.low:.1f} tok/s at least"
        )
