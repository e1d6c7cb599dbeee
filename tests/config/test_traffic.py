"""The workload's traffic in a search space: weighted levels and temperatures, and the SLO."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.config.space import load_space
from tuner.config.workload import Condition, WorkloadSpec
from tuner.errors import ConfigError

TARGET = "target: Qwen/Qwen2.5-14B-Instruct-AWQ\nhardware: 4090x1\n"


def _load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "space.yaml"
    path.write_text(TARGET + text)
    return load_space(str(path))


def test_a_weighted_profile_and_a_temperature_mix(tmp_path: Path) -> None:
    space = _load(
        tmp_path,
        "workload:\n"
        "  concurrency: [{level: 1, weight: 5}, {level: 8, weight: 3}, {level: 32, weight: 2}]\n"
        "  temperature: [{value: 0.2, weight: 0.7}, {value: 0.8, weight: 0.3}]\n"
        "slo: {max_failed_requests: 0.05}\n",
    )
    workload = space.workload
    assert workload.load_profile == ((1, 0.5), (8, 0.3), (32, 0.2))
    assert workload.temperature_mix == ((0.2, 0.7), (0.8, 0.3))
    # approx in place of the weight, so == compares it within a tolerance.
    assert workload.conditions[1] == Condition(1, 0.8, pytest.approx(0.15))  # type: ignore[arg-type]
    assert sum(c.weight for c in workload.conditions) == pytest.approx(1.0)
    assert space.max_failed_requests == 0.05 and not space.tunes_temperature
    assert space.trial_temperature == pytest.approx(0.38)  # the forecasts' stand-in for the mix


def test_plain_values_mean_equal_shares(tmp_path: Path) -> None:
    workload = _load(tmp_path, "workload: {concurrency: [1, 8], temperature: 0.2}\n").workload
    assert workload.load_profile == ((1, 0.5), (8, 0.5))
    assert workload.temperature_mix == ((0.2, 1.0),)
    assert workload == WorkloadSpec(concurrency=(1, 8), temperature=(0.2,))


def test_a_tuned_temperature_replaces_the_mix_per_trial(tmp_path: Path) -> None:
    space = _load(tmp_path, "search: {temperature: {low: 0.0, high: 1.0, step: 0.5}}\n")
    assert space.tunes_temperature and "temperature" in space.tuned_dimensions
    client = space.client(0.5)
    assert client.sampling_temperature == 0.5 and client.workload.temperature_mix == ((0.5, 1.0),)


def test_an_older_single_search_temperature_is_the_workloads(tmp_path: Path) -> None:
    space = _load(tmp_path, "search: {temperature: 0.2}\n")
    assert space.workload.temperature == (0.2,) and not space.tunes_temperature
    with pytest.raises(ConfigError, match="both set: the temperatures you serve go in workload"):
        _load(tmp_path, "search: {temperature: 0.2}\nworkload: {temperature: 0.3}\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("workload: {concurrency: [1, 1]}\n", "workload.concurrency = [1, 1]: names a level twice"),
        (
            "workload: {temperature: [{value: 0.2, weight: 0}]}\n",
            "workload.temperature[0].weight = 0: must be a number > 0",
        ),
        (
            "workload: {temperature: [{weight: 1}]}\n",
            "'workload.temperature.0.value' must be set",
        ),
        ("slo: {max_failed_requests: 2}\n", "slo.max_failed_requests = 2: must be a share"),
        ("slo: {stream_gap_p99_ms: 0}\n", "slo.stream_gap_p99_ms = 0: must be a number > 0"),
        ("workload: {temperature: 3}\n", "workload.temperature[0].value = 3: must be a number"),
    ],
)
def test_bad_traffic_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_weights_must_match_their_values() -> None:
    with pytest.raises(ConfigError, match="2 weights for 1 values"):
        WorkloadSpec(temperature=(0.2,), temperature_weights=(0.5, 0.5))
