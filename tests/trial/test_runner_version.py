"""The trial pre-screen applies the study's vLLM version's memory rules, not the newest ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.catalog.gpus import parse_hardware
from tuner.config.trial import ClientConfig, LaunchContext, TrialConfig
from tuner.config.vllm_args import parse_version
from tuner.config.workload import WorkloadSpec
from tuner.errors import FailureKind, StartupFailure
from tuner.sim.reference import REFERENCE_HARDWARE, reference_server
from tuner.trial.runner import TrialRunner, predict_memory
from tuner.trial.scoring import Limits, TrialStatus

HARDWARE = parse_hardware(REFERENCE_HARDWARE)
SERVER = reference_server(4, 0.96)  # 32B-AWQ + 0.5B at 0.96 on 2x 4090
# At 0.98 vLLM 0.9.2's rules put it short by more than the memory model's error (the field
# notes' OOM); the newest rules by less, so the pre-screen launches it.
TIGHT = reference_server(4, 0.98)


class _NeverStarted:
    """A backend whose start says so: the pre-screen must decide before any launch."""

    name = "never"

    def start(self, server: object, context: object) -> object:
        raise StartupFailure(FailureKind.CRASH, "started", 1, "")

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("version", "fits"), [("0.32.0", True), ("0.9.2", False)])
def test_predict_memory_follows_the_version(version: str, fits: bool) -> None:
    assert predict_memory(HARDWARE, SERVER, parse_version(version)).fits is fits


def test_an_old_study_is_screened_with_the_old_rules(tmp_path: Path) -> None:
    runner = TrialRunner(
        _NeverStarted(),  # type: ignore[arg-type]
        HARDWARE,
        Limits(500.0),
        version=parse_version("0.9.2"),
    )
    config = TrialConfig(TIGHT, ClientConfig(0.2, WorkloadSpec()))
    outcome = runner.run(config, LaunchContext("s", 0, tmp_path), seed=0)
    assert outcome.status is TrialStatus.OOM_PREDICTED
    assert "while capturing CUDA graphs" in (outcome.failure or "")
    newest = TrialRunner(_NeverStarted(), HARDWARE, Limits(500.0))  # type: ignore[arg-type]
    with pytest.raises(StartupFailure, match="started"):  # launched: nothing skipped it
        newest.run(config, LaunchContext("s", 1, tmp_path), seed=0)
