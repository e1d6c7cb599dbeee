"""A point the simulator forecast for the warm start."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuner.config.trial import TrialConfig
from tuner.search.screen import Arm

__all__ = ["Prediction"]


@dataclass(frozen=True)
class Prediction:
    """The simulator's noise-free forecast for one point of a search space.

    Attributes:
        params: the point, named as :meth:`SearchSpace.suggest` names its parameters.
        config: the trial config those parameters make.
        throughput: predicted output tok/s as a trial scores it (each concurrency level and
            temperature of the traffic weighted by its share), or in a goodput study the
            predicted goodput (req/s).
        p95_ttft_ms: predicted p95 time to first token, the worst level's (inf: none completed,
            no step passed).
        tail_ttft_ms: the same for prompts as long as the longest the simulator sends.
        headroom_gib: memory a start-up may need beyond the model before it fails.
    """

    params: dict[str, Any]
    config: TrialConfig
    throughput: float
    p95_ttft_ms: float
    tail_ttft_ms: float
    headroom_gib: float

    @property
    def arm(self) -> Arm:
        spec = self.config.server.speculative
        k = 0 if spec is None else spec.num_speculative_tokens
        return Arm(str(self.params["draft"]), k, spec)
