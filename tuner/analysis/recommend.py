"""Reads a finished study: feasible trials, the Pareto front, and the recommended config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.config.trial import ServerConfig, server_from_dict
from tuner.trial.scoring import CONSTRAINT_KEYS

__all__ = ["TrialView", "feasible", "pareto_front", "recommend", "trial_view"]


@dataclass(frozen=True)
class TrialView:
    """One completed trial as tables and exports show it."""

    number: int
    server: ServerConfig
    temperature: float
    output_tok_s: float
    p95_ttft_ms: float
    status: str
    source: str
    summary: dict[str, Any]
    restarted: bool

    @property
    def draft(self) -> str:
        return self.server.draft or "none"

    @property
    def acceptance_rate(self) -> float | None:
        value = self.summary.get("acceptance_rate")
        return None if value is None else float(value)


def trial_view(trial: FrozenTrial) -> TrialView:
    attrs = trial.user_attrs
    values = trial.values or [0.0, 0.0]
    return TrialView(
        number=trial.number,
        server=server_from_dict(attrs["server"]),
        temperature=float(attrs["temperature"]),
        output_tok_s=float(values[0]),
        p95_ttft_ms=float(values[1]),
        status=str(attrs.get("status", "ok")),
        source=str(attrs.get("source", "measured")),
        summary=dict(attrs.get("summary") or {}),
        restarted=bool(attrs.get("restarted", False)),
    )


def _is_feasible(trial: FrozenTrial) -> bool:
    constraints = trial.constraints
    return all(constraints.get(key, 1.0) <= 0 for key in CONSTRAINT_KEYS)


def feasible(study: optuna.Study) -> list[FrozenTrial]:
    """Completed trials that neither ran out of memory nor broke the TTFT limit."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return [t for t in done if _is_feasible(t) and "server" in t.user_attrs]


def pareto_front(study: optuna.Study) -> list[FrozenTrial]:
    """Feasible trials no other feasible trial beats on both throughput and p95 TTFT."""
    candidates = feasible(study)

    def dominated(t: FrozenTrial) -> bool:
        tput, ttft = t.values
        return any(
            o.values[0] >= tput
            and o.values[1] <= ttft
            and (o.values[0] > tput or o.values[1] < ttft)
            for o in candidates
        )

    return sorted((t for t in candidates if not dominated(t)), key=lambda t: -t.values[0])


def recommend(study: optuna.Study) -> FrozenTrial | None:
    """The highest-throughput trial within the TTFT limit, or None if none is feasible."""
    candidates = feasible(study)
    return max(candidates, key=lambda t: t.values[0], default=None)
