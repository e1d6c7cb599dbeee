"""The no-feasible-trial hint counts each reason and advises on the commonest."""

from __future__ import annotations

from tuner.analysis.infeasible import infeasible_reasons
from tuner.trial.scoring import TrialStatus as S


def test_lost_requests_are_named_not_the_ttft_limit() -> None:
    hint = infeasible_reasons([S.FAILED_REQUESTS, S.FAILED_REQUESTS, S.OVER_TTFT])
    assert hint.startswith("3 trials, none feasible: 1 over the TTFT limit, 2 lost requests;")
    assert "server failed requests" in hint and "ttft" not in hint.split(";")[1]


def test_each_reason_is_counted() -> None:
    statuses = [S.OOM, S.OOM_PREDICTED, S.OVER_TPOT, S.OVER_STREAM, S.FAILED, S.OK]
    hint = infeasible_reasons(statuses)
    assert "5 trials, none feasible: 2 out of memory, 1 over the TPOT limit, 1 stream gaps" in hint
    assert "1 failed to run" in hint and hint.endswith("lower max_num_batched_tokens")


def test_stream_gaps_advise_the_gap_limit() -> None:
    assert infeasible_reasons([S.OVER_STREAM]).endswith(
        "relax slo.stream_gap_p99_ms, or lower the concurrency"
    )


def test_no_finished_trial_says_so() -> None:
    assert infeasible_reasons([]) == "no trial has finished yet: run more trials"
