import pytest

from tuner.results import RequestRecord, Source, TrialResult
from tuner.trial.scoring import (
    CONSTRAINT_KEYS,
    LEGACY_CONSTRAINT_KEYS,
    Limits,
    TrialStatus,
    pessimistic_ttft_ms,
    score,
    stored_constraints,
)


def _result(
    ttfts_s: list[float],
    tokens: int = 100,
    duration: float = 10.0,
    concurrency: int = 1,
    failed: int = 0,
) -> TrialResult:
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
    ) + tuple(RequestRecord(0.0, error="HTTP 500: boom") for _ in range(failed))
    return TrialResult(Source.MEASURED, concurrency, duration, records)


def _named(constraints: tuple[float, float, float]) -> dict[str, float]:
    return dict(zip(CONSTRAINT_KEYS, constraints, strict=True))


def test_feasible_trial_scores_throughput_and_p95_ttft() -> None:
    s = score(_result([0.1, 0.2, 0.3]), Limits(500))
    assert s.values[0] == 30.0
    assert 280 < s.values[1] < 300
    named = _named(s.constraints)
    assert named["oom"] == -1.0 and named["ttft_slo"] < 0 and named["errors"] <= 0
    assert s.feasible and s.status is TrialStatus.OK and s.failed_share == 0.0


def test_over_the_ttft_limit_is_infeasible_but_keeps_its_numbers() -> None:
    s = score(_result([0.6, 0.7]), Limits(500))
    assert s.status is TrialStatus.OVER_TTFT and not s.feasible
    assert _named(s.constraints)["ttft_slo"] > 0 and s.values[0] == 20.0


def test_oom_is_finite_and_pessimistic() -> None:
    for status in (TrialStatus.OOM, TrialStatus.OOM_PREDICTED):
        s = score(None, Limits(400), oom=status)
        assert s.values == (0.0, pessimistic_ttft_ms(400))
        assert _named(s.constraints)["oom"] == 1.0 and s.status is status and not s.feasible


def test_the_constraint_keys_are_in_the_order_database_storages_read_them() -> None:
    assert list(CONSTRAINT_KEYS) == sorted(CONSTRAINT_KEYS)
    assert list(LEGACY_CONSTRAINT_KEYS) == sorted(LEGACY_CONSTRAINT_KEYS)


def test_failed_requests_do_not_count_as_output() -> None:
    ok = RequestRecord(0.0, 0.1, 1.0, (0.1,), 5, 50)
    failed = RequestRecord(0.0, None, None, error="HTTP 500")
    result = TrialResult(Source.MEASURED, 2, 2.0, (ok, failed))
    assert result.output_tok_s == 25.0 and result.errors == 1


def test_a_trial_that_lost_requests_is_infeasible_never_scored_on_the_survivors() -> None:
    # Failed requests end early: the survivors' throughput would beat a healthy run's.
    healthy = score(_result([0.1] * 8, duration=10.0), Limits(500))
    lossy = score(_result([0.1] * 5, duration=4.0, failed=3), Limits(500))
    assert lossy.status is TrialStatus.FAILED_REQUESTS and not lossy.feasible
    assert lossy.values == (0.0, pessimistic_ttft_ms(500))  # pessimistic, finite, as for OOM
    named = _named(lossy.constraints)
    assert named["errors"] == pytest.approx(3 / 8) and named["oom"] == -1.0
    assert lossy.failed_share == pytest.approx(3 / 8)
    assert lossy.reason is not None and lossy.reason.startswith("3 of 8 requests failed (38%")
    assert "HTTP 500: boom" in lossy.reason
    assert healthy.feasible and healthy.values[0] > lossy.values[0]


def test_the_space_may_allow_a_small_share_of_failures() -> None:
    result = _result([0.1] * 19, failed=1)
    assert score(result, Limits(500, max_failed_share=0.1)).status is TrialStatus.OK
    assert score(result, Limits(500, max_failed_share=0.0)).status is TrialStatus.FAILED_REQUESTS


def test_a_server_that_stopped_answering_fails_the_trial_whatever_the_share() -> None:
    s = score(
        _result([0.1] * 40), Limits(500, max_failed_share=1.0), broken="server stopped answering"
    )
    assert s.status is TrialStatus.FAILED_REQUESTS and _named(s.constraints)["errors"] > 0
    assert s.reason is not None and s.reason.endswith("then server stopped answering")


def test_the_traffic_is_scored_on_its_weighted_throughput_and_its_worst_ttft() -> None:
    quiet = _result([0.1, 0.1], tokens=100, duration=10.0)  # 20 tok/s, p95 100 ms
    busy = _result([0.4, 0.4], tokens=100, duration=1.0, concurrency=8)  # 200 tok/s, 400 ms
    s = score([quiet, busy], Limits(300), weights=[0.75, 0.25])
    assert s.values[0] == pytest.approx(0.75 * 20 + 0.25 * 200)
    assert s.values[1] == pytest.approx(400.0)  # the limit holds at every level
    assert s.status is TrialStatus.OVER_TTFT
    with pytest.raises(ValueError, match="2 weights for 1 results"):
        score([quiet], Limits(300), weights=[0.5, 0.5])


def test_an_older_study_keeps_two_keys_and_a_lost_trial_stays_infeasible() -> None:
    lossy = _named(score(_result([0.1], failed=1), Limits(500)).constraints)
    assert list(stored_constraints(lossy, CONSTRAINT_KEYS)) == list(CONSTRAINT_KEYS)
    legacy = stored_constraints(lossy, LEGACY_CONSTRAINT_KEYS)
    assert list(legacy) == ["oom", "ttft_slo"] and legacy["ttft_slo"] > 0
    healthy = _named(score(_result([0.1]), Limits(500)).constraints)
    assert stored_constraints(healthy, LEGACY_CONSTRAINT_KEYS)["ttft_slo"] < 0
