"""A study's power correction for ``spectune estimate --study``: the power model scaled to what
the study's GPUs drew (:mod:`tuner.sim.twin.power`).

The measured pairs come from the study's trial records: each pair's GPU window (its mean power,
its length, the power limit in force, whether it was throttled), with the server config, the
concurrency and the temperature it was measured at.
"""

from __future__ import annotations

from collections.abc import Iterable

import optuna

from tuner.config.space import SearchSpace
from tuner.results import MODELLED, Source
from tuner.sim.twin.power import MeasuredPower, PowerScale, fit_power_scale
from tuner.sim.virtual_time import Physics
from tuner.study.storage import open_storage
from tuner.trial.record import TrialRecord, records, stored_space

__all__ = ["measured_power", "study_power"]


def measured_power(trials: Iterable[TrialRecord]) -> list[MeasuredPower]:
    """Every measured pair whose GPUs were read through its window, throttled ones left out."""
    pairs = []
    for record in trials:
        if record.source is not Source.MEASURED or record.duplicate_of is not None:
            continue
        for level in record.levels:
            mean, seconds = level.get("gpu_mean_power_w"), level.get("gpu_seconds")
            source = level.get("gpu_energy_from")
            if not mean or not seconds or source in (None, MODELLED) or level.get("gpu_throttled"):
                continue
            limits = level.get("gpu_power_limit_w") or []
            pairs.append(
                MeasuredPower(
                    server=record.server,
                    temperature=float(level.get("temperature", record.trial_temperature)),
                    concurrency=int(level["concurrency"]),
                    mean_power_w=float(mean),
                    seconds=float(seconds),
                    limit_w=min(limits) if limits else None,
                )
            )
    return pairs


def study_power(url: str, name: str, physics: Physics) -> PowerScale | None:
    """The power scale study ``name`` (in ``url``) measured; None where it read too few pairs
    (or none: a simulated study, a host without NVML)."""
    study = optuna.load_study(study_name=name, storage=open_storage(url))
    space: SearchSpace | None = stored_space(study)
    if space is None:
        return None
    pairs = measured_power(records(study.get_trials(deepcopy=False)))
    return fit_power_scale(space.hardware, space.workload, pairs, physics)
