"""The names of the picks (:mod:`tuner.analysis.picks`), apart from the code that ranks trials.

The command line declares ``--pick`` from these; importing them costs nothing, while the picks
module imports Optuna.
"""

from __future__ import annotations

__all__ = ["DEFAULT_PICK", "PICKS", "PREFERRED_PICK"]

PICKS = ("max-throughput", "min-ttft", "balanced", "min-energy")
DEFAULT_PICK = "max-throughput"
# The pick each ``slo.prefer`` recommends by: ``both`` hands out the fastest config of the
# tok/s against J/token front, which is the fastest feasible config.
PREFERRED_PICK = {"throughput": DEFAULT_PICK, "energy": "min-energy", "both": DEFAULT_PICK}
