from tuner.results import RequestRecord, Source, TrialResult
from tuner.trial.scoring import TrialStatus, pessimistic_ttft_ms, score


def _result(ttfts_s: list[float], tokens: int = 100, duration: float = 10.0) -> TrialResult:
    records = tuple(
        RequestRecord(
            start=0.0,
            first_token=t,
            end=duration,
            chunk_times=(t,),
            prompt_tokens=10,
            completion_tokens=tokens,
        )
        for t in ttfts_s
    )
    return TrialResult(Source.MEASURED, 1, duration, records)


def test_feasible_trial_scores_throughput_and_p95_ttft() -> None:
    s = score(_result([0.1, 0.2, 0.3]), ttft_limit_ms=500)
    assert s.values[0] == 30.0
    assert 280 < s.values[1] < 300
    assert s.constraints[0] == -1.0 and s.constraints[1] < 0
    assert s.feasible and s.status is TrialStatus.OK


def test_over_the_ttft_limit_is_infeasible_but_keeps_its_numbers() -> None:
    s = score(_result([0.6, 0.7]), ttft_limit_ms=500)
    assert s.status is TrialStatus.OVER_TTFT and not s.feasible
    assert s.constraints[1] > 0 and s.values[0] == 20.0


def test_oom_is_finite_and_pessimistic() -> None:
    for status in (TrialStatus.OOM, TrialStatus.OOM_PREDICTED):
        s = score(None, ttft_limit_ms=400, oom=status)
        assert s.values == (0.0, pessimistic_ttft_ms(400))
        assert s.constraints[0] == 1.0 and s.status is status and not s.feasible


def test_failed_requests_do_not_count_as_output() -> None:
    ok = RequestRecord(0.0, 0.1, 1.0, (0.1,), 5, 50)
    failed = RequestRecord(0.0, None, None, error="HTTP 500")
    result = TrialResult(Source.MEASURED, 2, 2.0, (ok, failed))
    assert result.output_tok_s == 25.0 and result.errors == 1
