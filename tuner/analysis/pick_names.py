"""The names of the picks (:mod:`tuner.analysis.picks`), apart from the code that ranks trials.

The command line declares ``--pick`` from these; importing them costs nothing, while the picks
module imports Optuna.
"""

from __future__ import annotations

__all__ = ["DEFAULT_PICK", "PICKS"]

PICKS = ("max-throughput", "min-ttft", "balanced")
DEFAULT_PICK = "max-throughput"
