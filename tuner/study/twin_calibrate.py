"""A host's calibrated twin: a handful of designed launches, stored for later studies and estimates.

:func:`calibrate` runs a small designed set of configs on a backend, each chosen to pin one of
the twin's parameters, fits the twin (:func:`tuner.sim.twin.fit.fit`) and writes it to
``STUDIES_DIR/calibration/<hardware>--<model>.json``:

1. no speculation: the target's decode pass, the engine's overhead, prefill, memory (NVML peak);
2. the smallest draft at K=1: the draft's pass cost, next to (1);
3. that draft at the largest K: how acceptance decays with the position;
4. the same server at the highest temperature: the temperature penalty (no restart);
5. ngram and every other draft at a middle K: their acceptance.

Every config runs at the memory setting the shipped model gives the most room to spare.
A run that lost requests is no measurement of the host: the calibration is then refused and
nothing written. The file records its source (measured, or simulated by ``--backend sim``);
a new study of that hardware and model starts from it (:func:`seed_study`), a measured study
only from a measured calibration. ``spectune estimate --study`` predicts with a study's fitted
twin (:func:`study_physics`), only for the model and GPUs it was fitted to.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna

from tuner import serde
from tuner.catalog.gpus import Hardware
from tuner.catalog.models import load_model
from tuner.config.space import NGRAM, NO_DRAFT, SearchSpace
from tuner.config.trial import LaunchContext, TrialConfig
from tuner.errors import ConfigError
from tuner.results import Source
from tuner.search.twin_screen import TwinScreen
from tuner.search.twin_steer import PRIOR_ATTR, stored_twin
from tuner.sim.twin.fit import FittedTwin, Observation, fit, observe
from tuner.sim.twin.model import TwinPhysics
from tuner.sim.virtual_time import SHIPPED, Physics
from tuner.study.paths import default_storage
from tuner.study.storage import open_storage, safe_url, study_exists
from tuner.trial.backends import Backend
from tuner.trial.record import stored_space
from tuner.trial.runner import TrialOutcome, TrialRunner
from tuner.trial.scoring import Limits, TrialStatus

__all__ = [
    "Calibration",
    "calibrate",
    "calibration_path",
    "calibration_plan",
    "load_calibration",
    "seed_study",
    "study_physics",
    "study_twin",
]

CALIBRATION_DIR = "calibration"
_SOURCE_KEY = "source"  # beside the twin's own keys in the file; absent: written before 0.2


def calibration_path(studies_dir: Path, space: SearchSpace) -> Path:
    """Where the calibrated twin of ``space``'s hardware and target lives."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{space.hardware.spec}--{space.target.hf_id}")
    return studies_dir / CALIBRATION_DIR / f"{slug}.json"


def load_calibration(
    studies_dir: Path, space: SearchSpace
) -> tuple[FittedTwin, Source | None] | None:
    """The host's calibrated twin for ``space`` and its source (None: not recorded); None
    when it was never calibrated."""
    path = calibration_path(studies_dir, space)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        source = data.pop(_SOURCE_KEY, None)
        return serde.load(FittedTwin, data), None if source is None else Source(source)
    except (ValueError, KeyError, TypeError):
        raise ConfigError(
            f"calibration {path} is not a twin spectune wrote: delete it and run spectune "
            "calibrate again"
        ) from None


def seed_study(study: optuna.Study, studies_dir: Path, space: SearchSpace, source: Source) -> bool:
    """Lets a new study's twin start from the host's calibration; True when there was one.

    A study that measures (``source``) never starts from a simulated calibration (or one
    whose source was not recorded): the simulator's numbers are no prior for real GPUs.
    """
    loaded = load_calibration(studies_dir, space)
    if loaded is None or PRIOR_ATTR in study.user_attrs:
        return False
    calibrated, calibrated_from = loaded
    if source is Source.MEASURED and calibrated_from is not Source.MEASURED:
        return False
    study.set_user_attr(PRIOR_ATTR, serde.dump(calibrated))
    return True


