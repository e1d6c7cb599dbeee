"""The model runner a trial ran on, for tables, reports and exports: what vLLM's log said,
else what spectune predicted before launch (:mod:`tuner.config.vllm_runner`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the record module imports Optuna; the CLI's tables load this one at start
    from tuner.trial.record import TrialRecord

__all__ = ["model_runner", "runner_note"]


def model_runner(record: TrialRecord) -> str:
    """``V1`` or ``V2``: what the server's log said, else what spectune predicted; ``-`` when
    neither knows (no prediction for the release, nothing logged, an older study)."""
    logged = record.served.model_runner if record.served is not None else None
    predicted = record.runner.runner if record.runner is not None else None
    return logged or (str(predicted) if predicted is not None else "-")


def runner_note(record: TrialRecord) -> str:
    """The runner and where that came from, one line for reports and exports."""
    served = record.served
    if served is not None and served.model_runner is not None:
        why = f": {served.runner_reason}" if served.runner_reason else ""
        return f"{served.model_runner} (logged by vLLM{why})"
    if record.runner is None:
        return "not recorded"
    return f"{record.runner.describe()} (predicted from vLLM's rules)"
