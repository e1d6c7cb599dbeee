"""What a study's recommendation optimises: its own module, light enough for the CLI's options
to name without loading the space schema (``spectune --help``: benchmarks/help_cost.py)."""

from __future__ import annotations

import enum

__all__ = ["Preference"]


class Preference(enum.StrEnum):
    """What the recommendation optimises among the feasible configs (``slo.prefer``, or
    ``optimize --objective``); the study's two Optuna objectives stay as they are."""

    THROUGHPUT = "throughput"
    """The highest first objective (tok/s, or goodput req/s)."""
    ENERGY = "energy"
    """The most output tokens per joule of GPU energy, where the GPUs were read."""
    BOTH = "both"
    """The Pareto front of throughput and joules per token, the fastest on it recommended."""

    @property
    def energy(self) -> bool:
        """Whether it needs the GPUs' energy read (the simulator reads none)."""
        return self is not Preference.THROUGHPUT
