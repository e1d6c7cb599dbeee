"""The quality check of a lossy verifier: word-level comparison, and greedy answers read from
the shipped fake server over HTTP (standard against ``fly`` verification)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.testbed.fake_server import DRAFT, start_fake_server
from tuner.bench.quality import check_requests, compare, complete
from tuner.config.workload import WorkloadSpec
from tuner.errors import MeasurementError
from tuner.results import Endpoint

CREATIVE = WorkloadSpec(prompt_set="creative", input_tokens=64, output_tokens=16, requests=4)


def test_identical_answers_are_similar_throughout() -> None:
    check = compare(["a b c", "d e"], ["a b c", "d e"])
    assert (check.prompts, check.identical, check.similarity) == (2, 2, 1.0)


def test_similarity_is_the_mean_share_of_words_kept_in_order() -> None:
    # One word of four changed: difflib's ratio is 2 * 3 / 8; the other answer is identical.
    check = compare(["a b c d", "x y"], ["a b Z d", "x y"])
    assert check.identical == 1
    assert check.similarity == pytest.approx((0.75 + 1.0) / 2)


def test_answers_for_other_prompts_are_refused() -> None:
    with pytest.raises(ValueError, match="1 answers for 2"):
        compare(["a", "b"], ["a"])


def test_the_check_sends_the_workloads_prompts_at_its_own_length() -> None:
    requests = check_requests(CREATIVE, 3, 40)
    assert [r.max_tokens for r in requests] == [40, 40, 40]
    assert [r.prompt for r in requests] == [
        r.prompt for r in check_requests(dataclasses.replace(CREATIVE, requests=9), 3, 40)
    ]


def _serve(tmp_path: Path, verification: str) -> tuple[Endpoint, object]:
    spec = {
        "method": "draft_model",
        "model": DRAFT,
        "num_speculative_tokens": 4,
        "rejection_sample_method": verification,
    }
    running = start_fake_server(
        "--served-model-name",
        "m",
        "--speculative-config",
        json.dumps(spec),
        "--sim-vllm-version",
        "0.34.0",
        log_path=tmp_path / f"{verification}.log",
    )
    return Endpoint(running.base_url, "m"), running


def test_fly_answers_differ_from_standard_verification_on_the_fake_server(
    tmp_path: Path,
) -> None:
    requests = check_requests(CREATIVE, 4, 48)
    answers = {}
    for verification in ("standard", "fly"):
        endpoint, running = _serve(tmp_path, verification)
        try:
            answers[verification] = complete(endpoint, requests)
            assert complete(endpoint, requests) == answers[verification]  # greedy: repeatable
        finally:
            running.stop()  # type: ignore[attr-defined]
    exact = compare(answers["standard"], answers["standard"])
    lossy = compare(answers["standard"], answers["fly"])
    assert exact.similarity == 1.0
    assert 0.5 < lossy.similarity < 1.0  # a few words changed, most kept
    assert all(len(a.split()) == 48 for a in answers["fly"])


def test_a_server_that_does_not_answer_is_a_measurement_error() -> None:
    with pytest.raises(MeasurementError, match="quality check"):
        complete(Endpoint("http://127.0.0.1:9", "m"), check_requests(CREATIVE, 1, 8), timeout_s=2)