def calibration_plan(space: SearchSpace) -> list[TrialConfig]:
    """The designed configs, in the order above (request-only variants next to their server)."""
    screen = TwinScreen(space)
    prior = FittedTwin()
    k_low = int(space.num_speculative_tokens.low)
    k_high = int(space.num_speculative_tokens.high)
    k_mid = max(k_low, min(k_high, 4))
    cold, hot = screen.temperatures[0], screen.temperatures[-1]
    drafts = [d for d in space.drafts if d not in (NO_DRAFT, NGRAM)]
    models = {d: space.draft_model(d) for d in drafts}
    drafts.sort(key=lambda d: models[d].params if models[d] else 0)  # type: ignore[union-attr]
    runs: list[tuple[str, int, float]] = []
    if NO_DRAFT in space.drafts:
        runs.append((NO_DRAFT, 0, cold))
    if drafts:
        runs += [(drafts[0], k_low, cold), (drafts[0], k_high, cold)]
        if hot != cold:
            runs.append((drafts[0], k_high, hot))
    if NGRAM in space.drafts:
        runs.append((NGRAM, k_mid, cold))
    runs += [(d, k_mid, cold) for d in drafts[1:]]
    plan = []
    for draft, k, temperature in runs:
        if k not in space.k_range(draft):
            continue
        arm = screen.arm(draft, k)
        setting = max(screen.settings, key=lambda s: screen.headroom(prior, arm, s))
        plan.append(screen.config(arm, setting, temperature))
    return plan


@dataclass(frozen=True)
class Calibration:
    twin: FittedTwin
    path: Path
    outcomes: tuple[TrialOutcome, ...]


def calibrate(
    space: SearchSpace,
    backend: Backend,
    studies_dir: Path,
    log_dir: Path,
    seed: int = 0,
    on_run: Callable[[TrialOutcome], None] | None = None,
) -> Calibration:
    """Runs :func:`calibration_plan` on ``backend``, fits the twin and stores it for the host.

    Raises:
        ConfigError: a run lost requests, or nothing could be measured (every config ran out
            of memory); nothing is written then.
    """
    runner = TrialRunner(
        backend, space.hardware, Limits(space.ttft_limit_ms), version=space.version
    )
    outcomes: list[TrialOutcome] = []
    seen: list[Observation] = []
    try:
        for number, config in enumerate(calibration_plan(space)):
            context = LaunchContext("calibrate", number, log_dir)
            outcome = runner.run(config, context, seed=seed * 100_003 + number)
            outcomes.append(outcome)
            if outcome.status is not TrialStatus.OOM_PREDICTED:
                seen.append(observe(config, outcome.primary, outcome.status is TrialStatus.OOM))
            if on_run:
                on_run(outcome)
    finally:
        runner.close()
    lossy = [o for o in outcomes if o.status is TrialStatus.FAILED_REQUESTS]
    if lossy:
        raise ConfigError(
            f"calibration of {space.hardware.label} refused: {len(lossy)} of {len(outcomes)} "
            f"runs lost requests (first: {lossy[0].failure}); a server that fails requests "
            "measures nothing reliable: fix it and run spectune calibrate again"
        )
    if not any(o.primary is not None for o in outcomes):
        raise ConfigError(
            f"calibration of {space.hardware.label} measured nothing (every config ran out of "
            "memory): check the hardware and the model, or lower max_model_len in the space"
        )
    twin = fit(space.hardware, seen, FittedTwin(), space.version)
    path = calibration_path(studies_dir, space)
    path.parent.mkdir(parents=True, exist_ok=True)
    stored = {**serde.dump(twin), _SOURCE_KEY: backend.source.value}
    path.write_text(json.dumps(stored, indent=2) + "\n")
    return Calibration(twin, path, tuple(outcomes))


def study_twin(name: str, url: str) -> tuple[FittedTwin, SearchSpace]:
    """The twin fitted to study ``name`` (in ``url``), with the space it tunes.

    Raises:
        ConfigError: no such study, or it has no measured trial yet.
    """
    if not study_exists(url, name):
        raise ConfigError(
            f"no study {name!r} in {safe_url(url)}: check --study and --storage "
            "(spectune optimize creates studies)"
        )
    study = optuna.load_study(study_name=name, storage=open_storage(url))
    twin, space = stored_twin(study), stored_space(study)
    if twin is None or space is None:
        raise ConfigError(
            f"study {name!r} has no fitted twin yet: run trials with --sampler spectune first"
        )
    return twin, space


def study_physics(
    name: str | None, storage: str | None, studies_dir: Path, hardware: Hardware, model: str
) -> Physics:
    """What ``spectune estimate`` predicts with: study ``name``'s fitted twin, else the shipped
    simulator (``storage`` defaults to the study's SQLite file under ``studies_dir``).

    Raises:
        ConfigError: the study tunes another model or other GPUs than the estimate's.
    """
    if name is None:
        return SHIPPED
    twin, space = study_twin(name, storage or default_storage(name, studies_dir))
    target = load_model(model).hf_id
    if (space.target.hf_id, space.hardware.spec) != (target, hardware.spec):
        raise ConfigError(
            f"--study {name} was fitted to {space.target.hf_id} on {space.hardware.spec}, not "
            f"{target} on {hardware.spec}: its twin does not apply; leave out --study or "
            "name a study of this model and hardware"
        )
    return TwinPhysics(twin.params)
