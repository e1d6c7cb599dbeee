"""What a reader of the stream feels: tokens per chunk, stalls, and when the export says a
smoothing buffer would help."""

from __future__ import annotations

from pathlib import Path

import pytest
from optuna.trial import TrialState

from tuner.config.space import load_space, space_from_dict
from tuner.export.vllm import _smoothing_note, export
from tuner.results import STALL_S, RequestRecord, Source, TrialResult
from tuner.study.optimize import OptimizeRequest, optimize
from tuner.trial.record import records
from tuner.trial.scoring import Limits, TrialStatus, score


def _request(chunks: list[float], tokens: int) -> RequestRecord:
    return RequestRecord(
        start=0.0,
        first_token=chunks[0],
        end=chunks[-1],
        chunk_times=tuple(chunks),
        completion_tokens=tokens,
    )


def _result(*requests: RequestRecord) -> TrialResult:
    return TrialResult(Source.MEASURED, 1, 1.0, tuple(requests))


def test_a_bursty_stream_shows_in_tokens_per_chunk_stalls_and_the_p99_gap() -> None:
    # Speculation: four tokens per chunk, 20 ms apart, with one 250 ms stall.
    bursty = _result(_request([0.10, 0.12, 0.14, 0.39, 0.41], tokens=20))
    summary = bursty.summary()

    assert bursty.tokens_per_chunk == 4.0
    assert bursty.stall_share == pytest.approx(1 / 4)  # one gap in four is over STALL_S
    assert summary["itl_p99_ms"] > 3 * summary["itl_p50_ms"]
    (note,) = _smoothing_note(summary)
    assert "4.0 tokens per chunk" in note and "15-20 ms smoothing buffer" in note


def test_a_smooth_stream_needs_no_buffer() -> None:
    smooth = _result(_request([0.1 + 0.02 * i for i in range(11)], tokens=11))

    assert smooth.tokens_per_chunk == 1.0
    assert smooth.stall_share == 0.0
    assert _smoothing_note(smooth.summary()) == []
    assert smooth.summary()["itl_p99_ms"] < STALL_S * 1000


def test_failed_requests_do_not_count_and_no_chunks_is_unknown() -> None:
    lost = RequestRecord(start=0.0, chunk_times=(0.1, 0.9), error="server stopped answering")
    empty = _result(lost)

    assert empty.tokens_per_chunk is None and empty.stall_share is None
    assert _smoothing_note(empty.summary()) == []


def test_a_stream_gap_limit_makes_a_choppy_trial_infeasible_and_says_so() -> None:
    bursty = _result(_request([0.10, 0.12, 0.14, 0.39, 0.41], tokens=20))  # a 250 ms stall
    smooth = _result(_request([0.1 + 0.02 * i for i in range(11)], tokens=11))

    assert score([smooth, bursty], Limits(1000)).stream is None
    choppy = score([smooth, bursty], Limits(1000, stream_gap_ms=100))
    assert choppy.status is TrialStatus.OVER_STREAM and not choppy.feasible
    worst = bursty.itl_ms(99)
    assert worst is not None and choppy.stream == pytest.approx(worst - 100)  # the worst pair
    assert list(choppy.keyed()) == ["errors", "oom", "stream", "ttft_slo"]  # Optuna's order
    fine = score([smooth], Limits(1000, stream_gap_ms=100))
    assert fine.status is TrialStatus.OK and fine.feasible and fine.stream is not None
    # Nothing measured: the other constraints say why; the key is there on every trial.
    oom = score(None, Limits(1000, stream_gap_ms=100), oom=TrialStatus.OOM)
    assert oom.keyed()["stream"] == -1.0 and not oom.feasible


@pytest.mark.parametrize("limit", [1.0, 60_000.0])
def test_a_study_with_a_stream_gap_limit_keys_every_trial_and_recommends_only_smooth_ones(
    tmp_path: Path, limit: float
) -> None:
    raw = load_space(None).source
    raw = {
        **raw,
        "slo": {**raw.get("slo", {}), "stream_gap_p99_ms": limit},
        "workload": {**raw["workload"], "requests": 4, "concurrency": [1, 8]},
    }
    space = space_from_dict(raw)
    result = optimize(OptimizeRequest("smooth", space, "sim", 4, tmp_path, confirm_top=0))
    done = [t for t in result.handle.get_trials() if t.state is TrialState.COMPLETE]
    assert done and all(set(t.constraints) >= {"stream"} for t in done)
    kept = records(done)
    if limit == 1.0:  # a 1 ms pause is shorter than any decode step
        assert all(r.status is TrialStatus.OVER_STREAM for r in kept if r.measured)
        assert result.recommended is None
    else:
        assert all(r.status is TrialStatus.OK and not r.over_stream for r in kept if r.measured)
        assert result.recommended is not None
        header = export(result.handle, space, "vllm").text
        assert "p99 stream gap limit 60000 ms" in header
