"""A lossy verifier's quality check: every fly trial compared with standard verification on
the workload's prompts, its result stored and scored; lossless trials are never checked."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.trial.traffic_support import fake_request
from tuner.config.space import SearchSpace, space_from_dict
from tuner.config.trial import LaunchContext, ServerConfig, TrialConfig
from tuner.config.verification import Verification
from tuner.study.optimize import optimize
from tuner.trial.backends.sim import SimBackend
from tuner.trial.record import TrialRecord, constraint_keys, records
from tuner.trial.runner import TrialRunner
from tuner.trial.scoring import QUALITY_KEY, TrialStatus

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def _space(min_similarity: float, verifications: list[str], **workload: Any) -> SearchSpace:
    head = {
        "method": "eagle3",
        "model": EAGLE3,
        "num_speculative_tokens": 3,
        "rejection_sample_method": verifications,
    }
    raw = {
        "name": "lossy",
        "hardware": "4090x1",
        "target": LLAMA,
        "vllm": {"version": "0.34.0"},
        "quality": {"allow_lossy": True, "min_similarity": min_similarity, "prompts": 3},
        "workload": {
            "prompt_set": "creative",
            "input_tokens": 64,
            "output_tokens": 16,
            "requests": 4,
            "warmup": 0,
            "temperature": [{"value": 0.0}],
            **workload,
        },
        "search": {"methods": ["none", head], "max_num_batched_tokens": [2048]},
    }
    return space_from_dict(raw, "lossy.yaml")


class Starts(SimBackend):
    """The simulator, counting the servers it starts."""

    def __init__(self, space: SearchSpace) -> None:
        super().__init__(space.hardware, version=space.version)
        self.started: list[ServerConfig] = []

    def start(self, server: ServerConfig, context: LaunchContext) -> Any:
        self.started.append(server)
        return super().start(server, context)


def _config(space: SearchSpace, verification: Verification) -> TrialConfig:
    exact = space.speculative(space.choices[1].label, 3)
    assert exact is not None
    spec = dataclasses.replace(exact, rejection_sample_method=verification)
    return space.config(spec, 1.0, 2048, 0.0)


def test_a_fly_trial_is_checked_against_the_lossless_server_that_ran_before(
    tmp_path: Path,
) -> None:
    space = _space(0.999, ["standard", "fly"])
    backend = Starts(space)
    runner = TrialRunner.for_space(backend, space)
    context = LaunchContext("lossy", 0, tmp_path)
    exact = runner.run(_config(space, Verification.STANDARD), context, seed=0)
    assert exact.quality is None and exact.score.keyed()[QUALITY_KEY] < 0
    lossy = runner.run(_config(space, Verification.FLY), context, seed=0)
    # The reference came from the standard server before fly replaced it: no extra start.
    assert len(backend.started) == 2
    assert lossy.quality is not None and lossy.quality.prompts == 3
    assert lossy.quality.similarity < 0.999
    assert lossy.status is TrialStatus.BELOW_QUALITY and not lossy.score.feasible
    # fly accepts what standard rejects: more per step, which is why it tempts at all.
    assert lossy.primary is not None and exact.primary is not None
    assert lossy.primary.acceptance_rate > exact.primary.acceptance_rate  # type: ignore[operator]


def test_a_first_fly_trial_starts_a_standard_server_for_its_reference(tmp_path: Path) -> None:
    space = _space(0.5, ["fly"])
    backend = Starts(space)
    runner = TrialRunner.for_space(backend, space)
    outcome = runner.run(_config(space, Verification.FLY), LaunchContext("l", 0, tmp_path), 0)
    assert [s.speculative.rejection_sample_method for s in backend.started if s.speculative] == [
        Verification.FLY,
        Verification.STANDARD,
    ]
    assert outcome.quality is not None and outcome.status is TrialStatus.OK
    assert outcome.score.keyed()[QUALITY_KEY] == pytest.approx(0.5 - outcome.quality.similarity)


def test_a_space_without_the_opt_in_carries_no_quality_constraint(tmp_path: Path) -> None:
    raw = _space(0.9, ["standard"]).source
    raw.pop("quality")
    space = space_from_dict(raw, "exact.yaml")
    runner = TrialRunner.for_space(SimBackend(space.hardware, version=space.version), space)
    outcome = runner.run(
        _config(space, Verification.STANDARD), LaunchContext("e", 0, tmp_path), seed=0
    )
    assert QUALITY_KEY not in outcome.score.keyed() and outcome.quality is None


def test_a_study_stores_every_fly_trials_check_through_the_fake_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The process backend runs the shipped fake server: the answers travel over HTTP.
    monkeypatch.setenv("SPECTUNE_SIM_VLLM_VERSION", "0.34.0")
    space = _space(0.5, ["standard", "fly"], concurrency=[{"level": 2}])
    request = dataclasses.replace(fake_request(tmp_path, space, 6), sampler="random")
    result = optimize(request)
    assert constraint_keys(result.handle) == ("errors", "oom", QUALITY_KEY, "ttft_slo")
    done: list[TrialRecord] = records(result.handle.get_trials())
    fly = [
        r
        for r in done
        if r.server.speculative and r.server.speculative.rejection_sample_method.lossy
    ]
    assert fly, "the random sampler drew no fly trial"
    for record in done:
        if record in fly and record.duplicate_of is None:
            assert record.quality is not None and 0.5 < record.quality.similarity < 1.0
            assert record.constraints[QUALITY_KEY] < 0 and record.feasible
        elif record not in fly:
            assert record.quality is None and record.constraints[QUALITY_KEY] < 0
