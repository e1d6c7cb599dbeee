"""optuna-dashboard on a spectune study: objective names, infeasible trials, per-trial logs.

optuna-dashboard 0.21 knows three things only from where it looks for them:

- objective names from the study's metric names (``study.set_metric_names``);
- feasibility from the legacy ``constraints`` system attribute of each trial (a list, all
  values <= 0 meaning feasible): Optuna 5's keyed ``constraints:<name>`` attributes are
  invisible to it, so an OOM or over-limit trial would show as feasible without the list;
- trial artifacts from ``artifacts:<id>`` system attributes, with the files in an artifact
  store it is started with;
- the study's note, shown at the top of the study page: the recommendation goes there
  (:mod:`tuner.report.dashboard_note`).

The trial loop writes none of this: Optuna 5 would read a legacy list as a second set of
constraints. :func:`prepare_dashboard` (``spectune dashboard``) writes all three before the
server starts. Logs go to a
:class:`~optuna.artifacts.FileSystemArtifactStore` in ``<studies>/<study>/artifacts``: the
server log of each trial (``logs/trial-N.log``, and ``logs/confirm-N/trial-R.log`` for its
confirmation runs) where a real backend wrote one, else a short JSON record of the trial.

Optuna refuses to change a finished trial, even a system attribute, so the backfill writes the
same attribute rows straight into the RDB storage's table (through
:mod:`tuner.trial.optuna_private`, like every use of Optuna's internals).
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.artifacts import ArtifactMeta, FileSystemArtifactStore, get_all_artifact_meta
from optuna.trial import FrozenTrial, TrialState

from tuner.errors import ConfigError
from tuner.report.dashboard_note import write_note
from tuner.report.dashboard_server import serve
from tuner.study.paths import StudyPaths
from tuner.trial import optuna_private
from tuner.trial.record import TrialRecord, stored_space
from tuner.trial.scoring import LEGACY_CONSTRAINT_KEYS, OBJECTIVE_NAMES, Limits

__all__ = [
    "LEGACY_CONSTRAINTS",
    "DashboardInfo",
    "attach_artifacts",
    "prepare_dashboard",
    "serve_dashboard",
]

LEGACY_CONSTRAINTS = optuna_private.LEGACY_CONSTRAINTS


def _store(paths: StudyPaths) -> FileSystemArtifactStore:
    folder = paths.artifacts
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the artifact folder {folder} ({exc.strerror}): check --studies-dir"
        ) from None
    return FileSystemArtifactStore(folder)


def _trial_record(trial: FrozenTrial) -> dict[str, Any]:
    """What a trial without a server log gets instead: its config, outcome and log tail."""
    record = TrialRecord.from_trial(trial)
    return {
        "trial": trial.number,
        "state": trial.state.name,
        "values": trial.values,
        "params": trial.params,
        "constraints": dict(trial.constraints),
        "log_tail": "",
        **({} if record is None else record.to_attrs()),
    }


def _files(trial: FrozenTrial, logs: Path, scratch: Path) -> Iterator[Path]:
    """The files to attach to ``trial``, each named as the dashboard should show it."""
    log = logs / f"trial-{trial.number}.log"
    if log.is_file():
        yield log
    else:
        record = scratch / f"trial-{trial.number}.json"
        record.write_text(json.dumps(_trial_record(trial), indent=2, default=str))
        yield record
    for run in sorted((logs / f"confirm-{trial.number}").glob("trial-*.log")):
        named = scratch / f"confirm-{trial.number}-run-{run.stem.removeprefix('trial-')}.log"
        named.write_bytes(run.read_bytes())
        yield named


def attach_artifacts(
    study: optuna.Study,
    trial: FrozenTrial,
    paths: StudyPaths,
    store: FileSystemArtifactStore | None = None,
) -> int:
    """Attaches finished ``trial``'s logs (or its JSON record) unless already attached; returns
    how many (RDB storages only; others get none)."""
    # Past the cache: Optuna caches finished trials, so it would miss a backfilled attribute.
    storage = optuna_private.rdb_of(study)
    if storage is None:
        return 0
    have = {meta.filename for meta in get_all_artifact_meta(trial, storage=storage)}
    store = store or _store(paths)
    added = 0
    with tempfile.TemporaryDirectory(prefix="spectune-artifacts-") as scratch:
        for path in _files(trial, paths.logs, Path(scratch)):
            if path.name not in have:
                _backfill_artifact(study, trial, store, path)
                added += 1
    return added


def _mimetype(path: Path) -> str:
    return "application/json" if path.suffix == ".json" else "text/plain"


def _backfill_artifact(
    study: optuna.Study, trial: FrozenTrial, store: FileSystemArtifactStore, path: Path
) -> None:
    # The same metadata upload_artifact writes (a JSON string), with a fresh artifact ID.
    meta = ArtifactMeta(str(uuid.uuid4()), path.name, _mimetype(path), None)
    key = optuna_private.ARTIFACTS_PREFIX + meta.artifact_id
    optuna_private.write_finished_trial_attr(study, trial, key, json.dumps(asdict(meta)))
    with path.open("rb") as body:
        store.write(meta.artifact_id, body)


@dataclass(frozen=True)
class DashboardInfo:
    """What :func:`prepare_dashboard` found and fixed."""

    study_id: int
    trials: int
    infeasible: int  # completed trials the dashboard shows as infeasible
    constraints_fixed: int  # legacy lists written now
    artifacts_added: int
    artifact_dir: Path
    recommendation_noted: bool  # the study's note holds the recommendation (none was a person's)


def _keyed_constraints(trial: FrozenTrial) -> list[float] | None:
    # A study older than the errors constraint has two keys on every trial, one that limits
    # the stream four; either way the list is in key order, the one every trial shares.
    keyed = trial.constraints
    keys = sorted(k for k in keyed if not k.isdigit())  # digits: the legacy list read back
    if not set(LEGACY_CONSTRAINT_KEYS) <= set(keys):
        return None
    return [float(keyed[key]) for key in keys]


def prepare_dashboard(study: optuna.Study, paths: StudyPaths) -> DashboardInfo:
    """Makes names, feasibility and logs visible to optuna-dashboard 0.21 (module docstring)."""
    space = stored_space(study)
    if not study.metric_names:  # a study spectune created before it named them
        study.set_metric_names(list(Limits.of(space).names if space else OBJECTIVE_NAMES))
    noted = space is not None and write_note(study, space)
    store = _store(paths)
    fixed = added = infeasible = 0
    for trial in study.get_trials(deepcopy=False):
        if trial.state is TrialState.COMPLETE:
            legacy = trial.system_attrs.get(LEGACY_CONSTRAINTS)
            keyed = _keyed_constraints(trial)
            if keyed is not None and legacy != keyed:
                fixed += optuna_private.write_finished_trial_attr(
                    study, trial, LEGACY_CONSTRAINTS, keyed
                )
                legacy = keyed
            infeasible += any(float(c) > 0 for c in legacy or ())
        if trial.state in (TrialState.COMPLETE, TrialState.FAIL):
            added += attach_artifacts(study, trial, paths, store)
    return DashboardInfo(
        optuna_private.study_id(study),
        len(study.trials),
        infeasible,
        fixed,
        added,
        paths.artifacts,
        noted,
    )


def serve_dashboard(storage_url: str, paths: StudyPaths, host: str, port: int) -> None:
    """Runs optuna-dashboard on ``storage_url`` with the study's artifacts until the first
    signal, which it raises (``KeyboardInterrupt``, or ``Terminated`` for SIGTERM/SIGHUP)."""
    serve(storage_url, _store(paths), host, port)
