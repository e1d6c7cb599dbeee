"""What studies a storage holds and where each stands: ``spectune studies`` and the line
``optimize`` prints when it resumes one.

The default storage is one SQLite file per study in the studies folder
(``STUDIES_DIR/NAME.db``), so the studies of a folder are those of each of its ``*.db`` files;
a ``--storage`` database may hold several.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.analysis.picks import recommend
from tuner.errors import SpectuneError
from tuner.study.storage import open_storage, safe_url, study_names
from tuner.trial.record import BUDGET_ATTR, SOURCE_ATTR, SPACE_ATTR

__all__ = [
    "StudyState",
    "StudySummary",
    "folder_storages",
    "list_studies",
    "resuming",
    "summarize",
]


class StudyState(enum.StrEnum):
    """Where a study stands."""

    RUNNING = "running"
    """A trial runs now (or its worker died, and the next run will notice and retry it)."""
    FINISHED = "finished"
    """Its trial budget is used up; ``optimize --study NAME --trials N`` adds N more."""
    STOPPED = "stopped"
    """Stopped before its budget (Ctrl-C, a time budget, faults); resuming runs the rest."""


@dataclass(frozen=True)
class StudySummary:
    """One study of a storage, as ``spectune studies`` lists it (``--json``: each field, by
    :func:`tuner.serde.dump`).

    Attributes:
        name: the study's name.
        storage: its database URL, without a password.
        source: ``measured`` or ``simulated`` (None before its first trial).
        space: the name of its search space, and the hardware it tunes.
        hardware: e.g. ``4090x2``.
        trials: trials that ran to the end (OOM and over-limit ones included).
        failed: trials an infrastructure fault ended (retried, not counted).
        running: trials running now.
        budget: the trials all runs together were asked for.
        state: where it stands.
        best: the recommended config's trial number and its objective and p95 TTFT (confirmed
            means where confirmed), with the objective's unit; None when nothing is feasible.
    """

    name: str
    storage: str
    source: str | None
    space: str | None
    hardware: str | None
    trials: int
    failed: int
    running: int
    budget: int | None
    state: StudyState
    best: dict[str, Any] | None


def summarize(study: optuna.Study, storage: str) -> StudySummary:
    """Where ``study`` stands: its trials by state, its budget and its recommended config."""
    counts = {state: 0 for state in TrialState}
    for trial in study.get_trials(deepcopy=False):
        counts[trial.state] += 1
    done = counts[TrialState.COMPLETE] + counts[TrialState.PRUNED]
    budget = study.user_attrs.get(BUDGET_ATTR)
    if counts[TrialState.RUNNING]:
        state = StudyState.RUNNING
    elif budget is None or done >= int(budget):
        state = StudyState.FINISHED
    else:
        state = StudyState.STOPPED
    space = study.user_attrs.get(SPACE_ATTR) or {}
    return StudySummary(
        name=study.study_name,
        storage=safe_url(storage),
        source=study.user_attrs.get(SOURCE_ATTR),
        space=space.get("name"),
        hardware=space.get("hardware"),
        trials=done,
        failed=counts[TrialState.FAIL],
        running=counts[TrialState.RUNNING],
        budget=None if budget is None else int(budget),
        state=state,
        best=_best(study, space),
    )


def _best(study: optuna.Study, space: dict[str, Any]) -> dict[str, Any] | None:
    chosen = recommend(study)
    if chosen is None:
        return None
    goodput = (space.get("slo") or {}).get("objective") == "goodput"
    return {
        "trial": chosen.number,
        "throughput": chosen.throughput,
        "unit": "req/s" if goodput else "tok/s",
        "p95_ttft_ms": chosen.p95_ttft_ms,
        "confirmed": chosen.confirmed is not None,
    }


def folder_storages(studies_dir: Path) -> list[str]:
    """The default SQLite storage of each study in ``studies_dir`` (``NAME.db``), by name."""
    if not studies_dir.is_dir():
        return []
    return [f"sqlite:///{path}" for path in sorted(studies_dir.glob("*.db")) if path.is_file()]


def list_studies(storages: Iterable[str]) -> tuple[list[StudySummary], list[str]]:
    """Every study in ``storages``, and one line for each storage that could not be read.

    A file that is not a study database, a server that does not answer, or a study whose stored
    space cannot be read here does not hide the others.
    """
    found: list[StudySummary] = []
    problems: list[str] = []
    for url in storages:
        try:
            storage = open_storage(url)
        except SpectuneError as error:
            problems.append(str(error))
            continue
        for name in sorted(study_names(storage)):
            study = optuna.load_study(study_name=name, storage=storage)
            try:
                found.append(summarize(study, url))
            except SpectuneError as error:  # e.g. a stored space this host cannot rebuild
                problems.append(f"study {name} in {safe_url(url)}: {error}")
    return found, problems


def resuming(storage: optuna.storages.BaseStorage, name: str, adding: int) -> str:
    """The line ``optimize`` prints when it resumes study ``name``, which ``storage`` holds."""
    study = optuna.load_study(study_name=name, storage=storage)
    ran = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    return f"resuming study {name} ({len(ran)} trials, adding {adding})"
