"""What a reader of the stream feels: tokens per chunk, stalls, and when the export says a
smoothing buffer would help."""

from __future__ import annotations

import pytest

from tuner.export.vllm import _smoothing_note
from tuner.results import STALL_S, RequestRecord, Source, TrialResult


def _request(chunks: list[float], tokens: int) -> RequestRecord:
    return RequestRecord(
        start=0.0, first_token=chunks[0], end=chunks[-1], chunk_times=tuple(chunks),
        completion_tokens=tokens,
    )  # fmt: skip


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
