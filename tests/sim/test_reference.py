"""The simulator reproduces reference run A (BRIEF.md) within 10 %, noise-free and seeded."""

from __future__ import annotations

import statistics
import time

import pytest

from tuner.catalog.gpus import parse_hardware
from tuner.catalog.models import load_model
from tuner.config.workload import WorkloadSpec
from tuner.results import Source, TrialResult
from tuner.sim.reference import (
    REFERENCE_DRAFT,
    REFERENCE_HARDWARE,
    REFERENCE_ROWS,
    REFERENCE_TARGET,
    REFERENCE_TEMPERATURE,
    REFERENCE_VERSION,
    REFERENCE_WORKLOADS,
    ReferenceRow,
    reference_server,
)
from tuner.sim.virtual_time import predict, simulate

HARDWARE = parse_hardware(REFERENCE_HARDWARE)
TARGET = load_model(REFERENCE_TARGET)
DRAFT = load_model(REFERENCE_DRAFT)
TOLERANCE = 0.10


def _run(row: ReferenceRow, seed: int | None = None) -> TrialResult:
    draft = DRAFT if row.k else None
    args = (
        HARDWARE,
        TARGET,
        draft,
        reference_server(row.k),
        REFERENCE_TEMPERATURE,
        REFERENCE_WORKLOADS[row.workload],
        1,
    )
    if seed is None:
        return predict(*args, version=REFERENCE_VERSION)
    return simulate(*args, seed=seed, version=REFERENCE_VERSION)


@pytest.mark.parametrize("row", REFERENCE_ROWS, ids=lambda r: f"{r.workload}-k{r.k}")
def test_predict_reproduces_reference_row(row: ReferenceRow) -> None:
    result = _run(row)
    assert result.source is Source.PREDICTED
    assert result.output_tok_s == pytest.approx(row.output_tok_s, rel=TOLERANCE)
    assert result.ttft_ms(50) == pytest.approx(row.ttft_ms, rel=TOLERANCE)
    if row.acceptance_rate is None:
        assert result.spec_decode is None
    else:
        assert result.acceptance_rate == pytest.approx(row.acceptance_rate, rel=TOLERANCE)


@pytest.mark.parametrize("row", REFERENCE_ROWS, ids=lambda r: f"{r.workload}-k{r.k}")
def test_simulate_scatters_around_predict(row: ReferenceRow) -> None:
    predicted = _run(row)
    runs = [_run(row, seed) for seed in range(5)]
    assert all(r.source is Source.SIMULATED for r in runs)
    speeds = [r.output_tok_s for r in runs]
    assert statistics.mean(speeds) == pytest.approx(predicted.output_tok_s, rel=0.05)
    assert len(set(speeds)) == len(speeds), "each seed must give its own noise"
    for r in runs:
        assert r.output_tok_s == pytest.approx(predicted.output_tok_s, rel=0.12)
        assert r.ttft_ms(50) == pytest.approx(predicted.ttft_ms(50), rel=0.12)
        assert r.output_tok_s == pytest.approx(row.output_tok_s, rel=0.15)
        if row.acceptance_rate is not None:
            assert r.acceptance_rate == pytest.approx(row.acceptance_rate, rel=0.10)


def test_same_seed_same_result() -> None:
    row = REFERENCE_ROWS[1]
    assert _run(row, seed=11) == _run(row, seed=11)
    assert _run(row, seed=11) != _run(row, seed=12)
    assert _run(row) == _run(row)


def test_simulate_is_fast() -> None:
    # Bounds with room for a machine shared by several test runs (about 0.05 s and 0.5 s alone):
    # a study simulates hundreds of these, so a tenfold slowdown is what this guards against.
    server = reference_server(4)
    start = time.perf_counter()
    simulate(HARDWARE, TARGET, DRAFT, server, 0.2, REFERENCE_WORKLOADS["code"], 1, seed=0)
    assert time.perf_counter() - start < 0.5
    busy = WorkloadSpec("code", 384, 256, requests=128)
    start = time.perf_counter()
    simulate(HARDWARE, TARGET, DRAFT, server, 0.2, busy, 64, seed=0)
    assert time.perf_counter() - start < 5.0
