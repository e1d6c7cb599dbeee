"""`spectune estimate` follows the memory and draft rules of the vLLM version asked for."""

from __future__ import annotations

import pytest

from tuner.catalog.gpus import parse_hardware
from tuner.config.vllm_version import parse_version
from tuner.config.workload import WorkloadSpec
from tuner.errors import IncompatibleDraftError
from tuner.sim.estimate import estimate
from tuner.sim.reference import REFERENCE_DRAFT, REFERENCE_HARDWARE, REFERENCE_TARGET

HARDWARE = parse_hardware(REFERENCE_HARDWARE)
NEW = parse_version("0.32.0")
OLD = parse_version("0.9.2")


def test_estimate_of_the_default_config_follows_the_version_asked_for() -> None:
    """`spectune estimate` for 32B-AWQ + 0.5B at 0.96 on 4090x2: 0.32 starts it, 0.9.2 cannot."""
    workload = WorkloadSpec("code", 512, 256, (1,), 8)
    new = estimate(
        HARDWARE,
        REFERENCE_TARGET,
        draft=REFERENCE_DRAFT,
        workload=workload,
        gpu_memory_utilization=0.96,
        vllm_version=NEW,
    )
    assert new.memory.fits and new.memory.rules == "0.21+" and new.result is not None
    assert new.server.quantization is None  # vLLM detects AWQ from the checkpoint
    # 0.9.2's V0 engine asserts equal vocabulary sizes: the 0.5B draft is refused outright...
    with pytest.raises(IncompatibleDraftError, match=r"vLLM 0\.9\.2 refuses that pair"):
        estimate(
            HARDWARE,
            REFERENCE_TARGET,
            draft=REFERENCE_DRAFT,
            workload=workload,
            gpu_memory_utilization=0.96,
            vllm_version=OLD,
        )
    # ...and its memory rules put the CUDA graphs outside the budget, where 0.96 runs out
    # (shown with a same-vocabulary draft; test_0_96_follows_each_versions_rules has the 0.5B).
    same_vocab = {
        version: estimate(
            HARDWARE,
            REFERENCE_TARGET,
            draft="Qwen/Qwen2.5-7B-Instruct",
            workload=workload,
            gpu_memory_utilization=0.96,
            vllm_version=version,
        ).memory
        for version in (OLD, NEW)
    }
    assert same_vocab[NEW].fits
    assert not same_vocab[OLD].fits and "while capturing CUDA graphs" in same_vocab[OLD].reason
