"""The twin's power correction: one scale on the power model, fitted to measured GPU windows."""

from __future__ import annotations

from dataclasses import replace

import pytest
from optuna.trial import TrialState

from tuner.catalog.gpus import parse_hardware
from tuner.catalog.models import load_model
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.config.workload import WorkloadSpec
from tuner.results import Source
from tuner.sim.estimate import estimate
from tuner.sim.power import SHIPPED_POWER, power_model
from tuner.sim.twin.power import MIN_PAIRS, MeasuredPower, fit_power_scale, scaled
from tuner.sim.virtual_time import predict
from tuner.study.twin_power import measured_power
from tuner.trial.record import TrialRecord
from tuner.trial.scoring import TrialStatus

HARDWARE = parse_hardware("4090x1")
TARGET = "Qwen/Qwen2.5-14B-Instruct-AWQ"
PLAIN = ServerConfig(TARGET, 1, 8192, 0.9, 2048)
NGRAM = replace(PLAIN, speculative=SpeculativeConfig(SpecMethod.NGRAM, 1))
WORKLOAD = WorkloadSpec(prompt_set="code", input_tokens=256, output_tokens=64, requests=4)


def _host(server: ServerConfig, concurrency: int, scale: float) -> MeasuredPower:
    """What a host whose boards draw ``scale`` times the model above idle reads for a pair."""
    power = power_model(HARDWARE.gpu, constants=scaled(SHIPPED_POWER, scale))
    result = predict(
        HARDWARE, load_model(TARGET), None, server, 0.2, WORKLOAD, concurrency, power=power
    )
    assert result.gpu is not None and result.gpu.mean_power_w is not None
    return MeasuredPower(
        server, 0.2, concurrency, result.gpu.mean_power_w, result.duration_s, 450.0
    )


def test_the_scale_of_a_host_that_draws_more_is_recovered() -> None:
    pairs = [_host(PLAIN, 1, 0.8), _host(NGRAM, 1, 0.8), _host(PLAIN, 2, 0.8)]
    fitted = fit_power_scale(HARDWARE, WORKLOAD, pairs)
    assert fitted is not None and fitted.pairs == 3
    # Steps the model draws at the limit stay there on any host: the mean moves a little less.
    assert fitted.scale == pytest.approx(0.8, rel=0.05) and fitted.spread < 0.05
    assert f"scaled x{fitted.scale:.2f} to the study's 3 measured pairs" in fitted.describe()
    assert fit_power_scale(HARDWARE, WORKLOAD, pairs[: MIN_PAIRS - 1]) is None  # too few


def test_a_pair_the_model_puts_at_the_limit_says_nothing_of_the_demand() -> None:
    capped = [replace(_host(PLAIN, 1, 0.8), limit_w=100.0) for _ in range(MIN_PAIRS)]
    assert fit_power_scale(HARDWARE, WORKLOAD, capped) is None
    # Three ngram requests draw the 4090's 450 W in the model: left out, three pairs are two.
    busy = replace(PLAIN, speculative=SpeculativeConfig(SpecMethod.NGRAM, 3))
    pairs = [_host(PLAIN, 1, 0.8), _host(PLAIN, 2, 0.8), _host(busy, 8, 0.8)]
    assert fit_power_scale(HARDWARE, WORKLOAD, pairs) is None


def test_only_measured_unthrottled_read_pairs_count() -> None:
    level = {
        "concurrency": 2,
        "temperature": 0.2,
        "gpu_mean_power_w": 300.0,
        "gpu_seconds": 4.0,
        "gpu_energy_from": "counter",
        "gpu_power_limit_w": [450.0],
        "gpu_throttled": False,
    }
    record = TrialRecord(
        number=0,
        state=TrialState.COMPLETE,
        server=PLAIN,
        trial_temperature=0.2,
        status=TrialStatus.OK,
        source=Source.MEASURED,
        levels=(
            level,
            {**level, "gpu_throttled": True},
            {**level, "gpu_energy_from": None, "gpu_mean_power_w": None},
        ),
    )
    simulated = replace(record, number=1, source=Source.SIMULATED)
    modelled = replace(record, number=2, levels=({**level, "gpu_energy_from": "model"},))
    (pair,) = measured_power([record, simulated, modelled])
    assert pair == MeasuredPower(PLAIN, 0.2, 2, 300.0, 4.0, 450.0)


def test_estimate_with_a_study_s_scale_draws_it_and_says_so() -> None:
    pairs = [_host(PLAIN, 1, 1.1), _host(NGRAM, 1, 1.1), _host(PLAIN, 2, 1.1)]
    fitted = fit_power_scale(HARDWARE, WORKLOAD, pairs)
    assert fitted is not None
    shipped = estimate(HARDWARE, TARGET, workload=WORKLOAD)
    host = estimate(HARDWARE, TARGET, workload=WORKLOAD, power_scale=fitted)
    assert shipped.result is not None and host.result is not None
    assert (host.result.joules_per_token or 0) > (shipped.result.joules_per_token or 0)
    assert host.power_error == fitted.spread < (shipped.power_error or 0)
