"""Failed requests fail the trial: a process-backend study on the fake server with faults.

With HTTP 500s, malformed streams or a server that dies mid-benchmark, no trial that lost
requests is recommended, each says why, a server that failed requests is never reused, and a
hung server costs one request timeout, not one per request.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.trial.traffic_support import fake_request, small_space
from tuner.analysis.picks import recommend
from tuner.study.optimize import optimize
from tuner.trial.record import records
from tuner.trial.scoring import TrialStatus

pytestmark = pytest.mark.usefixtures("fast_fake_server")


def test_a_healthy_fake_server_is_recommended_with_nothing_lost(tmp_path: Path) -> None:
    result = optimize(fake_request(tmp_path, small_space(tmp_path), 2))
    done = records(result.handle.get_trials())
    assert [r.status for r in done] == [TrialStatus.OK] * 2
    assert all(r.failed_share == 0.0 and r.feasible for r in done)
    chosen = recommend(result.handle)
    assert chosen is not None and not chosen.record.lost_requests


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ("http-500-every=3", "HTTP 500"),
        ("malformed-sse-every=2", "malformed SSE"),
        ("crash-after=150", "vLLM died during measurement"),
    ],
)
def test_a_trial_that_lost_requests_is_never_recommended_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str, error: str
) -> None:
    # crash-after=150: the server dies in the second (level, temperature) pair, after the first
    # was served: a config that breaks the server under load, not an infrastructure fault.
    monkeypatch.setenv("SPECTUNE_SIM_FAULT", fault)
    result = optimize(fake_request(tmp_path, small_space(tmp_path), 3))
    assert recommend(result.handle) is None  # every trial lost requests: nothing to deploy
    done = records(result.handle.get_trials())
    lost = [r for r in done if r.status is TrialStatus.FAILED_REQUESTS]
    assert lost, [(r.status, r.failure) for r in done]
    for record in lost:
        assert not record.feasible and not record.measured and record.throughput is None
        assert record.constraints["errors"] > 0 and record.failed_share
        assert record.failure is not None and "requests failed" in record.failure
        assert error in record.failure or "stopped answering" in record.failure
    # A server that failed requests is never reused: every trial started its own.
    assert all(r.restarted for r in done if r.state.name == "COMPLETE")


def test_a_hung_server_costs_one_request_timeout_not_one_per_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The check and the warm-up take 17 tokens; the first measured requests then hang.
    monkeypatch.setenv("SPECTUNE_SIM_FAULT", "hang-after=40")
    began = time.monotonic()
    result = optimize(fake_request(tmp_path, small_space(tmp_path), 1))
    took = time.monotonic() - began
    (record,) = records(result.handle.get_trials())
    assert record.status is TrialStatus.FAILED_REQUESTS, record.failure
    assert record.failure is not None and "stopped answering" in record.failure
    # Six requests at concurrency 1 would wait 6 x 5 s; a stall stops at the first (about
    # 10 s idle; the margin is for a busy machine, which once took 20.2 s).
    assert took < 27, took
